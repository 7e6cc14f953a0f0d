"""`root` is optional (issue 15 item 3): omitted, a file tool works in the connection's project root — the first
accepted client root, else the first operator root — and list_roots says which that is."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import MakeServer, RootsClient

pytestmark = pytest.mark.anyio


@pytest.fixture
def two(tmp_path: Path) -> dict[str, Path]:
    roots = {"ws": tmp_path / "ws", "other": tmp_path / "other"}
    for name, path in roots.items():
        path.mkdir()
        (path / "a.txt").write_text(f"in {name}\n")
    return roots


async def test_without_client_roots_the_first_operator_root_is_the_default(make_server: MakeServer,
                                                                          two: dict[str, Path]) -> None:
    h = await make_server(two)
    listed = await h.ok("list_roots")
    assert listed["default_root"] == "ws"
    assert (await h.ok("read_file", path="a.txt"))["content"] == "in ws\n"
    # Every file tool takes it: a write, a listing, a search and a copy without any root.
    await h.ok("write_file", path="new.txt", content="x")
    assert (two["ws"] / "new.txt").read_text() == "x"
    assert [e["name"] for e in (await h.ok("list_folder", path="."))["entries"]] == ["a.txt", "new.txt"]
    assert (await h.ok("grep", pattern="in ws"))["total_matches"] == 1
    assert (await h.ok("glob", pattern="*.txt"))["total_matches"] == 2
    await h.ok("stat_file", path="a.txt")
    await h.ok("hash_file", path="a.txt")
    await h.ok("edit_file", path="new.txt", old_string="x", new_string="y")
    assert (two["ws"] / "new.txt").read_text() == "y"
    # Naming a root still works, and a root omitted for copy's destination is the source's root.
    assert (await h.ok("read_file", root="other", path="a.txt"))["content"] == "in other\n"
    await h.ok("copy", source_root="other", source_path="a.txt", dest_path="b.txt")
    assert (two["other"] / "b.txt").read_text() == "in other\n"
    assert not (two["ws"] / "b.txt").exists()
    await h.ok("move", source_path="new.txt", dest_path="moved.txt")
    assert (two["ws"] / "moved.txt").read_text() == "y"


async def test_with_client_roots_the_first_accepted_client_root_is_the_default(
        make_server: MakeServer, two: dict[str, Path], tmp_path: Path) -> None:
    (two["other"] / "proj").mkdir()
    (two["other"] / "proj" / "a.txt").write_text("in proj\n")
    h = await make_server(two, mode="legacy", roots_client=RootsClient(
        f"file://{tmp_path}/elsewhere", f"file://{two['other']}/proj", f"file://{two['ws']}"))
    listed = await h.ok("list_roots")
    assert [r["name"] for r in listed["roots"]] == ["proj", "ws"]
    assert listed["default_root"] == "proj"
    assert (await h.ok("read_file", path="a.txt"))["content"] == "in proj\n"


async def test_the_default_root_keeps_its_allowlist(make_server: MakeServer, two: dict[str, Path]) -> None:
    h = await make_server({"ws": (two["ws"], ["read_file"]), "other": two["other"]})
    assert await h.err("write_file", path="x.txt", content="x") == "tool write_file not allowed on root ws"
    assert not (two["ws"] / "x.txt").exists()


async def test_no_root_at_all_says_so(make_server: MakeServer, two: dict[str, Path]) -> None:
    """A server whose roots are all gone for this connection cannot default to one (nor crash)."""
    h = await make_server(two)
    h.app.roots.default = None
    message = await h.err("read_file", path="a.txt")
    assert message.startswith("no root given") and "roots: ws, other" in message
