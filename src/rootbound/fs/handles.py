"""What an open directory handle says about itself: where it is now, whether it lies below another, what it holds.

Read from /proc and by walking up `..` by inode, never by name, so a directory renamed
since it was opened is found where it is. Used to match protected-path rules, to refuse
a copy into itself and to check recovery records; never to open anything by path.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Generator

__all__ = ["ancestors", "fd_path", "is_inside", "lstat_or_none", "real_relpath"]


def lstat_or_none(dirfd: int, name: str) -> os.stat_result | None:
    """The entry `name` in `dirfd` itself (a symlink's own status); None when there is none."""
    try:
        return os.stat(name, dir_fd=dirfd, follow_symlinks=False)
    except FileNotFoundError:
        return None


def fd_path(fd: int) -> str | None:
    """Where the open directory `fd` is now, as a host path; None if unknown (no /proc) or deleted."""
    try:
        where = os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return None
    if not where.startswith("/") or where.endswith(" (deleted)"):
        return None
    return where


def real_relpath(dirfd: int, rootfd: int) -> list[str] | None:
    """Where `dirfd` really is, as components relative to the root open at `rootfd`; None if unknown.

    Both places are read now, from the handles: a root's configured path goes stale when
    the directory is renamed (through an enclosing root, say), and a stale base would hide
    a path's real location from the protected-path rules.
    """
    where, base = fd_path(dirfd), fd_path(rootfd)
    if where is None or base is None:
        return None
    if where == base:
        return []
    base = base.rstrip("/")
    if where.startswith(base + "/"):
        return where[len(base) + 1:].split("/")
    return None


def ancestors(fd: int) -> Generator[int, None, None]:
    """`fd` and each directory above it up to `/`, as O_PATH handles (each closed as the walk moves on).

    Stops early at a directory whose parent cannot be searched: nothing of ours is above it."""
    cur = os.open(".", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=fd)
    try:
        for _ in range(4096):
            yield cur
            try:
                up = os.open("..", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=cur)
            except OSError:
                return
            if os.path.samestat(os.fstat(up), os.fstat(cur)):  # `/`
                os.close(up)
                return
            os.close(cur)
            cur = up
    finally:
        with contextlib.suppress(OSError):
            os.close(cur)


def is_inside(dirfd: int, ancestor: os.stat_result) -> bool:
    """True if the directory `dirfd` is `ancestor` or lies below it (walking up by inode, never by name)."""
    with contextlib.closing(ancestors(dirfd)) as up:
        return any(os.path.samestat(os.fstat(fd), ancestor) for fd in up)
