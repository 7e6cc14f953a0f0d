"""The change journal and the state directory are beyond sandboxed commands (issue 17, item 2): a command cannot
read the journal's blobs (old contents of every root's files) nor list or change its folder, and a configuration
whose commands.read_paths / write_paths / allowed_cwd_roots would open it to them is refused at start."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from .conftest import CommandServers
from .test_sandbox_escapes import SANDBOXES

pytestmark = pytest.mark.anyio

REPO = Path(__file__).resolve().parent.parent


def check(config: dict[str, object], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "check.yaml"
    path.write_text(yaml.safe_dump(config))
    return subprocess.run([sys.executable, "-m", "rootbound", "check", "--config", str(path)], capture_output=True,
                          text=True, timeout=60, cwd=REPO)


@pytest.mark.parametrize(("key", "where"), [("read_paths", "parent"), ("read_paths", "inside"),
                                            ("write_paths", "same"), ("allowed_cwd_roots", "parent")])
def test_commands_paths_that_reach_the_journal_are_refused(tmp_path: Path, key: str, where: str) -> None:
    ws = tmp_path / "workspace"
    journal = tmp_path / "private" / "journal"
    (journal / "some-root").mkdir(parents=True)
    ws.mkdir()
    entry = {"parent": tmp_path / "private", "inside": journal / "some-root", "same": journal}[where]
    out = check({"roots": [{"name": "workspace", "path": str(ws)}], "journal": {"dir": str(journal)},
                 "commands": {"allowed": "*", key: [str(entry)]}}, tmp_path)
    assert out.returncode == 1, out.stdout + out.stderr
    assert f"refusing to serve: commands.{key} entry {str(entry)!r}" in out.stderr
    assert f"the change journal's directory (journal.dir) at {journal}" in out.stderr
    fix = "remove the entry" if where == "inside" else f"set journal.dir outside {entry}"
    assert fix in out.stderr


def test_commands_paths_that_reach_the_state_directory_are_refused(tmp_path: Path) -> None:
    ws = tmp_path / "workspace"
    ws.mkdir()
    state = tmp_path / "state"
    state.mkdir()
    out = check({"roots": [{"name": "workspace", "path": str(ws)}], "state_dir": str(state),
                 "commands": {"allowed": ["ls"], "read_paths": [str(tmp_path)]}}, tmp_path)
    assert out.returncode == 1
    assert f"commands.read_paths entry {str(tmp_path)!r}" in out.stderr
    assert f"the server's state directory (state_dir) at {state}" in out.stderr
    assert f"set state_dir outside {tmp_path}" in out.stderr
    # Beside it, not over it: served.
    (tmp_path / "tools").mkdir()
    out = check({"roots": [{"name": "workspace", "path": str(ws)}], "state_dir": str(state),
                 "commands": {"allowed": ["ls"], "read_paths": [str(tmp_path / "tools")]}}, tmp_path)
    assert out.returncode == 0, out.stderr


@pytest.mark.parametrize("sandbox", SANDBOXES)
async def test_a_sandboxed_command_cannot_read_the_journal(servers: CommandServers, tmp_path: Path,
                                                            sandbox: str) -> None:
    journal = tmp_path / "journal"
    h = await servers({"allowed": "*", "sandbox": sandbox}, journal={"dir": str(journal)})
    ws = tmp_path / "workspace"
    (ws / "a.txt").write_text("JOURNALED-SECRET\n")
    await h.ok("write_file", root="workspace", path="a.txt", content="new\n")
    blobs = [os.path.join(d, f) for d, _, files in os.walk(journal) for f in files if "blob" in d]
    assert blobs, sorted(str(p) for p in journal.rglob("*"))
    got = await h.ok("execute_command", command=f"cat {blobs[0]}", root="workspace")
    assert got["exit_code"] != 0 and got["stdout"] == ""
    got = await h.ok("execute_command", command=f"ls -a {journal}", root="workspace")
    assert got["exit_code"] != 0 and got["stdout"] == ""
    got = await h.ok("execute_command", command=f"touch {journal}/forged", root="workspace")
    assert got["exit_code"] != 0 and not (journal / "forged").exists()
    state = h.app.state_dir
    assert state is not None
    got = await h.ok("execute_command", command=f"ls -a {state}", root="workspace")
    assert got["exit_code"] != 0 and got["stdout"] == ""
