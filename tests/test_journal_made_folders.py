"""The parent folders a file tool makes are journaled with its change (issue 17, item 1): an undo removes them
again, so it leaves no empty folders behind, and keeps any that something else was put in since."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from .conftest import MakeServer

pytestmark = pytest.mark.anyio

REPO = Path(__file__).resolve().parent.parent


def undo_all(tmp_path: Path, ws: Path) -> subprocess.CompletedProcess[str]:
    config = tmp_path / "cli.yaml"
    config.write_text(yaml.safe_dump({"roots": [{"name": "ws", "path": str(ws)}],
                                      "journal": {"dir": str(tmp_path / "journal")}}))
    return subprocess.run([sys.executable, "-m", "rootbound", "undo", "--config", str(config), "--since", "1h"],
                          capture_output=True, text=True, timeout=60, cwd=REPO)


def listing(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


async def test_undo_of_a_write_removes_the_folders_it_made(make_server: MakeServer, tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    s = await make_server({"ws": ws}, journal={"dir": str(tmp_path / "journal")})
    await s.ok("write_file", root="ws", path="a/b/c.txt", content="new\n")
    assert listing(ws) == ["a", "a/b", "a/b/c.txt"]
    done = undo_all(tmp_path, ws)
    assert done.returncode == 0, done.stdout + done.stderr
    assert listing(ws) == []


async def test_undo_removes_made_folders_of_every_tool(make_server: MakeServer, tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "src.txt").write_text("source\n")
    (ws / "moved.txt").write_text("moving\n")
    (ws / "tree").mkdir()
    (ws / "tree" / "f.txt").write_text("f\n")
    before = listing(ws)
    s = await make_server({"ws": ws}, journal={"dir": str(tmp_path / "journal")})
    await s.ok("create_folder", root="ws", path="p/q/r")
    await s.ok("copy", source_root="ws", source_path="src.txt", dest_root="ws", dest_path="c1/c2/copy.txt")
    await s.ok("copy", source_root="ws", source_path="tree", dest_root="ws", dest_path="t1/t2/tree")
    await s.ok("move", source_root="ws", source_path="moved.txt", dest_root="ws", dest_path="m1/m2/moved.txt")
    await s.ok("write_file", root="ws", path="keep/deep/x.txt", content="x\n")
    (ws / "keep" / "someone-else.txt").write_text("not the agent's\n")  # put there since, outside the tools
    done = undo_all(tmp_path, ws)
    assert done.returncode == 0, done.stdout + done.stderr
    # Every folder made is gone, except the one that holds what someone else put there since.
    assert listing(ws) == sorted([*before, "keep", "keep/someone-else.txt"])
