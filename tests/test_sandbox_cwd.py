"""Where a sandboxed command starts never widens what it can reach: a working directory outside the roots, work
areas and `read_paths` is entered (seed 001: with ALLOWED_CWD_ROOTS unset any existing directory is permitted) but
shows nothing; a directory listed in `allowed_cwd_roots` is a work area, readable and writable; and bubblewrap's
view works for a cwd such as /tmp and for a `run_as` user reaching a root by its absolute path."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import yaml
from mcp import Client

from rootbound.config import load_config
from rootbound.report import describe_commands
from rootbound.sandbox import bwrap
from rootbound.server import App
from tests.conftest import Harness
from tests.test_commands_support import CommandServers

pytestmark = pytest.mark.anyio

NEEDS_BWRAP = pytest.mark.skipif(not bwrap.probe().ok, reason=f"bubblewrap unusable here: "
                                 f"{bwrap.probe().detail} (.ci/run installs it)")
SANDBOXES = [pytest.param("landlock"), pytest.param("bwrap", marks=NEEDS_BWRAP)]
AS_ROOT = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (CI runs the tests as root)")


@pytest.fixture
def someones_home(tmp_path: Path) -> Path:
    home = tmp_path / "home" / "someone"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_ed25519").write_text("PRIVATE-KEY\n")
    return home


@pytest.mark.parametrize("sandbox", SANDBOXES)
async def test_a_working_directory_outside_everything_shows_nothing(servers: CommandServers, someones_home: Path,
                                                                    sandbox: str) -> None:
    h = await servers({"allowed": "*", "sandbox": sandbox})
    assert (await h.ok("execute_command", command="pwd", cwd=str(someones_home)))["stdout"] == f"{someones_home}\n"
    for command in ("cat .ssh/id_ed25519", f"cat {someones_home}/.ssh/id_ed25519", "ls -A ."):
        result = await h.call("shell", command=command, working_directory=str(someones_home))
        got = result.structured_content
        assert got is not None and "PRIVATE-KEY" not in got["stdout"] and ".ssh" not in got["stdout"], command
    got = (await h.call("execute_command", command="cat .ssh/id_ed25519", cwd=str(someones_home))).structured_content
    assert got is not None and got["exit_code"] != 0 and got["stdout"] == ""


@pytest.mark.parametrize("sandbox", SANDBOXES)
async def test_tmp_as_working_directory(servers: CommandServers, sandbox: str) -> None:
    """With ALLOWED_CWD_ROOTS unset, /tmp is a permitted working directory (bubblewrap failed on it before)."""
    h = await servers({"allowed": "*", "sandbox": sandbox})
    got = await h.ok("shell", command="pwd; ls -A \"$HOME\" | wc -l", working_directory="/tmp")
    assert got["stdout"].splitlines()[0] == "/tmp"


@pytest.mark.parametrize("sandbox", SANDBOXES)
async def test_an_allowed_cwd_root_is_a_work_area(servers: CommandServers, tmp_path: Path, sandbox: str) -> None:
    build = tmp_path / "build"
    build.mkdir()
    (build / "Makefile").write_text("all:\n\techo built > out.o\n")
    ws = tmp_path / "workspace"
    h = await servers({"allowed": "*", "sandbox": sandbox, "allowed_cwd_roots": [str(build), str(ws)]})
    got = await h.ok("shell", command="make -s && mkdir -p node_modules/x && echo m > node_modules/x/i.js && cat out.o",
                     working_directory=str(build))
    assert got["stdout"] == "built\n"
    assert (build / "out.o").read_text() == "built\n" and (build / "node_modules" / "x" / "i.js").exists()


@pytest.mark.parametrize("sandbox", SANDBOXES)
async def test_a_work_area_named_through_a_link_is_its_real_directory(servers: CommandServers, tmp_path: Path,
                                                                      sandbox: str) -> None:
    build = tmp_path / "real-build"
    build.mkdir()
    (tmp_path / "build").symlink_to(build)  # the operator's own link, outside every root
    ws = tmp_path / "workspace"
    h = await servers({"allowed": "*", "sandbox": sandbox, "allowed_cwd_roots": [str(tmp_path / "build"), str(ws)]})
    await h.ok("shell", command="touch made", working_directory=str(build))
    assert (build / "made").exists()


@pytest.mark.parametrize("sandbox", SANDBOXES)
async def test_a_link_inside_a_root_never_names_a_work_area(servers: CommandServers, tmp_path: Path,
                                                            sandbox: str) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    ws = tmp_path / "workspace"
    ws.mkdir()
    (ws / "out").symlink_to(elsewhere)  # the agent can re-point this link: it grants nothing
    h = await servers({"allowed": "*", "sandbox": sandbox, "allowed_cwd_roots": [str(ws), str(ws / "out")]})
    await h.call("shell", command=f"touch made; touch {elsewhere}/made2", working_directory=str(elsewhere))
    assert os.listdir(elsewhere) == []


async def server_with(servers: CommandServers, roots: list[dict[str, Any]], commands: dict[str, Any]) -> Harness:
    """A server whose roots may have their own allowed_tools (a read-only root: no writing file tool)."""
    for root in roots:
        Path(root["path"]).mkdir(parents=True, exist_ok=True)
    servers.count += 1
    cfg = servers.tmp_path / f"roots-{servers.count}.yaml"
    cfg.write_text(yaml.safe_dump({"roots": roots, "commands": commands}))
    app = App(load_config(str(cfg), env={}))
    servers.stack.callback(app.close)
    return Harness(app, await servers.stack.enter_async_context(Client(app.server)))


READ_ONLY = ["read_file", "list_folder"]


@pytest.mark.parametrize("sandbox", SANDBOXES)
async def test_a_work_area_never_opens_a_read_only_root(servers: CommandServers, tmp_path: Path,
                                                        sandbox: str) -> None:
    ws, docs = tmp_path / "workspace", tmp_path / "docs"
    h = await server_with(servers, [{"name": "workspace", "path": str(ws)},
                                    {"name": "docs", "path": str(docs), "allowed_tools": READ_ONLY}],
                          {"allowed": "*", "sandbox": sandbox, "allowed_cwd_roots": [str(ws), str(docs)]})
    await h.call("shell", command="touch made", working_directory=str(docs))
    await h.call("shell", command=f"touch {docs}/made2", working_directory=str(ws))
    assert os.listdir(docs) == []


@NEEDS_BWRAP
async def test_a_read_only_root_inside_a_work_area_stays_read_only(servers: CommandServers, tmp_path: Path) -> None:
    area = tmp_path / "area"
    ro = area / "ro"
    h = await server_with(servers, [{"name": "ro", "path": str(ro), "allowed_tools": READ_ONLY}],
                          {"allowed": "*", "sandbox": "bwrap", "allowed_cwd_roots": [str(area)]})
    await h.call("shell", command="touch ro/x; touch y", working_directory=str(area))
    assert os.listdir(ro) == [] and (area / "y").exists()


@NEEDS_BWRAP
@AS_ROOT
async def test_run_as_user_reaches_a_root_by_its_absolute_path(servers: CommandServers, tmp_path: Path) -> None:
    ws = tmp_path / "deep" / "er" / "workspace"
    ws.mkdir(parents=True)
    ws.chmod(0o755)
    (ws / "inside.txt").write_text("inside\n")
    (ws / "inside.txt").chmod(0o644)
    h = await servers({"allowed": "*", "sandbox": "bwrap", "run_as": "nobody"}, roots={"workspace": ws})
    # The directories above the root are passable (0755), wherever the machine keeps them.
    got = await h.ok("shell", command=f"id -u; cat {ws}/inside.txt; cd {tmp_path}/deep/er && pwd", root="workspace")
    assert got["stdout"].splitlines() == ["65534", "inside", f"{tmp_path}/deep/er"]


@pytest.mark.parametrize("sandbox", ["landlock", "bwrap"])
def test_check_says_what_a_working_directory_grants(tmp_path: Path, sandbox: str) -> None:
    build = tmp_path / "build"
    build.mkdir()
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"roots: [{{name: w, path: {tmp_path}/w}}]\n"
                   f"commands: {{allowed: '*', sandbox: {sandbox}, allowed_cwd_roots: [{build}, {tmp_path}/w]}}\n")
    (tmp_path / "w").mkdir()
    text = "\n".join(describe_commands(load_config(str(cfg), env={}))[0])
    assert "entered but shows nothing" in text and "never widens what it can read or write" in text
    assert f"work areas (allowed_cwd_roots outside the roots; readable and writable for commands): {build}" in text
    assert "can read the one it starts in" not in text
