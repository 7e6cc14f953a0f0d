"""The command line and the configuration, run as real `rootbound` processes.

E2E-080 (a valid config serves /health) lives in test_transports.py with the other HTTP tests.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOTBOUND = str(Path(sys.executable).with_name("rootbound"))
ENV_KEYS = ("ROOTBOUND_AUTH_TOKEN", "ALLOWED_COMMANDS", "ALLOWED_CWD_ROOTS", "ROOTBOUND_RESOLVER")
READ_TOOLS = ["list_roots", "list_folder", "read_file", "stat_file", "hash_file", "permissions_file"]


def rootbound(*args: str, cwd: Path | None = None, module: bool = False) -> subprocess.CompletedProcess[str]:
    """Run the installed console script (or `python -m rootbound`) with a clean environment."""
    return rootbound_all([*args], cwd=cwd, module=module)[0]


def rootbound_all(*runs: list[str], cwd: Path | None = None, module: bool = False
                  ) -> list[subprocess.CompletedProcess[str]]:
    """Several runs at once: each pays the SDK's import time, so overlap them."""
    env = {k: v for k, v in os.environ.items() if k not in ENV_KEYS}
    command = [sys.executable, "-m", "rootbound"] if module else [ROOTBOUND]
    procs = [subprocess.Popen([*command, *args], cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for args in runs]
    results = []
    for args, proc in zip(runs, procs, strict=True):
        out, err = proc.communicate(timeout=60)
        results.append(subprocess.CompletedProcess([*command, *args], proc.returncode, out, err))
    return results


def write_config(path: Path, data: Any) -> Path:
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data))
    return path


def config_error(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 1, (result.returncode, result.stdout, result.stderr)
    assert result.stdout == ""  # nothing on stdout: on stdio that would corrupt the protocol
    assert result.stderr.startswith("rootbound: configuration error: "), result.stderr
    return result.stderr


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    path = tmp_path / "data"
    path.mkdir()
    return path


# -- startup failures (E2E-081..083 and friends) --------------------------------------------------


@pytest.mark.parametrize("command", ["serve", "check"])
def test_duplicate_root_names(tmp_path: Path, data_dir: Path, command: str) -> None:
    """E2E-081: `serve` (and `check`) refuse before anything listens."""
    cfg = write_config(tmp_path / "c.yaml", {"roots": [{"name": "data", "path": str(data_dir)},
                                                       {"name": "data", "path": str(tmp_path)}]})
    extra = ["--transport", "http", "--port", "0"] if command == "serve" else []
    assert "duplicate root name 'data'" in config_error(rootbound(command, "--config", str(cfg), *extra))


def test_nonexistent_root_path(tmp_path: Path) -> None:
    """E2E-082: the message names the root and the missing path."""
    missing = tmp_path / "does-not-exist"
    cfg = write_config(tmp_path / "c.yaml", {"roots": [{"name": "data", "path": str(missing)}]})
    message = config_error(rootbound("--config", str(cfg)))
    assert "root 'data'" in message
    assert f"path does not exist: {missing}" in message


def test_unknown_tool_in_allowlist(tmp_path: Path, data_dir: Path) -> None:
    """E2E-083."""
    cfg = write_config(tmp_path / "c.yaml", {"roots": [
        {"name": "data", "path": str(data_dir), "allowed_tools": ["read_file", "nonexistent_tool"]}]})
    message = config_error(rootbound("check", "--config", str(cfg)))
    assert "roots[0].allowed_tools" in message
    assert "unknown tool 'nonexistent_tool'" in message


@pytest.mark.parametrize(("config", "expected"), [
    ({"roots": []}, "at least one root is required"),
    ({"port": 8091}, "at least one root is required"),
    ("", "at least one root is required"),
    ({"roots": [{"name": "d", "path": "DATA"}], "colour": "blue"}, "unknown key 'colour'"),
    ({"roots": [{"name": "d", "path": "DATA", "alowed_tools": ["*"]}]}, "unknown key 'roots[0].alowed_tools'"),
    ({"roots": [{"name": "d", "path": "DATA"}], "commands": {"alowed": ["git"]}}, "unknown key 'commands.alowed'"),
    ({"roots": [{"name": "d"}]}, "roots[0].path is missing"),
    ({"roots": [{"name": "d", "path": "DATA"}], "port": "eighty"}, "port must be a whole number"),
    ({"roots": [{"name": "d", "path": "DATA"}], "max_full_read_size": 0}, "max_full_read_size must be at least 1"),
    ("roots: [unclosed", "not valid YAML"),
    ("- just\n- a list\n", "must hold a mapping"),
])
def test_bad_config_files(tmp_path: Path, data_dir: Path, config: Any, expected: str) -> None:
    if isinstance(config, dict):
        config = json.loads(json.dumps(config).replace('"DATA"', json.dumps(str(data_dir))))
    cfg = write_config(tmp_path / "c.yaml", config)
    assert expected in config_error(rootbound("check", "--config", str(cfg)))


def test_a_bare_off_in_yaml_is_off(tmp_path: Path, data_dir: Path) -> None:
    """YAML 1.1 reads `off` as false; `client_roots: off` used to fail with "Input should be 'off', ..."."""
    cfg = write_config(tmp_path / "c.yaml", f"client_roots: off\ncommands:\n  sandbox: off\n"
                                            f"roots:\n  - name: data\n    path: {data_dir}\n")
    result = rootbound("check", "--config", str(cfg))
    assert result.returncode == 0, result.stderr
    assert "client roots: off;" in result.stdout


def test_check_and_startup_warn_about_a_read_only_root_inside_a_writable_one(tmp_path: Path) -> None:
    """The example config's read-only `docs` sat inside the writable `workspace`: writable after all."""
    (tmp_path / "docs").mkdir()
    (tmp_path / "scratch").mkdir()
    reading = ["list_folder", "read_file"]
    cfg = write_config(tmp_path / "c.yaml", {"roots": [
        {"name": "workspace", "path": str(tmp_path)},
        {"name": "docs", "path": str(tmp_path / "docs"), "allowed_tools": reading}]})
    inverse = write_config(tmp_path / "i.yaml", {"roots": [
        {"name": "reference", "path": str(tmp_path), "allowed_tools": reading},
        {"name": "scratch", "path": str(tmp_path / "scratch")}]})
    side_by_side = write_config(tmp_path / "s.yaml", {"roots": [
        {"name": "scratch", "path": str(tmp_path / "scratch")},
        {"name": "docs", "path": str(tmp_path / "docs"), "allowed_tools": reading}]})
    nested, reverse, fine, served = rootbound_all(
        ["check", "--config", str(cfg)], ["check", "--config", str(inverse)], ["check", "--config", str(side_by_side)],
        ["serve", "--config", str(cfg)])
    assert nested.returncode == 0, nested.stderr  # a warning, not an error
    assert ("WARNING: root 'docs' is read-only, but it lies inside the writable root 'workspace', through which the "
            "agent's file tools can still change it") in nested.stdout
    assert "WARNING: root 'reference' is read-only, but it contains the writable root 'scratch'" in reverse.stdout
    assert "WARNING" not in fine.stdout
    assert served.returncode == 0, served.stderr  # stdin is /dev/null: it serves, then stops at end of input
    assert "root 'docs' is read-only, but it lies inside the writable root 'workspace'" in served.stderr


def test_the_example_config_nests_no_read_only_root() -> None:
    result = rootbound("check", "--config", str(Path(__file__).resolve().parent.parent / "config" / "rootbound.yaml"))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "WARNING" not in result.stdout and "roots (3):" in result.stdout


def test_root_path_that_is_a_file(tmp_path: Path) -> None:
    (tmp_path / "file.txt").write_text("x")
    cfg = write_config(tmp_path / "c.yaml", {"roots": [{"name": "f", "path": str(tmp_path / "file.txt")}]})
    assert "root 'f': path is not a directory" in config_error(rootbound("check", "--config", str(cfg)))


def test_missing_config_file(tmp_path: Path) -> None:
    assert "config file not found" in config_error(rootbound("check", "--config", str(tmp_path / "nope.yaml")))


def test_duplicate_name_between_config_and_flag(tmp_path: Path, data_dir: Path) -> None:
    cfg = write_config(tmp_path / "c.yaml", {"roots": [{"name": "data", "path": str(data_dir)}]})
    message = config_error(rootbound("check", "--config", str(cfg), "--root", f"data={tmp_path}"))
    assert "duplicate root name 'data'" in message


def test_flag_root_that_does_not_exist(tmp_path: Path) -> None:
    message = config_error(rootbound("check", "--root", f"x={tmp_path / 'gone'}"))
    assert "root 'x': path does not exist" in message


# -- check ---------------------------------------------------------------------------------------


def test_check_prints_the_resolved_policy(tmp_path: Path, data_dir: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    cfg = write_config(tmp_path / "c.yaml", {
        "max_full_read_size": 4096,
        "roots": [{"name": "data", "path": "data"},  # relative to the config file's folder
                  {"name": "logs", "path": str(logs), "allowed_tools": ["read_file", "list_folder"]}]})
    result = rootbound("check", "--config", str(cfg), cwd=Path("/"))
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert f"configuration: {cfg}" in out
    assert "roots (2):" in out
    assert f"data  {data_dir}" in out
    assert "tools: all file tools" in out
    assert "tools: list_folder, read_file" in out
    assert "max_full_read_size: 4096 bytes" in out
    assert out.rstrip().endswith("ok")


def test_flag_roots_merge_with_config_roots(tmp_path: Path, data_dir: Path) -> None:
    cfg = write_config(tmp_path / "c.yaml", {"roots": [{"name": "data", "path": str(data_dir)}]})
    result = rootbound("call", "list_roots", "--config", str(cfg), "--root", f"extra={tmp_path}")
    assert result.returncode == 0, result.stderr
    assert [r["name"] for r in json.loads(result.stdout)["roots"]] == ["data", "extra"]


# -- --root naming and the default root ---------------------------------------------------------


def test_root_flag_naming(tmp_path: Path) -> None:
    """`--root NAME=PATH` takes NAME; `--root PATH` takes the folder's name, made into a valid root name."""
    for name in ("alpha", "My Project", "odd=dir"):
        (tmp_path / name).mkdir()
    result = rootbound("call", "list_roots", "--root", f"docs={tmp_path / 'alpha'}",
                       "--root", str(tmp_path / "My Project"), "--root", str(tmp_path / "odd=dir"))
    assert result.returncode == 0, result.stderr
    assert [r["name"] for r in json.loads(result.stdout)["roots"]] == ["docs", "My_Project", "odd_dir"]


def test_relative_root_flag_is_relative_to_cwd(tmp_path: Path) -> None:
    (tmp_path / "proj").mkdir()
    (tmp_path / "proj" / "marker.txt").write_text("m")
    result = rootbound("call", "list_folder", '{"root": "proj", "path": ""}', "--root", "proj", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert [e["name"] for e in json.loads(result.stdout)["entries"]] == ["marker.txt"]


def test_default_root_is_the_current_directory(tmp_path: Path) -> None:
    (tmp_path / "here.txt").write_text("hello from cwd\n")
    read, result = rootbound_all(["call", "read_file", '{"root": "workspace", "path": "here.txt"}'],
                                 ["call", "list_roots"], cwd=tmp_path)
    assert read.returncode == 0, read.stderr
    assert json.loads(read.stdout)["content"] == "hello from cwd\n"
    assert result.returncode == 0 and result.stdout, (result.returncode, result.stderr)
    roots = json.loads(result.stdout)["roots"]
    assert [r["name"] for r in roots] == ["workspace"]
    assert "read_file" in roots[0]["allowed_tools"]
    assert str(tmp_path) not in result.stdout


# -- tools and call ------------------------------------------------------------------------------


def test_tools_lists_the_read_tools(data_dir: Path) -> None:
    result = rootbound("tools", "--root", f"data={data_dir}")
    assert result.returncode == 0, result.stderr
    names = [line.split()[0] for line in result.stdout.splitlines()]
    assert names[: len(READ_TOOLS)] == READ_TOOLS
    assert "execute_command" not in names  # no command is allowed


def test_call_exit_codes(data_dir: Path) -> None:
    (data_dir / "a.txt").write_text("abc")
    root = ["--root", f"data={data_dir}"]
    ok, missing, escape, unknown, bad_json, not_object = rootbound_all(
        ["call", "hash_file", '{"root": "data", "path": "a.txt", "algorithm": "md5"}', *root],
        ["call", "read_file", '{"root": "data", "path": "nope.txt"}', *root],
        ["call", "read_file", '{"root": "data", "path": "../x"}', *root],
        ["call", "no_such_tool", *root],
        ["call", "read_file", "{not json", *root],
        ["call", "read_file", "[1, 2]", *root],
    )
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["hash"] == "900150983cd24fb0d6963f7d28e17f72"

    assert (missing.returncode, missing.stdout) == (1, "")
    assert "file not found: nope.txt" in missing.stderr

    assert escape.returncode == 1
    assert escape.stderr == "path resolves outside root boundary\n"  # for a person: no JSON log lines before it

    assert unknown.returncode == 1
    assert "unknown tool: no_such_tool" in unknown.stderr

    assert bad_json.returncode == 2
    assert "not valid JSON" in bad_json.stderr
    assert not_object.returncode == 2
    assert "must be a JSON object" in not_object.stderr


# -- help ----------------------------------------------------------------------------------------


def test_call_logs_for_a_person_when_asked(data_dir: Path) -> None:
    got = rootbound("call", "read_file", '{"root": "data", "path": "../x"}', "--root", f"data={data_dir}",
                    "--log-level", "warning")
    assert got.returncode == 1
    assert got.stderr.splitlines()[0].startswith("rootbound: warning: tool call (tool=read_file, root=data, ")
    assert got.stderr.splitlines()[-1] == "path resolves outside root boundary"


def test_python_dash_m_help() -> None:
    result = rootbound("--help", module=True)
    assert result.returncode == 0
    for word in ("serve", "check", "call", "tools", "workspace"):
        assert word in result.stdout


def test_serve_help_lists_transport_options() -> None:
    result = rootbound("serve", "--help")
    assert result.returncode == 0
    for option in ("--transport", "--host", "--port", "--root", "--config", "--log-level", "--allow-commands"):
        assert option in result.stdout


def test_version_and_bad_arguments() -> None:
    version = rootbound("--version")
    assert version.returncode == 0 and version.stdout.startswith("rootbound ")
    bad = rootbound("serve", "--transport", "carrier-pigeon")
    assert bad.returncode == 2
    assert "invalid choice" in bad.stderr
