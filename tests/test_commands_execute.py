"""execute_command over the real protocol: every scenario of seeds 000 and 001 (npm replaced by Debian
commands), the refusals that must run nothing, the environment rules and the audit trail."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
import yaml

from tests.conftest import MakeServer, text_of
from tests.test_commands_support import CommandServers

pytestmark = pytest.mark.anyio

HINT = "Note: This tool does not support interactive commands. Ensure the command is non-interactive and the " \
       "executable exists."


@pytest.fixture
def monorepo(tmp_path: Path) -> Path:
    """Seed 000's /home/user/repos/monorepo with a frontend folder (package.json stands in for npm's)."""
    repo = tmp_path / "repos" / "monorepo"
    (repo / "frontend").mkdir(parents=True)
    (repo / "frontend" / "package.json").write_text('{"name": "frontend"}\n')
    return repo


# -- seed 000: cwd ---------------------------------------------------------------------------------


async def test_backward_compatibility_without_cwd(servers: CommandServers, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    h = await servers(env={"ALLOWED_COMMANDS": "echo"})
    result = await h.call("execute_command", command="echo hello")
    assert not result.is_error
    assert result.structured_content is not None
    assert result.structured_content["exit_code"] == 0
    assert result.structured_content["stdout"] == "hello\n"
    assert result.structured_content["working_directory"] == str(tmp_path)  # the server's working directory
    # Seed 001: the text block is YAML with exit_code, stdout and stderr.
    assert yaml.safe_load(text_of(result)) == {"exit_code": 0, "stdout": "hello\n", "stderr": ""}
    assert "stdout: |\n  hello\n" in text_of(result)


async def test_relative_cwd_runs_in_that_folder(servers: CommandServers, monorepo: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(monorepo)
    # Served, as `rootbound` started in the monorepo serves it: a sandboxed command sees only what it may read.
    h = await servers(env={"ALLOWED_COMMANDS": "ls,pwd"}, roots={"monorepo": monorepo})
    got = await h.ok("execute_command", command="ls", cwd="frontend")
    assert (got["exit_code"], got["stdout"], got["stderr"]) == (0, "package.json\n", "")
    assert (await h.ok("execute_command", command="pwd", cwd="frontend"))["stdout"] == f"{monorepo}/frontend\n"


async def test_relative_cwd_uses_project_dir_when_configured(servers: CommandServers, monorepo: Path) -> None:
    h = await servers({"allowed": ["ls"]}, project_dir=str(monorepo), roots={"monorepo": monorepo})
    assert (await h.ok("execute_command", command="ls", cwd="frontend"))["stdout"] == "package.json\n"


async def test_absolute_cwd(servers: CommandServers, monorepo: Path) -> None:
    h = await servers(env={"ALLOWED_COMMANDS": "ls"}, roots={"monorepo": monorepo})
    got = await h.ok("execute_command", command="ls -a", cwd=str(monorepo / "frontend"))
    assert got["stdout"] == ".\n..\npackage.json\n"
    assert got["working_directory"] == str(monorepo / "frontend")


async def test_nonexistent_cwd_is_an_error_and_runs_nothing(servers: CommandServers, tmp_path: Path) -> None:
    marker = tmp_path / "MARKER"
    h = await servers(env={"ALLOWED_COMMANDS": "touch"})
    error = await h.err("execute_command", command=f"touch {marker}", cwd="does-not-exist")
    assert "cwd does not exist: does-not-exist" in error
    assert not marker.exists()


async def test_allowed_cwd_roots_allows_inside(servers: CommandServers, monorepo: Path) -> None:
    h = await servers(env={"ALLOWED_COMMANDS": "ls", "ALLOWED_CWD_ROOTS": str(monorepo)})
    got = await h.ok("execute_command", command="ls", cwd=str(monorepo / "frontend"))
    assert got["exit_code"] == 0 and got["stdout"] == "package.json\n"  # the real directory, not an empty stand-in


async def test_allowed_cwd_roots_rejects_outside(servers: CommandServers, monorepo: Path, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"  # seed 000's /tmp
    elsewhere.mkdir()
    h = await servers(env={"ALLOWED_COMMANDS": "touch", "ALLOWED_CWD_ROOTS": str(monorepo)})
    error = await h.err("execute_command", command="touch MARKER", cwd=str(elsewhere))
    assert "cwd not allowed" in error
    assert not (elsewhere / "MARKER").exists()
    # Omitting cwd does not get around it: the default directory is checked too.
    error = await h.err("execute_command", command="touch MARKER")
    assert "cwd not allowed" in error


async def test_allowed_cwd_roots_compares_canonical_paths(servers: CommandServers, monorepo: Path,
                                                          tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (monorepo / "link").symlink_to(outside)  # inside by its spelling, outside in fact
    sibling = tmp_path / "repos" / "monorepo-evil"  # shares the string prefix
    sibling.mkdir()
    h = await servers(env={"ALLOWED_COMMANDS": "touch", "ALLOWED_CWD_ROOTS": str(monorepo)})
    for cwd in (str(monorepo / "link"), str(monorepo / ".." / "monorepo-evil"), str(sibling)):
        assert "cwd not allowed" in await h.err("execute_command", command="touch MARKER", cwd=cwd)
    assert not (outside / "MARKER").exists()
    assert not (sibling / "MARKER").exists()
    # A symlinked allowed root is resolved as well: the real directory behind it is inside.
    (tmp_path / "alias").symlink_to(monorepo)
    h = await servers(env={"ALLOWED_COMMANDS": "ls", "ALLOWED_CWD_ROOTS": str(tmp_path / "alias")})
    got = await h.ok("execute_command", command="ls", cwd=str(monorepo / "frontend"))
    assert got["exit_code"] == 0 and got["stdout"] == "package.json\n"  # the real directory, not an empty stand-in


async def test_no_restriction_when_allowed_cwd_roots_unset(servers: CommandServers, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    for env in ({"ALLOWED_COMMANDS": "touch"}, {"ALLOWED_COMMANDS": "touch", "ALLOWED_CWD_ROOTS": ""}):
        # sandbox off: seed 000's scenario writes in a working directory outside every root, which the OS
        # sandbox (rightly) forbids; what is tested here is only that the cwd itself is accepted.
        h = await servers({"sandbox": "off"}, env=env)
        assert (await h.ok("execute_command", command="touch MARKER", cwd=str(elsewhere)))["exit_code"] == 0
        assert (elsewhere / "MARKER").exists()
        (elsewhere / "MARKER").unlink()


async def test_invalid_allowed_cwd_root_is_a_configuration_error(servers: CommandServers, monorepo: Path,
                                                                 tmp_path: Path) -> None:
    h = await servers(env={"ALLOWED_COMMANDS": "touch",
                           "ALLOWED_CWD_ROOTS": f"{monorepo},{tmp_path}/path/that/does/not/exist"})
    error = await h.err("execute_command", command="touch MARKER", cwd=str(monorepo / "frontend"))
    assert "configuration error in ALLOWED_CWD_ROOTS" in error
    assert not (monorepo / "frontend" / "MARKER").exists()


async def test_cwd_relative_to_a_named_root(servers: CommandServers, tmp_path: Path) -> None:
    workspace = tmp_path / "workspace"
    (workspace / "src").mkdir(parents=True)
    (workspace / "src" / "main.py").write_text("")
    h = await servers({"allowed": ["ls"]})
    got = await h.ok("execute_command", command="ls", root="workspace", cwd="src")
    assert got["stdout"] == "main.py\n"
    assert got["working_directory"] == "workspace:src"  # no host path for a root-relative directory
    assert await h.err("execute_command", command="ls", root="workspace", cwd="../..") == \
        "path resolves outside root boundary"
    (workspace / "out").symlink_to(tmp_path)
    assert await h.err("execute_command", command="ls", root="workspace", cwd="out") == \
        "path resolves outside root boundary"
    assert await h.err("execute_command", command="ls", root="nope") == \
        "unknown root: nope; roots: workspace, command-output"


# -- seed 001: allowlist, ENOENT hint, YAML ---------------------------------------------------------


async def test_allowed_command_runs(servers: CommandServers, tmp_path: Path) -> None:
    (tmp_path / "workspace").mkdir()
    (tmp_path / "workspace" / "a.txt").write_text("A\n")
    h = await servers(env={"ALLOWED_COMMANDS": "ls,cat"})
    assert (await h.ok("execute_command", command="ls", root="workspace"))["stdout"] == "a.txt\n"
    assert (await h.ok("execute_command", command="cat a.txt", root="workspace"))["stdout"] == "A\n"


async def test_disallowed_command_is_refused(servers: CommandServers) -> None:
    h = await servers(env={"ALLOWED_COMMANDS": "ls"})
    error = await h.err("execute_command", command="pwd")
    assert error.startswith("command not allowed: pwd. Allowed commands: ls")


async def test_wildcard_allows_any_command(servers: CommandServers) -> None:
    h = await servers(env={"ALLOWED_COMMANDS": "*"})
    got = await h.ok("execute_command", command="whoami")
    assert got["exit_code"] == 0 and got["stdout"].strip()


async def test_environment_overrides_the_config_file(servers: CommandServers) -> None:
    h = await servers({"allowed": ["ls"]}, env={"ALLOWED_COMMANDS": "pwd"})
    assert "command not allowed: ls" in await h.err("execute_command", command="ls")
    assert (await h.ok("execute_command", command="pwd"))["exit_code"] == 0


async def test_command_tools_listed_only_when_something_is_allowed(make_server: MakeServer,
                                                                   servers: CommandServers) -> None:
    names = {t.name for t in (await (await make_server()).client.list_tools()).tools}
    assert not names & {"execute_command", "shell"}
    h = await servers({"allowed": ["ls"]})
    tools = {t.name: t for t in (await h.client.list_tools()).tools}
    assert {"execute_command", "shell"} <= set(tools)
    assert "ONLY for non-interactive commands" in (tools["execute_command"].description or "")
    assert "interactive commands are not supported" in (tools["execute_command"].description or "")


async def test_enoent_hint(servers: CommandServers) -> None:
    h = await servers(env={"ALLOWED_COMMANDS": "*"})
    error = await h.err("execute_command", command="definitely-not-a-command-4711 --version")
    assert HINT in error
    assert error.startswith("command not found: definitely-not-a-command-4711")
    h = await servers({"allowed": ["ls", "frobnicate-4711"]})
    assert HINT in await h.err("execute_command", command="frobnicate-4711")


async def test_yaml_text_keeps_multiline_output_readable(servers: CommandServers, tmp_path: Path) -> None:
    h = await servers({"allowed": ["printf"]})
    result = await h.call("execute_command", command=r"printf 'one\ntwo\n\n  indented\tend'")
    assert not result.is_error
    text = text_of(result)
    assert "stdout: |" in text
    assert yaml.safe_load(text)["stdout"] == "one\ntwo\n\n  indented\tend"
    result = await h.call("execute_command", command=r"printf '\033[1mbold\r\n\377\376'")
    data = yaml.safe_load(text_of(result))
    assert data["stdout"] == "\x1b[1mbold\r\n\ufffd\ufffd"  # undecodable bytes never crash the call
    assert result.structured_content is not None and result.structured_content["stdout"] == data["stdout"]


async def test_non_zero_exit_is_reported_not_an_error(servers: CommandServers) -> None:
    h = await servers({"allowed": ["ls"]})
    result = await h.call("execute_command", command="ls /definitely/not/here")
    assert not result.is_error
    assert result.structured_content is not None
    assert result.structured_content["exit_code"] == 2
    assert "No such file or directory" in result.structured_content["stderr"]
    assert result.structured_content["signal"] is None


# -- operator refusals: nothing runs -------------------------------------------------------------------


@pytest.mark.parametrize("command", [
    "echo hi; touch MARKER", "echo $(touch MARKER)", "echo `touch MARKER`", "echo hi && touch MARKER",
    "echo hi || touch MARKER", "echo hi | touch MARKER", "echo hi > MARKER", "touch MARKER < x",
    "echo hi & touch MARKER", "echo hi\ntouch MARKER", 'echo "$(touch MARKER)"', "(touch MARKER)",
])
async def test_shell_operators_are_refused_and_nothing_runs(servers: CommandServers, tmp_path: Path,
                                                            command: str) -> None:
    h = await servers({"allowed": ["echo", "touch"]})
    error = await h.err("execute_command", command=command, root="workspace")
    assert "without a shell" in error and "shell tool" in error and "cwd" in error
    assert not (tmp_path / "workspace" / "MARKER").exists()


async def test_quoted_operators_are_plain_arguments(servers: CommandServers) -> None:
    h = await servers({"allowed": ["echo"]})
    got = await h.ok("execute_command", command="""echo "a;b" 'c|d' e\\&f '$(x)'""")
    assert got["stdout"] == "a;b c|d e&f $(x)\n"


async def test_lookalike_binaries_are_refused(servers: CommandServers, tmp_path: Path) -> None:
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    fake = workspace / "echo"
    fake.write_text(f"#!/bin/sh\ntouch {workspace}/MARKER\n")
    fake.chmod(0o755)
    (workspace / "bin").mkdir()
    (workspace / "bin" / "echo").symlink_to(shutil.which("touch") or "/usr/bin/touch")
    h = await servers({"allowed": ["echo"]})
    for command in ("./echo hi", f"{fake} hi", f"bin/echo {workspace}/MARKER", "../workspace/echo"):
        error = await h.err("execute_command", command=command, root="workspace")
        assert error.startswith("command not allowed"), error
        assert "allowed only as the one on the server's PATH" in error
    assert not (workspace / "MARKER").exists()
    # The allowed program itself, spelled as a path, is fine.
    real = os.path.realpath(shutil.which("echo") or "")
    assert (await h.ok("execute_command", command=f"{real} hi"))["stdout"] == "hi\n"


async def test_absolute_path_entries_allow_exactly_that_file(servers: CommandServers, tmp_path: Path) -> None:
    tool = tmp_path / "tools" / "hello"
    tool.parent.mkdir()
    tool.write_text("#!/bin/sh\necho hello from tool\n")
    tool.chmod(0o755)
    h = await servers({"allowed": [str(tool)]})
    assert (await h.ok("execute_command", command=str(tool)))["stdout"] == "hello from tool\n"
    assert "command not allowed" in await h.err("execute_command", command="echo hi")


async def test_blocked_patterns_win_over_the_allowlist(servers: CommandServers, tmp_path: Path) -> None:
    h = await servers({"allowed": ["touch"], "blocked": ["touch MARKER*"]})
    error = await h.err("execute_command", command="touch MARKER2", root="workspace")
    assert "blocked by the server's policy" in error
    assert not (tmp_path / "workspace" / "MARKER2").exists()
    assert (await h.ok("execute_command", command="touch OTHER", root="workspace"))["exit_code"] == 0


async def test_cd_points_to_cwd(servers: CommandServers) -> None:
    h = await servers({"allowed": ["ls"]})
    assert "pass the directory as cwd" in await h.err("execute_command", command="cd /tmp")


# -- environment -------------------------------------------------------------------------------------


async def test_server_secrets_never_reach_commands(servers: CommandServers, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ROOTBOUND_AUTH_TOKEN", "token-S3CRET")
    monkeypatch.setenv("DATABASE_PASSWORD", "pw-S3CRET")
    monkeypatch.setenv("CI_SECRET_KEY", "key-S3CRET")
    monkeypatch.setenv("CI_NAME", "visible")
    h = await servers({"allowed": ["printenv"], "env_passthrough": ["CI_*", "ROOTBOUND_*"],
                       "secret_env": ["*SECRET*"]})
    got = await h.ok("execute_command", command="printenv", env={"EXTRA": "added"})
    assert "S3CRET" not in got["stdout"]
    lines = set(got["stdout"].splitlines())
    assert {"CI_NAME=visible", "EXTRA=added"} <= lines
    assert any(line.startswith("PATH=/") for line in lines)


async def test_loader_variables_are_refused_unless_configured(servers: CommandServers, tmp_path: Path) -> None:
    h = await servers({"allowed": ["touch"]})
    error = await h.err("execute_command", command="touch MARKER", root="workspace",
                        env={"LD_PRELOAD": "/tmp/evil.so"})
    assert "LD_PRELOAD is refused" in error
    assert not (tmp_path / "workspace" / "MARKER").exists()
    assert "PATH is refused" in await h.err("execute_command", command="touch MARKER", env={"PATH": "."})
    assert "invalid environment variable name" in await h.err("execute_command", command="touch X",
                                                              env={"A=B": "c"})
    h = await servers({"allowed": ["printenv"], "allowed_loader_vars": ["LD_LIBRARY_PATH"]})
    got = await h.ok("execute_command", command="printenv LD_LIBRARY_PATH", env={"LD_LIBRARY_PATH": "/opt/lib"})
    assert got["stdout"] == "/opt/lib\n"


# -- audit ------------------------------------------------------------------------------------------


async def test_audit_log_has_one_line_per_command(servers: CommandServers, tmp_path: Path) -> None:
    audit = tmp_path / "audit.jsonl"
    h = await servers({"allowed": ["echo"], "audit_log": str(audit)})
    await h.ok("execute_command", command="echo hi", env={"TOKEN": "do-not-log-me"})
    await h.err("execute_command", command="pwd")
    await h.err("shell", command="echo hi; ls")
    lines = [json.loads(line) for line in audit.read_text().splitlines()]
    assert [(r["tool"], r["decision"]) for r in lines] == [
        ("execute_command", "allowed"), ("execute_command", "denied"), ("shell", "denied")]
    ran = lines[0]
    assert ran["command"] == "echo hi" and ran["exit_code"] == 0 and ran["stdout_bytes"] == 3
    assert ran["env_names"] == ["TOKEN"] and "do-not-log-me" not in audit.read_text()
    assert {"time", "cwd", "duration_ms"} <= set(ran)
    assert "command not allowed: pwd" in lines[1]["reason"]


# -- names that are not the allowed program; a working directory that is not a directory --------------------------


@pytest.mark.parametrize("command", ["./ls {m}", "VAR=x ls {m}", "\\./ls {m}", "ｌｓ {m}", "l\\s\\ {m}",
                                     "{ws}/ls {m}", "/usr/bin/../../{ws}/ls {m}"])
async def test_other_binaries_named_like_an_allowed_one(servers: CommandServers, tmp_path: Path,
                                                        command: str) -> None:
    ws = tmp_path / "workspace"
    ws.mkdir()
    marker = tmp_path / "M"
    (ws / "ls").write_text(f"#!/bin/sh\ntouch {marker}\n")
    (ws / "ls").chmod(0o755)
    h = await servers({"allowed": ["ls"], "sandbox": "off"})
    result = await h.call("execute_command", command=command.format(m=marker, ws=ws), root="workspace")
    assert result.is_error or (result.structured_content or {}).get("exit_code") != 0
    assert not marker.exists()


async def test_a_fifo_as_cwd_is_an_error_not_a_hang(servers: CommandServers, tmp_path: Path) -> None:
    (tmp_path / "workspace").mkdir()
    os.mkfifo(tmp_path / "workspace" / "fifo")
    h = await servers({"allowed": "*", "sandbox": "off"})
    assert "not a directory" in await h.err("execute_command", command="true", cwd=str(tmp_path / "workspace/fifo"))
    assert "not a directory" in (await h.err("execute_command", command="true", root="workspace", cwd="fifo")).lower()
