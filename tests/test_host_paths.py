"""Paths a command printed work in the file tools (issue 15 item 4): an absolute host path inside a root is taken
relative to that root, resolved beneath its handle as always; any other leading `/` keeps meaning the root's top.
Nothing outside a root becomes reachable, and no error shows a host path the agent did not give."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.conftest import MakeServer, RootsClient, no_host_path, tree

pytestmark = pytest.mark.anyio


@pytest.fixture
def x(tmp_path: Path) -> Path:
    """/…/x holding the root ws, a sibling ws-evil sharing its prefix, another root, and an outside secret."""
    base = tmp_path / "x"
    (base / "ws" / "src").mkdir(parents=True)
    (base / "ws" / "src" / "a.py").write_text("IN-WS\n")
    (base / "ws-evil" / "src").mkdir(parents=True)
    (base / "ws-evil" / "src" / "a.py").write_text("EVIL\n")
    (base / "other").mkdir()
    (base / "other" / "b.txt").write_text("IN-OTHER\n")
    (base / "outside.txt").write_text("OUTSIDE-SECRET\n")
    return base


async def test_a_host_path_inside_the_root_is_taken_relative_to_it(make_server: MakeServer, x: Path) -> None:
    h = await make_server({"ws": x / "ws"})
    got = await h.ok("read_file", root="ws", path=f"{x}/ws/src/a.py")
    assert got["content"] == "IN-WS\n" and got["path"] == "src/a.py"
    assert (await h.ok("read_file", path=f"{x}/ws/src/a.py"))["content"] == "IN-WS\n"
    assert (await h.ok("list_folder", path=f"{x}/ws"))["path"] == "."
    await h.ok("write_file", path=f"{x}/ws/src/new.py", content="NEW\n")
    assert (x / "ws" / "src" / "new.py").read_text() == "NEW\n"
    got = await h.ok("grep", pattern="IN-WS", path=f"{x}/ws/src")
    assert [m["file"] for m in got["matches"]] == ["src/a.py"]
    # copy and move place each of their paths.
    await h.ok("copy", source_path=f"{x}/ws/src/a.py", dest_path=f"{x}/ws/copied.py")
    assert (x / "ws" / "copied.py").read_text() == "IN-WS\n"


async def test_a_root_relative_leading_slash_keeps_its_meaning(make_server: MakeServer, x: Path) -> None:
    h = await make_server({"ws": x / "ws"})
    assert (await h.ok("read_file", path="/src/a.py"))["content"] == "IN-WS\n"
    # A path under a different host directory is root-relative: not found in the root, and the error shows only
    # what the agent gave.
    message = await h.err("read_file", path="/etc/passwd")
    assert message == "file not found: /etc/passwd"


async def test_the_configured_spelling_of_a_root_works_too(make_server: MakeServer, x: Path, tmp_path: Path) -> None:
    link = tmp_path / "link-to-ws"
    link.symlink_to(x / "ws")
    h = await make_server({"ws": link})
    assert (await h.ok("read_file", path=f"{link}/src/a.py"))["content"] == "IN-WS\n"
    assert (await h.ok("read_file", path=f"{x}/ws/src/a.py"))["content"] == "IN-WS\n"


async def test_dotdot_after_the_root_prefix_cannot_leave_it(make_server: MakeServer, x: Path, resolver: str) -> None:
    h = await make_server({"ws": x / "ws"})
    for path in (f"{x}/ws/../outside.txt", f"{x}/ws/src/../../outside.txt", f"{x}/ws/../ws-evil/src/a.py"):
        message = await h.err("read_file", path=path)
        assert message == "path resolves outside root boundary"
    before = tree(x)
    assert await h.err("write_file", path=f"{x}/ws/../pwned.txt", content="x") == "path resolves outside root boundary"
    assert tree(x) == before


async def test_a_prefix_sharing_sibling_is_not_inside(make_server: MakeServer, x: Path) -> None:
    h = await make_server({"ws": x / "ws"})
    message = await h.err("read_file", path=f"{x}/ws-evil/src/a.py")
    assert message.startswith("file not found: ") and "EVIL" not in message
    assert message == f"file not found: {x}/ws-evil/src/a.py"  # only the path the agent gave


async def test_a_symlink_inside_the_root_leading_out_is_still_refused(make_server: MakeServer, x: Path,
                                                                    resolver: str) -> None:
    os.symlink(x / "outside.txt", x / "ws" / "leak")
    os.symlink("..", x / "ws" / "up")
    h = await make_server({"ws": x / "ws"})
    for path in (f"{x}/ws/leak", f"{x}/ws/up/outside.txt"):
        message = await h.err("read_file", path=path)
        assert message == "path resolves outside root boundary"
        assert "OUTSIDE-SECRET" not in message


async def test_a_path_in_another_root(make_server: MakeServer, x: Path) -> None:
    h = await make_server({"ws": x / "ws", "other": x / "other", "ro": (x / "ws-evil", ["read_file"])})
    # Root omitted: the root the path lies in serves it (if the tool is allowed there).
    assert (await h.ok("read_file", path=f"{x}/other/b.txt"))["content"] == "IN-OTHER\n"
    assert (await h.ok("read_file", path=f"{x}/ws-evil/src/a.py"))["content"] == "EVIL\n"
    message = await h.err("write_file", path=f"{x}/ws-evil/src/a.py", content="x")
    assert message == "tool write_file not allowed on root ro"
    assert (x / "ws-evil" / "src" / "a.py").read_text() == "EVIL\n"
    # Root named: the path is taken in that root only; another root's host path is root-relative there.
    message = await h.err("read_file", root="ws", path=f"{x}/other/b.txt")
    assert message == f"file not found: {x}/other/b.txt"
    no_host_path(await h.err("read_file", root="ws", path=f"{x}/ws/missing.txt"), x)


async def test_a_host_path_inside_a_client_root(make_server: MakeServer, x: Path) -> None:
    h = await make_server({"top": x}, mode="legacy", roots_client=RootsClient(f"file://{x}/ws"))
    assert [r["name"] for r in (await h.ok("list_roots"))["roots"]] == ["ws"]
    assert (await h.ok("read_file", path=f"{x}/ws/src/a.py"))["content"] == "IN-WS\n"
    assert await h.err("read_file", path=f"{x}/ws/../outside.txt") == "path resolves outside root boundary"
    assert (await h.err("read_file", path=f"{x}/outside.txt")).startswith("file not found")


async def test_a_root_served_at_slash_does_not_claim_root_relative_paths(make_server: MakeServer, x: Path) -> None:
    h = await make_server({"ws": x / "ws", "host": ("/", ["read_file"])})
    assert (await h.ok("read_file", path="/src/a.py"))["content"] == "IN-WS\n"
    assert (await h.ok("read_file", root="host", path=f"{x}/ws/src/a.py"))["content"] == "IN-WS\n"
