"""The server's own directories in the temp folder that a killed server leaves behind, and their removal.

A server removes its spill directory and its commands' private directories itself; one killed outright
(SIGKILL, a crash) cannot. So each such directory is named for the server that made it: a prefix, its PID
namespace and its PID (`name`). `sweep` removes those whose server is gone: same namespace (a PID means nothing
in another one, e.g. a container sharing the temp folder), a PID that no longer runs, and only real directories
of our own user (the temp folder is shared: a link or another user's entry with such a name is left alone; its
sticky bit lets nobody else rename or replace ours, and rmtree follows no link inside).
"""

from __future__ import annotations

import contextlib
import os
import re
import stat

from rootbound.fs.removal import remove_tree

__all__ = ["name", "sweep"]

_PID_MAX = 1 << 22  # the kernel's PID_MAX_LIMIT on 64-bit


def _pid_namespace() -> int:
    try:
        return os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return 0  # unknown: nothing is swept


def name(prefix: str) -> str:
    """The start of a directory name that says this server made it (the caller adds something unique)."""
    return f"{prefix}{_pid_namespace()}-{os.getpid()}-"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process
    return True


def sweep(parent: str, prefix: str) -> None:
    """Remove the directories in `parent` named by `name(prefix)` for servers gone from this PID namespace."""
    namespace, me, uid = _pid_namespace(), os.getpid(), os.geteuid()
    made = re.compile(rf"{re.escape(prefix)}([0-9]+)-([0-9]+)-.+", re.DOTALL)
    try:
        names = os.listdir(parent)
    except OSError:
        return
    for entry in names:
        found = made.fullmatch(entry)
        if found is None or not namespace or int(found[1]) != namespace:
            continue
        pid = int(found[2])
        path = os.path.join(parent, entry)
        try:
            st = os.lstat(path)
        except OSError:
            continue
        # Ours first: anyone can put a name in the temp folder, e.g. one with a PID kill() cannot take (OverflowError
        # out of a server's start). Only then the PID, which a server made within kill()'s range.
        if not (stat.S_ISDIR(st.st_mode) and st.st_uid == uid) or not 0 < pid <= _PID_MAX or pid == me or _alive(pid):
            continue
        with contextlib.suppress(OSError):
            remove_tree(None, path)
