"""Security review of the FILE tools: attacks an agent could make through the real protocol.

Each test builds a real tree (symlinks, hard links, FIFOs, odd names), calls the tools as an
agent would, and checks that nothing outside the root was read, written, created or removed,
that protected paths hold whatever the spelling, and that no host path leaks into an answer.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
from pathlib import Path

import pytest

from tests.conftest import Harness, MakeServer, RootsClient

pytestmark = pytest.mark.anyio


def outside_state(outside: Path) -> dict[str, str]:
    """Everything in `outside` (names and contents), to compare before and after an attack."""
    out = {}
    for dirpath, dirs, files in os.walk(outside):
        for name in dirs + files:
            p = Path(dirpath) / name
            out[str(p.relative_to(outside))] = "dir" if p.is_dir() else p.read_text(errors="replace")
    return out


def no_host_path(text: str, *paths: Path) -> None:
    for p in paths:
        assert str(p) not in text, f"host path leaked: {text}"


def tr(src: str, dst: str, src_root: str = "workspace", dst_root: str = "workspace") -> dict[str, str]:
    return {"source_root": src_root, "source_path": src, "dest_root": dst_root, "dest_path": dst}


@pytest.fixture
async def two(make_server: MakeServer, workspace: Path, tmp_path: Path) -> Harness:
    return await make_server({"workspace": workspace, "other": tmp_path / "other"})


# -- writing through symlinks and `..` ---------------------------------------------------------------


@pytest.mark.parametrize("path", ["a/b/c.txt", "a/new/deeper/c.txt", "in/../a/x.txt", "../outside/x.txt",
                                  "in/../../outside/x.txt", "dangling", "dangling_abs", "dir_link/x.txt"])
@pytest.mark.parametrize("mode", ["overwrite", "append", "create_only"])
async def test_write_never_creates_outside(server: Harness, workspace: Path, outside: Path, tmp_path: Path,
                                           resolver: str, path: str, mode: str) -> None:
    (workspace / "a").symlink_to(outside)
    (workspace / "in").mkdir()
    (workspace / "dangling").symlink_to("../outside/planted.txt")
    (workspace / "dangling_abs").symlink_to(outside / "planted_abs.txt")
    (workspace / "dir_link").symlink_to("in/../../outside")
    before = outside_state(outside)
    text = await server.err("write_file", root="workspace", path=path, content="PWNED", mode=mode)
    assert "outside root boundary" in text
    no_host_path(text, tmp_path)
    assert outside_state(outside) == before


@pytest.mark.parametrize("path", ["dangling", "a/x.txt"])
async def test_patch_and_create_folder_never_create_outside(server: Harness, workspace: Path, outside: Path,
                                                            resolver: str, path: str) -> None:
    (workspace / "a").symlink_to("../outside")
    (workspace / "dangling").symlink_to("../outside/planted.txt")
    before = outside_state(outside)
    patch = "--- /dev/null\n+++ b/x\n@@ -0,0 +1 @@\n+PWNED\n"
    assert "outside root boundary" in await server.err("patch_file", root="workspace", path=path, patch=patch)
    assert "outside root boundary" in await server.err("create_folder", root="workspace", path=path + "/sub/dir")
    assert outside_state(outside) == before


async def test_mkdir_p_race_with_a_symlink_swapped_in(server: Harness, workspace: Path, outside: Path,
                                                      resolver: str) -> None:
    """A thread keeps replacing `a/b` with a symlink to outside while write_file creates `a/b/c/d.txt`."""
    (workspace / "a").mkdir()
    stop = threading.Event()

    def swap() -> None:
        b, n = workspace / "a" / "b", 0
        while not stop.is_set():
            n += 1
            with contextlib.suppress(OSError):
                os.rename(b, workspace / "a" / f"aside{n}")  # a directory the writer made: out of the way
            with contextlib.suppress(OSError):
                b.symlink_to(outside)  # ... and a link to outside in its place, for a moment
            with contextlib.suppress(OSError):
                b.unlink()

    t = threading.Thread(target=swap, daemon=True)
    t.start()
    try:
        for i in range(40):
            await server.call("write_file", root="workspace", path=f"a/b/c{i}/d.txt", content="PWNED")
    finally:
        stop.set()
        t.join()
    assert sorted(os.listdir(outside)) == ["secret.txt"]


# -- hard links ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("how", ["overwrite", "append", "patch", "copy_onto", "move_onto"])
async def test_hard_link_to_an_outside_file_is_never_written_through(server: Harness, workspace: Path,
                                                                     outside: Path, how: str) -> None:
    try:
        os.link(outside / "secret.txt", workspace / "linked.txt")
    except OSError as exc:
        pytest.skip(f"no hard links here: {exc}")
    (workspace / "other.txt").write_text("other\n")
    if how in ("overwrite", "append"):
        await server.ok("write_file", root="workspace", path="linked.txt", content="PWNED\n", mode=how)
    elif how == "patch":
        await server.ok("patch_file", root="workspace", path="linked.txt",
                        patch="@@ -1 +1,2 @@\n OUTSIDE-SECRET\n+PWNED\n")
    else:
        await server.ok("copy" if how == "copy_onto" else "move", **tr("other.txt", "linked.txt"))
    assert (outside / "secret.txt").read_text() == "OUTSIDE-SECRET\n"
    assert os.stat(outside / "secret.txt").st_nlink == 1


# -- copy and move ------------------------------------------------------------------------------------


async def test_copy_folder_with_outside_links_into_another_root(two: Harness, workspace: Path, outside: Path,
                                                                tmp_path: Path) -> None:
    (workspace / "a" / "d").mkdir(parents=True)
    (workspace / "a" / "d" / "abs").symlink_to(outside / "secret.txt")
    (workspace / "a" / "d" / "rel").symlink_to("../../../outside/secret.txt")
    (workspace / "a" / "d" / "up").symlink_to("../../x.txt")  # in the source root; one level too high in `other`
    got = await two.ok("copy", **tr("a/d", "d", "workspace", "other"))
    assert sorted(s["path"] for s in got["skipped"]) == ["abs", "rel", "up"]
    assert os.listdir(tmp_path / "other" / "d") == []
    no_host_path(str(got), tmp_path)


async def test_copy_source_through_outside_symlink_refused(two: Harness, workspace: Path, outside: Path) -> None:
    (workspace / "out").symlink_to("../outside")
    assert "outside root boundary" in await two.err("copy", **tr("out/secret.txt", "s.txt", "workspace", "other"))
    assert "outside root boundary" in await two.err("copy", **tr("out", "o", "workspace", "other"))


@pytest.mark.parametrize("dest", ["out/x.txt", "out", "dangling", "deep/../../outside/x"])
@pytest.mark.parametrize("tool", ["copy", "move"])
async def test_copy_and_move_destination_never_outside(server: Harness, workspace: Path, outside: Path,
                                                       resolver: str, dest: str, tool: str) -> None:
    (workspace / "f.txt").write_text("in\n")
    (workspace / "deep").mkdir()
    (workspace / "out").symlink_to("../outside")
    (workspace / "dangling").symlink_to("../outside/planted.txt")
    before = outside_state(outside)
    res = await server.call(tool, **tr("f.txt", dest))
    if tool == "move" and dest == "dangling" and not res.is_error:
        assert not (workspace / "dangling").is_symlink()  # the link was replaced, not followed
    else:
        assert res.is_error
    assert outside_state(outside) == before


async def test_move_symlink_where_it_would_lead_outside_is_refused(two: Harness, workspace: Path,
                                                                   tmp_path: Path) -> None:
    """A relative link that is fine where it is must not be moved to where it leads out of its root."""
    (workspace / "a" / "b").mkdir(parents=True)
    (workspace / "x.txt").write_text("x\n")
    (workspace / "a" / "b" / "l").symlink_to("../../x.txt")
    text = await two.err("move", **tr("a/b/l", "l"))
    assert "outside" in text
    assert os.readlink(workspace / "a" / "b" / "l") == "../../x.txt"
    assert "outside" in await two.err("move", **tr("a/b/l", "l", "workspace", "other"))
    # A folder holding such a link is refused too, moved within the root or to another one.
    assert "outside" in await two.err("move", **tr("a/b", "b"))
    assert "outside" in await two.err("move", **tr("a/b", "b", "workspace", "other"))
    assert (workspace / "a" / "b" / "l").is_symlink()
    # Moves that keep every link inside still work.
    await two.ok("move", **tr("a/b/l", "c/d/l"))
    assert (workspace / "c" / "d" / "l").read_text() == "x\n"


async def test_move_folder_into_its_own_subtree_through_a_symlink(server: Harness, workspace: Path) -> None:
    (workspace / "a" / "sub").mkdir(parents=True)
    (workspace / "into").symlink_to("a/sub")
    text = await server.err("move", **tr("a", "into/a"))
    assert "into itself" in text
    assert (workspace / "a" / "sub").is_dir()
    assert "into itself" in await server.err("copy", **tr("a", "into/a"))


async def test_remove_folder_through_symlinked_parent(server: Harness, workspace: Path, outside: Path) -> None:
    (outside / "victim").mkdir()
    (outside / "victim" / "f").write_text("keep\n")
    (workspace / "out").symlink_to("../outside")
    (workspace / "real" / "sub").mkdir(parents=True)
    (workspace / "inlink").symlink_to("real")
    assert "outside root boundary" in await server.err("remove_folder", root="workspace", path="out/victim")
    assert "outside root boundary" in await server.err("remove_file", root="workspace", path="out/secret.txt")
    assert (outside / "victim" / "f").read_text() == "keep\n"
    await server.ok("remove_folder", root="workspace", path="inlink/sub")
    assert not (workspace / "real" / "sub").exists()


# -- protected paths ----------------------------------------------------------------------------------


@pytest.mark.parametrize("path", [".GIT/Config", "./.git//config", "x/../.git/config", ".git/./hooks/pre-commit",
                                  "innocent/pre-commit", ".git/hooks/../hooks/post-merge", "sub/.Git/HOOKS/x",
                                  ".git/x/../config", "/.git/config", "innocent/../config"])
async def test_protected_path_spellings(server: Harness, workspace: Path, path: str) -> None:
    (workspace / ".git" / "hooks").mkdir(parents=True)
    (workspace / ".git" / "x").mkdir()
    (workspace / "x").mkdir()
    (workspace / "innocent").symlink_to(".git/hooks")
    (workspace / "f.txt").write_text("#!/bin/sh\necho pwned\n")
    assert "protected path" in await server.err("write_file", root="workspace", path=path, content="x")
    assert "protected path" in await server.err("copy", **tr("f.txt", path))
    assert "protected path" in await server.err("move", **tr("f.txt", path))
    assert "protected path" in await server.err("patch_file", root="workspace", path=path,
                                                patch="--- /dev/null\n+++ b/x\n@@ -0,0 +1 @@\n+x\n")
    assert not list((workspace / ".git" / "hooks").iterdir())
    assert not (workspace / ".git" / "config").exists()


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


async def test_patch_headers_naming_other_files_touch_only_path(server: Harness, workspace: Path,
                                                                outside: Path) -> None:
    (workspace / "a.txt").write_text("one\n")
    patch = "--- a/../../outside/secret.txt\n+++ b/../../outside/secret.txt\n@@ -1 +1 @@\n-one\n+two\n"
    await server.ok("patch_file", root="workspace", path="a.txt", patch=patch)
    assert (workspace / "a.txt").read_text() == "two\n"
    assert (outside / "secret.txt").read_text() == "OUTSIDE-SECRET\n"
    evil = "--- /etc/passwd\n+++ /etc/passwd\n@@ -1 +1 @@\n-two\n+three\n" \
           "--- .git/config\n+++ .git/config\n@@ -0,0 +1 @@\n+x\n"
    await server.err("patch_file", root="workspace", path="a.txt", patch=evil)
    assert not (workspace / ".git").exists()


async def test_client_root_inside_a_repository_keeps_its_protection(make_server: MakeServer, workspace: Path
                                                                    ) -> None:
    """A client narrowing to `repo/.git` must not turn `hooks/pre-commit` into an ordinary path."""
    (workspace / "repo" / ".git" / "hooks").mkdir(parents=True)
    gitdir = workspace / "repo" / ".git"
    h = await make_server(mode="legacy", roots_client=RootsClient((f"file://{gitdir}", "g")))
    assert [r["name"] for r in (await h.ok("list_roots"))["roots"]] == ["g"]
    assert "protected path" in await h.err("write_file", root="g", path="hooks/pre-commit", content="x")
    assert "protected path" in await h.err("write_file", root="g", path="config", content="x")
    assert not (gitdir / "config").exists()


async def test_client_root_uri_tricks(make_server: MakeServer, workspace: Path, outside: Path,
                                      tmp_path: Path) -> None:
    (workspace / "link_out").symlink_to(outside)
    uris = [f"file://{workspace}%2F..%2Foutside", f"file://{workspace}/link_out", f"file://evil.example{outside}",
            f"file://{workspace}/%2e%2e/outside", f"file:{outside}"]
    h = await make_server(mode="legacy", roots_client=RootsClient(*uris))
    roots = await h.ok("list_roots")
    assert [r["name"] for r in roots["roots"]] == ["workspace"]
    no_host_path(str(roots), tmp_path)


# -- search -------------------------------------------------------------------------------------------


async def test_search_never_leaves_the_root(server: Harness, workspace: Path, outside: Path, tmp_path: Path,
                                            resolver: str) -> None:
    (workspace / "out").symlink_to("../outside")
    (workspace / "f.txt").write_text("inside\n")
    for path in ("out", "../outside", "out/secret.txt", "/../outside"):
        text = await server.err("grep", root="workspace", pattern="SECRET", path=path)
        assert "outside root boundary" in text
        no_host_path(text, tmp_path)
        assert "outside root boundary" in await server.err("glob", root="workspace", pattern="*", path=path)
    for glob_filter in ("../outside/*", f"{outside}/*", "**/../../outside/*", "../*"):
        got = await server.ok("grep", root="workspace", pattern="SECRET", glob_filter=glob_filter)
        assert got["matches"] == []
    for pattern in ("../**", "../outside/*", f"{outside}/**", "**/../**"):
        got = await server.ok("glob", root="workspace", pattern=pattern)
        assert all(not m["path"].startswith("..") for m in got["matches"])
    got = await server.ok("glob", root="workspace", regex=".*", type_filter="all")
    assert {m["path"] for m in got["matches"]} == {"out", "f.txt"}


async def test_grep_special_files_and_odd_names(server: Harness, workspace: Path, outside: Path) -> None:
    os.mkfifo(workspace / "fifo")
    sock = socket.socket(socket.AF_UNIX)
    with contextlib.suppress(OSError):  # a socket path too long for sun_path: the test goes on without it
        sock.bind(str(workspace / "sock"))
    (workspace / "new\nline.txt").write_text("needle one\n")
    (workspace / os.fsdecode(b"bad\xff.txt")).write_text("needle two\n")
    (workspace / "..txt").write_text("needle three\n")
    (workspace / "out").symlink_to("../outside")
    (workspace / "secret_link.txt").symlink_to("../outside/secret.txt")
    for n in range(300):  # several batches: the helper process takes some
        (workspace / f"f{n:03}.txt").write_text("needle\n" if n % 3 == 0 else "hay\n")
    got = await server.ok("grep", root="workspace", pattern="needle|SECRET", max_results=1000)
    files = [m["file"] for m in got["matches"]]
    assert all("SECRET" not in m["line_content"] for m in got["matches"])
    assert "..txt" in files and len(files) == len(set(files)) == 103
    assert "not a regular file" in await server.err("grep", root="workspace", pattern="x", path="fifo")
    sock.close()


async def test_grep_deep_tree_and_regex_blowup(server: Harness, workspace: Path) -> None:
    p = workspace
    for _ in range(300):
        p = p / "d"
        p.mkdir()
    (p / "bottom.txt").write_text("needle\n")
    got = await server.ok("grep", root="workspace", pattern="needle")
    assert got["matches"] == []  # below the walk's depth cap: skipped, not a crash
    (workspace / "long.txt").write_text("a" * 200_000 + "\n")
    got = await server.ok("grep", root="workspace", pattern="(a*)*b|(a|aa)+c|(x+x+)+y", max_depth=1)
    assert got["matches"] == [] and not got["timed_out"]
    got = await server.ok("glob", root="workspace", pattern="*a*a*a*a*a*a*a*a*a*a*a*a*c", max_depth=1)
    assert got["matches"] == []


async def test_limits_are_bounded(server: Harness) -> None:
    for bad in ({"max_results": 10**9}, {"context_lines": 10**6}):
        assert "invalid arguments" in await server.err("grep", root="workspace", pattern="x", **bad)


@pytest.mark.parametrize("tool", ["grep", "glob", "copy", "list_folder"])
async def test_a_fifo_named_as_the_start_is_never_opened(server: Harness, workspace: Path, tool: str) -> None:
    """Opening a FIFO for reading wakes a writer blocked on it: the tools must refuse it unopened."""
    fifo = workspace / "fifo"
    os.mkfifo(fifo)
    woke = threading.Event()

    def writer() -> None:
        fd = os.open(fifo, os.O_WRONLY)  # blocks until someone opens the FIFO for reading
        woke.set()
        os.close(fd)

    t = threading.Thread(target=writer, daemon=True)
    t.start()
    try:
        if tool == "copy":
            text = await server.err("copy", **tr("fifo", "copied"))
        else:
            extra = {} if tool == "list_folder" else {"pattern": "x"}
            text = await server.err(tool, root="workspace", path="fifo", **extra)
        assert "not a" in text
        assert not woke.wait(0.2)  # with the bug the writer wakes at once
    finally:
        os.close(os.open(fifo, os.O_RDONLY | os.O_NONBLOCK))  # release the writer
        t.join()
    assert not (workspace / "copied").exists()


async def test_protection_holds_in_a_nested_root_renamed_through_its_parent(make_server: MakeServer,
                                                                           workspace: Path) -> None:
    """Root `proj` lies inside root `workspace`; renaming it there must not blind `proj`'s checks."""
    proj = workspace / "proj"
    (proj / ".git").mkdir(parents=True)
    (proj / "innocent").symlink_to(".git")
    h = await make_server({"workspace": workspace, "proj": proj})
    await h.ok("move", **tr("proj", "moved"))
    assert "protected path" in await h.err("write_file", root="proj", path="innocent/config", content="x")
    assert not (workspace / "moved" / ".git" / "config").exists()


def _deep(top: Path, levels: int) -> Path:
    """A chain of `levels` directories below `top`, made by descriptor (the path gets too long for one call)."""
    top.mkdir()
    fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for _ in range(levels):
            os.mkdir("d", dir_fd=fd)
            nfd = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = nfd
        os.close(os.open("f.txt", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd))
    finally:
        os.close(fd)
    return top


def _remove_chain(top: Path) -> None:
    """Remove what `_deep` made, by descriptor (shutil.rmtree, and so pytest's clean-up, recurses too deep)."""
    fds = [os.open(top, os.O_RDONLY | os.O_DIRECTORY)]
    try:
        with contextlib.suppress(FileNotFoundError):
            while True:
                fds.append(os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fds[-1]))
        os.unlink("f.txt", dir_fd=fds[-1])
        for parent in reversed(fds[:-1]):
            os.rmdir("d", dir_fd=parent)
    finally:
        for fd in fds:
            os.close(fd)
    top.rmdir()


async def test_very_deep_trees_are_refused_cleanly(server: Harness, workspace: Path) -> None:
    """remove_folder and move walk the tree for protected paths: a deep one must not crash them."""
    _deep(workspace / "top", 1200)
    try:
        for tool, kwargs in (("remove_folder", {"root": "workspace", "path": "top"}), ("move", tr("top", "top2"))):
            text = await server.err(tool, **kwargs)
            assert "too deep" in text and "internal error" not in text
        assert (workspace / "top").is_dir() and not (workspace / "top2").exists()
    finally:
        _remove_chain(workspace / "top")
    _deep(workspace / "ok", 100)
    await server.ok("move", **tr("ok", "ok2"))
    got = await server.ok("remove_folder", root="workspace", path="ok2")
    assert got["entries_removed"] == 101


async def test_a_final_symlink_to_a_protected_file(server: Harness, workspace: Path) -> None:
    """Writing through `cfg -> .git/config` is writing .git/config."""
    (workspace / ".git").mkdir()
    (workspace / ".git" / "config").write_text("[core]\n")
    (workspace / "cfg").symlink_to(".git/config")
    (workspace / "f.txt").write_text("x\n")
    for mode in ("overwrite", "append"):
        assert "protected path" in await server.err("write_file", root="workspace", path="cfg", content="x", mode=mode)
    assert "protected path" in await server.err("patch_file", root="workspace", path="cfg",
                                                patch="@@ -1 +1 @@\n-[core]\n+[core] x\n")
    assert "protected path" in await server.err("copy", **tr("f.txt", "cfg"))
    # move would only replace the link, but it decides "is cfg a folder?" through it, and refuses too.
    assert "protected path" in await server.err("move", **tr("f.txt", "cfg"))
    assert (workspace / ".git" / "config").read_text() == "[core]\n"


async def test_patch_search_is_linear_on_repetitive_files(server: Harness, workspace: Path) -> None:
    """A file of identical lines and a long hunk that fails only on its last line: every position matches
    the first line. The old search compared hunk-length slices at each one (a million x 50,000 here:
    over a minute of a worker thread, growing with both); now it is linear, and a real match is still found."""
    (workspace / "same.txt").write_bytes(b"a\n" * 1_000_000 + b"b\n")
    hunk = "@@ -1,50001 +1,50001 @@\n" + " a\n" * 50_000 + "-c\n+d\n"
    text = await server.err("patch_file", root="workspace", path="same.txt", patch=hunk)
    assert "does not match" in text
    ok = "@@ -10,3 +10,3 @@\n a\n a\n-b\n+B\n"  # header far off: the match is found near the end
    got = await server.ok("patch_file", root="workspace", path="same.txt", patch=ok)
    assert got["hunks"] == [{"hunk": 1, "line": 999_999, "offset": 999_989}]
    assert (workspace / "same.txt").read_bytes().endswith(b"a\nB\n")
