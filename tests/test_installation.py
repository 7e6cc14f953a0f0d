"""Start-up: a writable root must not hold the server's own installation; `/` and home directories are warned
about; `/` is never the implicit default root. The real `rootbound` process, as an operator starts it."""

from __future__ import annotations

import json
import os
import pwd
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

import rootbound
from tests.conftest import MakeServer, RootsClient
from tests.test_transports import ROOTBOUND, clean_env, json_lines

pytestmark = pytest.mark.anyio

PACKAGE_PARENT = Path(rootbound.__file__).resolve().parent.parent  # site-packages, or src/ when editable


def run(*args: str, cwd: Path | str, env: dict[str, str] | None = None, command: list[str] | None = None
        ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*(command or [ROOTBOUND]), *args], cwd=cwd, env=env or clean_env(), capture_output=True,
                          text=True, stdin=subprocess.DEVNULL, timeout=60)


def own_directories() -> list[Path]:
    """Directories that hold this very installation: the package's parent, and the venv's parent."""
    found = [PACKAGE_PARENT]
    if sys.prefix != sys.base_prefix:
        found.append(Path(sys.prefix).resolve().parent)
    return found


@pytest.mark.parametrize("subcommand", [[], ["check"], ["call", "list_roots"]])
@pytest.mark.parametrize("where", own_directories(), ids=lambda p: p.name)
def test_started_in_its_own_installation_it_refuses(where: Path, subcommand: list[str]) -> None:
    """The quick start run from a checkout served the checkout: its venv and the editable src/ included."""
    done = run(*subcommand, cwd=where)
    assert done.returncode == 1, done.stderr
    assert done.stdout == ""
    assert f"refusing to serve: root 'workspace' ({where}) is writable by the agent and contains" in done.stderr
    assert "allow_self_modification: true" in done.stderr and "pipx install" in done.stderr
    assert "read-only" in done.stderr


def test_a_read_only_root_or_the_override_may_hold_it(tmp_path: Path) -> None:
    cfg = tmp_path / "ro.yaml"
    cfg.write_text(yaml.safe_dump({"roots": [{"name": "code", "path": str(PACKAGE_PARENT),
                                              "allowed_tools": ["read_file", "grep"]}]}))
    assert run("check", "--config", str(cfg), cwd=tmp_path).returncode == 0
    cfg.write_text(yaml.safe_dump({"roots": [{"name": "code", "path": str(PACKAGE_PARENT)}],
                                   "allow_self_modification": True}))
    done = run("call", "list_roots", "--config", str(cfg), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["roots"][0]["name"] == "code"
    cfg.write_text(yaml.safe_dump({"roots": [{"name": "w", "path": str(tmp_path)}],
                                   "commands": {"allowed": ["ls"], "write_paths": [str(PACKAGE_PARENT)]}}))
    done = run("check", "--config", str(cfg), cwd=tmp_path)
    assert done.returncode == 1 and f"commands.write_paths entry '{PACKAGE_PARENT}'" in done.stderr


def test_python_m_in_a_writable_root_is_refused(tmp_path: Path) -> None:
    """`python -m rootbound` imports from its working directory: the agent could plant a `rootbound/` there."""
    done = run("check", cwd=tmp_path, command=[sys.executable, "-m", "rootbound"])
    assert done.returncode == 1
    assert "the current directory, which `python -m` puts first on the import path" in done.stderr
    assert "python -P -m rootbound" in done.stderr
    assert run("check", cwd=tmp_path, command=[sys.executable, "-P", "-m", "rootbound"]).returncode == 0


def test_slash_is_never_the_implicit_root() -> None:
    for subcommand in ([], ["check"]):
        done = run(*subcommand, cwd="/")
        assert done.returncode == 1
        assert "refusing to serve / (the whole filesystem) as the default root" in done.stderr
        assert "pass --root / explicitly" in done.stderr


def test_slash_given_explicitly_is_served_with_a_warning(tmp_path: Path) -> None:
    done = run("check", "--root", "/", cwd="/")
    assert done.returncode == 0, done.stderr
    assert "WARNING: root 'root' is / (the whole filesystem" in done.stdout
    assert done.stdout.rstrip().endswith("ok")
    served = run("--root", "/", cwd=tmp_path)  # stdin is empty: it starts, warns, and ends
    assert served.returncode == 0, served.stderr
    warned = [line for line in json_lines(served.stderr) if line["level"] == "WARNING"]
    assert any(line["msg"].startswith("root 'root' is / (the whole filesystem") for line in warned)


def test_home_directories_are_warned_about_in_check(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    env = {**clean_env(), "HOME": str(home)}
    done = run("check", "--root", f"h={home}", cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr
    assert "WARNING: root 'h' is the home directory of $HOME" in done.stdout
    done = run("check", "--root", f"above={tmp_path}", "--json", cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["warnings"] == [
        "root 'above' holds the home directories of $HOME (shell start-up files, ~/.ssh, ~/.gitconfig); serve a "
        "project directory instead where you can"]
    # A home directory from the password database (here read-only, so it may hold anything).
    home_of = next(((u.pw_name, u.pw_dir) for u in pwd.getpwall() if u.pw_dir not in ("", "/")
                    and os.path.isdir(u.pw_dir) and os.path.realpath(u.pw_dir) != str(home)), None)
    if home_of is not None:
        cfg = tmp_path / "home.yaml"
        entry = {"name": "theirs", "path": home_of[1], "allowed_tools": ["stat_file"]}
        cfg.write_text(yaml.safe_dump({"roots": [entry]}))
        done = run("check", "--config", str(cfg), cwd=tmp_path, env=env)
        assert f"WARNING: root 'theirs' is the home directory of {home_of[0]}" in done.stdout
    assert run("check", "--root", f"plain={tmp_path / 'home'}", cwd=tmp_path).stdout.count("WARNING") == 0


async def test_client_roots_holding_the_installation_are_refused(make_server: MakeServer, workspace: Path,
                                                                 tmp_path: Path) -> None:
    own = RootsClient((f"file://{PACKAGE_PARENT}", "code"), (f"file://{workspace}", "work"))
    h = await make_server(mode="legacy", client_roots="replace", roots_client=own)
    assert [r["name"] for r in (await h.ok("list_roots"))["roots"]] == ["work"]
    h = await make_server(mode="legacy", client_roots="replace", roots_client=own, allow_self_modification=True)
    assert [r["name"] for r in (await h.ok("list_roots"))["roots"]] == ["code", "work"]
    assert os.path.isdir(PACKAGE_PARENT / "rootbound")
