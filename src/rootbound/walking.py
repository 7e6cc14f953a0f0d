"""Walk a directory tree beneath an open directory handle, never leaving it.

The recursive tools (grep, glob) see a root's subtree only through this walk:

* every directory is listed with `os.scandir(fd)` and its entries typed from the
  directory itself (`d_type`, or `lstat` where the filesystem gives no type) —
  symlinks are never followed to decide what an entry is;
* a subdirectory is opened with `openat(parent_fd, name, O_NOFOLLOW|O_DIRECTORY)`,
  so an entry swapped for a symlink after it was listed fails to open (ELOOP or
  ENOTDIR) and is skipped instead of leading anywhere;
* files are opened the same way by the consumer (`open_file`): relative to the
  parent's handle, `O_NOFOLLOW|O_NONBLOCK`, and kept only if `fstat` says regular.

Symlinks met during the walk — to files or directories, inside the root or out —
are reported as symlinks and never descended into or read: following in-root
links would visit the same files twice and could loop, and following outside
ones is the escape the walk exists to prevent. (A path the agent names
explicitly is resolved by `Root`, which does follow in-root symlinks.)

Entries come in a stable order: each directory's entries sorted by name, each
subdirectory's contents right after the subdirectory itself (pre-order).

One handle is held per level being walked, so depth is capped at `MAX_DEPTH`
levels to stay well inside the process's descriptor limit.
"""

from __future__ import annotations

import errno
import operator
import os
import stat
from collections.abc import Callable, Iterator
from typing import Final

from rootbound.fsops import is_temp_name

__all__ = ["DIRECTORY", "FILE", "MAX_DEPTH", "OTHER", "SYMLINK", "Entry", "open_file", "walk"]

FILE: Final = "file"
DIRECTORY: Final = "directory"
SYMLINK: Final = "symlink"
OTHER: Final = "other"  # fifo, socket, device: listed, never opened

MAX_DEPTH: Final = 256

_DIR_FLAGS: Final = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS: Final = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
# Entries that vanish, turn into symlinks or are unreadable mid-walk are skipped, not fatal.
_SKIP_ERRNOS: Final = frozenset({errno.ENOENT, errno.ENOTDIR, errno.ELOOP, errno.EACCES, errno.EPERM,
                                 errno.ENXIO, errno.EISDIR})


class Entry:
    """One entry met by the walk.

    `path` is relative to the directory the walk started in, `/`-separated, with the
    names as the OS gave them. `dir_fd` is the handle of the directory holding the
    entry: it is valid only until the walk moves past that directory, so use it (or
    `lstat`) before asking for the next entry, or `os.dup` it to keep it.
    """

    __slots__ = ("_dirent", "depth", "dir_fd", "kind", "parent", "path")

    def __init__(self, parent: str, depth: int, kind: str, dir_fd: int, dirent: os.DirEntry[str]) -> None:
        self.parent = parent  # the directory's path with a trailing "/" ("" for the start directory)
        self.path = parent + dirent.name
        self.depth = depth  # 1 for entries directly inside the start directory
        self.kind = kind
        self.dir_fd = dir_fd
        self._dirent = dirent

    @property
    def name(self) -> str:
        return self._dirent.name

    def lstat(self) -> os.stat_result:
        """The entry's own metadata (a symlink's, not its target's)."""
        return self._dirent.stat(follow_symlinks=False)


def _kind(de: os.DirEntry[str]) -> str:
    # follow_symlinks=False: a symlink is neither a file nor a directory here, whatever it points to.
    if de.is_file(follow_symlinks=False):
        return FILE
    if de.is_dir(follow_symlinks=False):
        return DIRECTORY
    if de.is_symlink():
        return SYMLINK
    return OTHER


_name = operator.attrgetter("name")


def _listing(fd: int) -> list[os.DirEntry[str]]:
    try:
        with os.scandir(fd) as it:  # scandir works on a duplicate; `fd` stays ours
            # The server's own temporary entries (writes in progress) are not part of the tree.
            return sorted((de for de in it if not is_temp_name(de.name)), key=_name)
    except OSError as exc:
        if exc.errno in _SKIP_ERRNOS:
            return []
        raise


def _never() -> bool:
    return False


def walk(top_fd: int, *, max_depth: int | None = None, expired: Callable[[], bool] = _never) -> Iterator[Entry]:
    """Yield every entry beneath the directory `top_fd` (borrowed, not closed).

    `max_depth` follows find/ripgrep: 1 lists only the start directory's own
    entries, 2 also those of its subdirectories, and so on. `expired` is polled
    before each directory is opened; when it returns True the walk ends.
    """
    limit = MAX_DEPTH if max_depth is None else min(max_depth, MAX_DEPTH)
    if limit < 1:
        return
    # One frame per open directory: (handle, path prefix, depth, its entries still to visit).
    frames: list[tuple[int, str, int, Iterator[os.DirEntry[str]]]] = [(top_fd, "", 1, iter(_listing(top_fd)))]
    try:
        while frames:
            fd, prefix, depth, entries = frames[-1]
            for de in entries:  # resumes where it left off when we come back from a subdirectory
                try:
                    kind = _kind(de)
                except OSError:
                    continue  # vanished between listing and typing
                entry = Entry(prefix, depth, kind, fd, de)
                yield entry
                if kind != DIRECTORY or depth >= limit:
                    continue
                if expired():
                    return
                try:
                    sub = os.open(de.name, _DIR_FLAGS, dir_fd=fd)
                except OSError as exc:
                    if exc.errno in _SKIP_ERRNOS:
                        continue  # swapped for a symlink or a file, removed, or unreadable: not ours to follow
                    raise
                try:
                    listing = _listing(sub)
                except BaseException:
                    os.close(sub)
                    raise
                frames.append((sub, entry.path + "/", depth + 1, iter(listing)))
                break
            else:
                frames.pop()
                if frames:  # every frame but the first holds a handle we opened
                    os.close(fd)
    finally:
        for fd, *_ in frames[1:]:
            os.close(fd)


def open_file(dir_fd: int, name: str) -> tuple[int, os.stat_result] | None:
    """Open the file `name` listed in `dir_fd` for reading, or None if it is no longer a regular file.

    Relative to the directory's handle with O_NOFOLLOW: a file swapped for a symlink
    since it was listed fails with ELOOP and is skipped; O_NONBLOCK keeps a FIFO
    swapped in from blocking the open, and the `fstat` check refuses it.
    """
    try:
        fd = os.open(name, _FILE_FLAGS, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno in _SKIP_ERRNOS:
            return None
        raise
    try:
        st = os.fstat(fd)
    except BaseException:
        os.close(fd)
        raise
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        return None
    return fd, st
