"""Open an absolute path without following a symbolic link anywhere on the way (O_PATH, one component at a time).

Used where a path string must name exactly the inode that was meant: the launcher inside
bubblewrap checks that each bind landed at its path (a symlink swapped into the path would
have sent it elsewhere), and the server opens `allowed_cwd_roots` work areas before binding
them. Imports only what `os` already has: the launcher pays for every import on every command.
"""

from __future__ import annotations

import errno
import os
import stat

__all__ = ["open_path"]

_FLAGS = os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC


def open_path(path: str) -> tuple[int, int]:
    """(parent, entry): O_PATH descriptors of `path`'s parent directory and of `path` itself; the caller closes both.

    Raises OSError when a component is missing or a symbolic link, or the path is not canonical.
    """
    parts = [p for p in path.split("/") if p]
    if not path.startswith("/") or not parts or "." in parts or ".." in parts:
        raise OSError(errno.EINVAL, "not a canonical absolute path")
    parent, entry = -1, os.open("/", _FLAGS | os.O_DIRECTORY)
    try:
        for n, name in enumerate(parts):
            if parent >= 0:
                os.close(parent)
            parent, entry = entry, -1
            last = n == len(parts) - 1
            entry = os.open(name, _FLAGS if last else _FLAGS | os.O_DIRECTORY, dir_fd=parent)
        if stat.S_ISLNK(os.fstat(entry).st_mode):  # O_PATH|O_NOFOLLOW opens a final symlink itself
            raise OSError(errno.ELOOP, os.strerror(errno.ELOOP))
    except BaseException:
        for fd in (parent, entry):
            if fd >= 0:
                os.close(fd)
        raise
    return parent, entry
