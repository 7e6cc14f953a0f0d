"""Removing a directory tree by descriptor, at any depth, never following a link.

CPython 3.11's `shutil.rmtree` recurses, one frame per level: a tree about 1,000 deep (a command makes one in
a second) raised RecursionError half-way, so a `.git` a sandboxed command made, with a hook in it, outlived
the sweep meant to remove it. This walks with a list instead, holding one directory open at a time.
"""

from __future__ import annotations

import contextlib
import errno
import os
from dataclasses import dataclass

__all__ = ["remove_tree"]

_SUBDIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


@dataclass
class _Level:
    ident: tuple[int, int]  # (st_dev, st_ino) of the directory
    name: str  # its name in the level above
    pending: list[str] | None = None  # its subdirectories still to remove (None: not listed yet)


def remove_tree(dirfd: int | None, name: str) -> None:
    """Delete directory `name` (beneath `dirfd`; None: a path) and everything in it, at any depth.

    A link is unlinked, a subdirectory opened with O_NOFOLLOW; going back up, ".." must be the very directory
    we came from (device and inode), or it stops (ESTALE) with the rest left in place."""
    fd = os.open(name, _SUBDIR, dir_fd=dirfd)
    try:
        st = os.fstat(fd)
        levels = [_Level((st.st_dev, st.st_ino), name)]
        while True:
            level = levels[-1]
            if level.pending is None:  # first time here: files and links go now, subdirectories one by one
                level.pending = []
                with os.scandir(fd) as entries:
                    for entry in entries:
                        if entry.is_dir(follow_symlinks=False):
                            level.pending.append(entry.name)
                        else:
                            with contextlib.suppress(FileNotFoundError):
                                os.unlink(entry.name, dir_fd=fd)
            if level.pending:
                sub = level.pending.pop()
                try:
                    child = os.open(sub, _SUBDIR, dir_fd=fd)
                except FileNotFoundError:
                    continue
                except (NotADirectoryError, OSError) as exc:  # replaced by a file or a link meanwhile: unlink it
                    if exc.errno not in (errno.ENOTDIR, errno.ELOOP):
                        raise
                    os.unlink(sub, dir_fd=fd)
                    continue
                st = os.fstat(child)
                os.close(fd)
                fd = child
                levels.append(_Level((st.st_dev, st.st_ino), sub))
                continue
            if len(levels) == 1:
                break
            parent = os.open("..", _SUBDIR, dir_fd=fd)
            st = os.fstat(parent)
            os.close(fd)
            fd = parent
            if (st.st_dev, st.st_ino) != levels[-2].ident:
                raise OSError(errno.ESTALE, "a directory was moved while it was being removed", level.name)
            os.rmdir(levels.pop().name, dir_fd=fd)
    finally:
        os.close(fd)
    os.rmdir(name, dir_fd=dirfd)
