"""A root whose directory is removed or replaced while the server runs is reported, not served through its stale
handle; once a directory is at its path again (and no symlink leads there), it is served again."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import Harness, text_of
from tests.test_commands_support import CommandServers

pytestmark = pytest.mark.anyio

GONE = "root 'ws' is no longer available (its directory was removed or replaced)"

# One call per tool family, each on the vanished root `ws`.
CALLS: list[tuple[str, dict[str, Any]]] = [
    ("list_folder", {"root": "ws", "path": ""}),
    ("read_file", {"root": "ws", "path": "a.txt"}),
    ("stat_file", {"root": "ws", "path": "a.txt"}),
    ("hash_file", {"root": "ws", "path": "a.txt"}),
    ("permissions_file", {"root": "ws", "path": "a.txt"}),
    ("write_file", {"root": "ws", "path": "new.txt", "content": "x"}),
    ("patch_file", {"root": "ws", "path": "a.txt", "patch": "@@ -1 +1 @@\n-a\n+b\n"}),
    ("create_folder", {"root": "ws", "path": "d"}),
    ("remove_file", {"root": "ws", "path": "a.txt"}),
    ("remove_folder", {"root": "ws", "path": "d"}),
    ("copy", {"source_root": "other", "source_path": "b.txt", "dest_root": "ws", "dest_path": "b.txt"}),
    ("move", {"source_root": "ws", "source_path": "a.txt", "dest_root": "other", "dest_path": "a.txt"}),
    ("grep", {"root": "ws", "pattern": "a"}),
    ("glob", {"root": "ws", "pattern": "**"}),
    ("execute_command", {"command": "ls", "root": "ws"}),
    ("shell", {"command": "ls", "root": "ws"}),
]


async def serve(servers: CommandServers, tmp_path: Path, sandbox: str) -> Harness:
    ws, other = tmp_path / "ws", tmp_path / "other"
    ws.mkdir()
    other.mkdir()
    (ws / "a.txt").write_text("a\n")
    (other / "b.txt").write_text("b\n")
    return await servers({"allowed": "*", "sandbox": sandbox}, roots={"ws": ws, "other": other})


@pytest.mark.parametrize("sandbox", ["auto", "landlock"])
async def test_a_removed_root_is_reported_by_every_tool_and_commands(servers: CommandServers, tmp_path: Path,
                                                                     sandbox: str) -> None:
    h = await serve(servers, tmp_path, sandbox)
    shutil.rmtree(tmp_path / "ws")
    for tool, args in CALLS:
        result = await h.call(tool, **args)
        assert result.is_error, f"{tool} served a removed root: {text_of(result)[:200]}"
        assert text_of(result).startswith(GONE), f"{tool}: {text_of(result)[:300]}"
        assert "served again as soon as a directory exists at its configured path" in text_of(result)
        assert str(tmp_path) not in text_of(result)
    assert not (tmp_path / "ws").exists()  # nothing was created at the old path
    # Commands elsewhere still run (under bubblewrap the vanished root is left out of the view).
    got = await h.ok("shell", command="cat b.txt", root="other")
    assert got["stdout"] == "b\n"


@pytest.mark.parametrize("sandbox", ["auto", "landlock"])
async def test_a_root_recreated_at_its_path_is_served_again(servers: CommandServers, tmp_path: Path,
                                                            sandbox: str) -> None:
    h = await serve(servers, tmp_path, sandbox)
    shutil.rmtree(tmp_path / "ws")
    assert (await h.err("list_folder", root="ws", path="")).startswith(GONE)
    (tmp_path / "ws").mkdir()
    (tmp_path / "ws" / "fresh.txt").write_text("fresh\n")
    listing = await h.ok("list_folder", root="ws", path="")
    assert [e["name"] for e in listing["entries"]] == ["fresh.txt"]
    await h.ok("write_file", root="ws", path="w.txt", content="w")
    assert (tmp_path / "ws" / "w.txt").read_text() == "w"
    got = await h.ok("shell", command="cat fresh.txt", root="ws")
    assert got["stdout"] == "fresh\n"


async def test_a_root_replaced_by_another_directory_serves_the_new_one(server: Harness, workspace: Path) -> None:
    (workspace / "old.txt").write_text("old")
    workspace.rename(workspace.with_name("moved-away"))
    workspace.mkdir()
    (workspace / "new.txt").write_text("new")
    listing = await server.ok("list_folder", root="workspace", path="")
    assert [e["name"] for e in listing["entries"]] == ["new.txt"]


async def test_the_first_directory_moved_back_after_a_replacement_is_served_again(server: Harness,
                                                                                 workspace: Path) -> None:
    """The check before each call knows which directory the handle holds since it was reopened: the first one,
    moved back to the root's path, is not taken for the handle's (it would have served the second one)."""
    (workspace / "first.txt").write_text("1")
    workspace.rename(workspace.with_name("first"))
    workspace.mkdir()
    (workspace / "second.txt").write_text("2")
    listing = await server.ok("list_folder", root="workspace", path="")
    assert [e["name"] for e in listing["entries"]] == ["second.txt"]  # reopened on the second
    workspace.rename(workspace.with_name("second"))
    workspace.with_name("first").rename(workspace)
    listing = await server.ok("list_folder", root="workspace", path="")
    assert [e["name"] for e in listing["entries"]] == ["first.txt"]


async def test_a_root_renamed_away_with_nothing_at_its_path_is_still_served(server: Harness,
                                                                             workspace: Path) -> None:
    (workspace / "a.txt").write_text("a")
    workspace.rename(workspace.with_name("renamed"))
    listing = await server.ok("list_folder", root="workspace", path="")
    assert [e["name"] for e in listing["entries"]] == ["a.txt"]


async def test_a_symlink_planted_at_a_removed_roots_path_is_not_followed(server: Harness, workspace: Path,
                                                                        outside: Path) -> None:
    shutil.rmtree(workspace)
    workspace.symlink_to(outside)
    for tool, args in [("list_folder", {"path": ""}), ("read_file", {"path": "secret.txt"})]:
        msg = await server.err(tool, root="workspace", **args)
        assert msg.startswith("root 'workspace' is no longer available") and "OUTSIDE-SECRET" not in msg
