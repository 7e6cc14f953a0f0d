"""Putting a before-state back at a path, through directory handles beneath the root.

Every path is resolved beneath the root's handle (`fs.beneath.locate` / `locate_making`: openat2
RESOLVE_BENEATH, or the O_NOFOLLOW walk), the final entry never followed; missing parent
folders are made beneath the root. Files are written with `fs.atomic.write_file` (a new inode, fsynced,
renamed over the name: readers see the old or the restored file, never a part), their mode and mtime as
recorded; a blob whose content no longer matches its hash stops the write before anything is visible.
Folders are rebuilt in a temporary folder beside the target (`fs.trees.temp_dir`, recorded for crash
recovery) and renamed into place.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from typing import Any, Final

from rootbound.fs import atomic, trees
from rootbound.fs.beneath import Located, locate, locate_making
from rootbound.fs.content import copy_fd, write_all
from rootbound.fs.handles import lstat_or_none
from rootbound.journal.blobs import Blobs
from rootbound.journal.model import State

__all__ = ["located", "move_back", "put", "remove", "remove_made_folders"]

_DIR: Final = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def split(rel: str) -> list[str]:
    return [p for p in rel.split("/") if p not in ("", ".")]


def located(root_fd: int, rel: str, *, make_parents: bool = False) -> Located:
    """(parent handle, final name) of `rel` beneath the root; the final entry itself, not followed."""
    parts = split(rel)
    if not parts or parts[-1] == "..":
        raise ValueError(f"not a restorable path: {rel!r}")
    if make_parents:
        return locate_making(root_fd, parts, follow=False)
    return locate(root_fd, parts, follow=False)


def remove(dirfd: int, name: str) -> None:
    """Remove whatever stands at `name` (a folder with everything in it); nothing there is fine."""
    st = lstat_or_none(dirfd, name)
    if st is None:
        return
    if stat.S_ISDIR(st.st_mode):
        trees.remove_tree(dirfd, name)
    else:
        os.unlink(name, dir_fd=dirfd)


def _fill_from(blobs: Blobs, sha: str) -> Any:
    def fill(fd: int) -> int:
        total = 0
        for chunk in blobs.chunks(sha):  # raises Damaged at the end if the content is not `sha`'s
            total += write_all(fd, chunk)
        return total
    return fill


def _put_file(dirfd: int, name: str, blobs: Blobs, state: State) -> None:
    st = lstat_or_none(dirfd, name)
    if st is not None and stat.S_ISDIR(st.st_mode):
        trees.remove_tree(dirfd, name)  # a forced undo: a folder stands where the file was
    atomic.write_file(dirfd, name, _fill_from(blobs, state["sha256"]), replace=True, perms=state["mode"] & 0o7777)
    _set_mtime(dirfd, name, state)


def _set_mtime(dirfd: int, name: str, state: State) -> None:
    mtime = state.get("mtime_ns")
    if isinstance(mtime, int):
        with contextlib.suppress(OSError):
            os.utime(name, ns=(mtime, mtime), dir_fd=dirfd, follow_symlinks=False)


def _put_symlink(dirfd: int, name: str, text: str) -> None:
    st = lstat_or_none(dirfd, name)
    if st is not None and stat.S_ISDIR(st.st_mode):
        trees.remove_tree(dirfd, name)
    with contextlib.ExitStack() as records:  # the temporary name is recorded for recovery before it exists
        _, tmp = atomic.make_temp(dirfd, records, lambda tmp: os.symlink(text, tmp, dir_fd=dirfd))
        try:
            os.rename(tmp, name, src_dir_fd=dirfd, dst_dir_fd=dirfd)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=dirfd)
            raise


def _build_tree(fd: int, blobs: Blobs, items: list[dict[str, Any]]) -> None:
    """Recreate a folder's listing inside the empty folder `fd` (parents come before children in it)."""
    dirs: dict[str, int] = {"": fd}
    modes: list[tuple[int, int]] = []
    try:
        for item in items:
            parent, _, name = item["rel"].rpartition("/")
            pfd = dirs[parent]
            kind = item["kind"]
            if kind == "dir":
                os.mkdir(name, 0o700, dir_fd=pfd)
                sub = os.open(name, _DIR, dir_fd=pfd)
                dirs[item["rel"]] = sub
                modes.append((sub, item["mode"]))
            elif kind == "file":
                atomic.write_file(pfd, name, _fill_from(blobs, item["sha256"]), replace=False,
                                 perms=item["mode"] & 0o7777)
                _set_mtime(pfd, name, item)
            elif kind == "symlink":
                os.symlink(item["text"], name, dir_fd=pfd)
    finally:
        for sub, mode in reversed(modes):
            with contextlib.suppress(OSError):
                os.fchmod(sub, mode & 0o7777)
        for rel, sub in dirs.items():
            if rel:
                os.close(sub)


def _put_tree(dirfd: int, name: str, blobs: Blobs, state: State) -> None:
    with trees.temp_dir(dirfd) as (tfd, tmp):
        _build_tree(tfd, blobs, state["items"])
        os.fchmod(tfd, state["mode"] & 0o7777)
        remove(dirfd, name)  # nothing there, but for a forced undo
        atomic.rename_noreplace(dirfd, tmp, dirfd, name)


def remove_made_folders(root_fd: int, rels: list[str]) -> None:
    """Remove the folders a change made for its path (root-relative, innermost first), each only while it is
    empty: what anyone put there since stays, with the folders that hold it."""
    for rel in rels:
        try:
            loc = located(root_fd, rel)
        except (OSError, ValueError):
            continue
        try:
            with contextlib.suppress(OSError):
                os.rmdir(loc.name, dir_fd=loc.dirfd)
        finally:
            loc.close()


def put(dirfd: int, name: str, blobs: Blobs, state: State) -> None:
    """Make `name` in `dirfd` hold `state` (absent, file, symlink or tree)."""
    kind = state["kind"]
    if kind == "absent":
        remove(dirfd, name)
    elif kind == "file":
        _put_file(dirfd, name, blobs, state)
    elif kind == "symlink":
        _put_symlink(dirfd, name, state["text"])
    elif kind == "tree":
        _put_tree(dirfd, name, blobs, state)
    else:
        raise ValueError(f"cannot restore a {kind}")


def move_back(src: Located, dst: Located) -> None:
    """Move what stands at `dst` back to `src` (which must be free), across filesystems if need be."""
    try:
        atomic.rename_noreplace(dst.dirfd, dst.name, src.dirfd, src.name)
        return
    except OSError as exc:
        if exc.errno != errno.EXDEV:
            raise
    st = os.stat(dst.name, dir_fd=dst.dirfd, follow_symlinks=False)
    if stat.S_ISLNK(st.st_mode):
        _put_symlink(src.dirfd, src.name, os.readlink(dst.name, dir_fd=dst.dirfd))
    elif stat.S_ISDIR(st.st_mode):
        sfd = os.open(dst.name, _DIR, dir_fd=dst.dirfd)
        try:
            with trees.temp_dir(src.dirfd) as (tfd, tmp):
                stats = trees.CopyStats()
                trees.copy_tree(sfd, tfd, stats, check=lambda rel: None, link_ok=lambda rel, text: True)
                os.fchmod(tfd, stat.S_IMODE(st.st_mode))
                atomic.rename_noreplace(src.dirfd, tmp, src.dirfd, src.name)
        finally:
            os.close(sfd)
    else:
        fd = os.open(dst.name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dst.dirfd)
        try:
            atomic.write_file(src.dirfd, src.name, lambda out: copy_fd(fd, out), replace=False,
                             perms=stat.S_IMODE(st.st_mode))
        finally:
            os.close(fd)
        os.utime(src.name, ns=(st.st_atime_ns, st.st_mtime_ns), dir_fd=src.dirfd, follow_symlinks=False)
    remove(dst.dirfd, dst.name)
