"""Spill files: the full output of a command whose result had to be cut, kept where the agent can page through it.

They live in a private directory the server creates for itself (mode 0700 under
the system temp directory, named `rootbound-output-<pid>-*`), served as one extra
root, `command-output`, that allows only the read-only file tools. So the agent
reads a spill with `read_file(root="command-output", path=..., offset_bytes=...)`,
confined like any root, and nothing is ever written into the operator's roots.

Clean-up: each new spill prunes files older than an hour and keeps the newest
64; the directory is removed when the server closes; directories left by a server
that died are removed by the next one that starts.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import shutil
import stat
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass

from rootbound.roots import Root

__all__ = ["SPILL_ROOT_NAME", "SpillFile", "SpillInfo", "SpillRoot", "close_spill_root", "find_spill_root",
           "new_command_id", "open_spill_root"]

SPILL_ROOT_NAME = "command-output"
SPILL_TOOLS = ("list_folder", "read_file", "stat_file", "hash_file", "grep", "glob")
KEEP_FILES = 64
MAX_AGE_SECONDS = 3600
_PREFIX = "rootbound-output-"


class SpillRoot(Root):
    """The server's own spill directory (a distinct type, so an operator root is never mistaken for it)."""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _remove_stale(base: str) -> None:
    """Remove spill directories of servers that are no longer running (ours only: same owner)."""
    with contextlib.suppress(OSError), os.scandir(base) as it:
        for entry in it:
            if not entry.name.startswith(_PREFIX):
                continue
            pid_text = entry.name[len(_PREFIX):].split("-", 1)[0]
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if (pid_text.isdigit() and stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid()
                    and not _alive(int(pid_text))):
                shutil.rmtree(entry.path, ignore_errors=True)


def open_spill_root(taken: Mapping[str, Root] | None = None, base: str | None = None) -> SpillRoot:
    """Create the spill directory and open it as a root whose name no operator root uses."""
    base = base or tempfile.gettempdir()
    _remove_stale(base)
    path = tempfile.mkdtemp(prefix=f"{_PREFIX}{os.getpid()}-", dir=base)  # mode 0700
    name, n = SPILL_ROOT_NAME, 1
    while taken is not None and name in taken:
        n += 1
        name = f"{SPILL_ROOT_NAME}-{n}"
    root = SpillRoot.at(name, path, SPILL_TOOLS)
    assert isinstance(root, SpillRoot)
    return root


def close_spill_root(root: Root) -> None:
    shutil.rmtree(root.real_path, ignore_errors=True)
    root.close()


def find_spill_root(roots: Mapping[str, Root]) -> SpillRoot | None:
    return next((r for r in roots.values() if isinstance(r, SpillRoot)), None)


def _prune(root: SpillRoot) -> None:
    now = time.time()
    files: list[tuple[float, str]] = []
    with contextlib.suppress(OSError), os.scandir(root.fd) as it:
        for entry in it:
            with contextlib.suppress(OSError):
                files.append((entry.stat(follow_symlinks=False).st_mtime, entry.name))
    files.sort(reverse=True)
    for i, (mtime, name) in enumerate(files):
        if i >= KEEP_FILES or now - mtime > MAX_AGE_SECONDS:
            with contextlib.suppress(OSError):
                os.unlink(name, dir_fd=root.fd)


@dataclass
class SpillInfo:
    root: str
    path: str
    size: int
    complete: bool


class SpillFile:
    """One stream's full output, written as it arrives, up to `limit` bytes."""

    def __init__(self, root: SpillRoot, command_id: str, stream: str, limit: int) -> None:
        self.root = root
        self.name = f"{command_id}.{stream}"
        self.limit = limit
        self.size = 0
        self.complete = True
        _prune(root)
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        self.fd: int | None = os.open(self.name, flags, 0o600, dir_fd=root.fd)

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if self.fd is None:
            return
        room = self.limit - self.size
        if len(data) > room:
            data, self.complete = data[:room], False
        try:
            view = memoryview(data)
            while view:
                written = os.write(self.fd, view)
                view = view[written:]
                self.size += written
        except OSError as exc:
            # A full disk ends the spill, not the command.
            self.complete = False
            self.close()
            if exc.errno not in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
                raise
        if not self.complete:
            self.close()

    def close(self) -> None:
        if self.fd is not None:
            with contextlib.suppress(OSError):
                os.close(self.fd)
            self.fd = None

    def info(self) -> SpillInfo:
        return SpillInfo(self.root.name, self.name, self.size, self.complete)


def new_command_id() -> str:
    """Sortable and unguessable: `20261126T021103-3f9a1c2b`."""
    return time.strftime("%Y%m%dT%H%M%S", time.gmtime()) + "-" + secrets.token_hex(4)
