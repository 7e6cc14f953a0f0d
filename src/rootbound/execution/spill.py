"""Spill files: the full output of a command whose result had to be cut, kept where the agent can page through it.

They live in a private directory the server creates for itself (mode 0700 under
the system temp directory, named `rootbound-output-<pid namespace>-<pid>-*`), with one
subdirectory per client (`SpillArea`): a stdio connection, an HTTP session, or —
for sessionless 2026-07-28 requests — an auth principal. Each client is served its
own subdirectory as the extra root `command-output`, which allows only the
read-only file tools; so the agent reads a spill with
`read_file(root="command-output", path=..., offset_bytes=...)`, confined like any
root, sees no other client's output (it is not beneath its root), and nothing is
ever written into the operator's roots. Until a client's first spill its
`command-output` is an empty shared directory.

Clean-up: each new spill prunes its client's files older than an hour and keeps
the newest 64; a connection's subdirectory is removed when the connection ends;
the whole directory is removed when the server closes; directories left by a
server that died are removed by the next one that starts.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import tempfile
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass

from rootbound import leftovers
from rootbound.catalogue import SPILL_TOOLS
from rootbound.fs import Root
from rootbound.fs.removal import remove_tree

__all__ = ["SPILL_ROOT_NAME", "SpillArea", "SpillFile", "SpillInfo", "SpillRoot", "SpillStore", "new_command_id"]

SPILL_ROOT_NAME = "command-output"
KEEP_FILES = 64
MAX_AGE_SECONDS = 3600
_PREFIX = "rootbound-output-"
_EMPTY = "empty"
_AREA_PREFIX = "client-"


class SpillRoot(Root):
    """The server's own spill directory (a distinct type, so an operator root is never mistaken for it)."""


class SpillStore:
    """The server's spill directory: hands out one private area per client."""

    def __init__(self, taken: Mapping[str, Root] | None = None, base: str | None = None) -> None:
        base = base or tempfile.gettempdir()
        leftovers.sweep(base, _PREFIX)  # what servers killed outright left
        path = tempfile.mkdtemp(prefix=leftovers.name(_PREFIX), dir=base)  # mode 0700
        # A root name no operator root uses.
        name, n = SPILL_ROOT_NAME, 1
        while taken is not None and name in taken:
            n += 1
            name = f"{SPILL_ROOT_NAME}-{n}"
        self.name = name
        self.path = path
        self.fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        os.mkdir(_EMPTY, 0o500, dir_fd=self.fd)
        # What a client that has not spilled anything yet is shown: nothing.
        self.empty = self._root(_EMPTY)

    def _root(self, sub: str) -> SpillRoot:
        fd = os.open(sub, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=self.fd)
        return SpillRoot(self.name, os.path.join(self.path, sub), frozenset(SPILL_TOOLS), fd)

    def area(self) -> SpillArea:
        return SpillArea(self)

    def close(self) -> None:
        self.empty.close()
        with contextlib.suppress(OSError):
            os.close(self.fd)
        with contextlib.suppress(OSError):
            remove_tree(None, self.path)


class SpillArea:
    """One client's spill files: a subdirectory of the store, made at its first spill.

    Its name is random and never shown; it would not help anyway: a client's
    `command-output` root is opened at its own subdirectory, so no path leads
    from it to another's.
    """

    def __init__(self, store: SpillStore) -> None:
        self.store = store
        self._own: SpillRoot | None = None
        self._lock = threading.Lock()
        self._closed = False

    @property
    def root(self) -> SpillRoot:
        """The `command-output` root this client sees now."""
        return self._own or self.store.empty

    def writable_root(self) -> SpillRoot:
        """This client's own subdirectory, created on first use."""
        with self._lock:
            if self._closed:
                raise OSError(errno.ESHUTDOWN, "the connection has ended")
            if self._own is None:
                sub = f"{_AREA_PREFIX}{secrets.token_hex(8)}"
                os.mkdir(sub, 0o700, dir_fd=self.store.fd)
                self._own = self.store._root(sub)
            return self._own

    def close(self) -> None:
        """Remove this client's spill files (its connection ended)."""
        with self._lock:
            self._closed = True
            own, self._own = self._own, None
        if own is not None:
            own.close()
            with contextlib.suppress(OSError):
                remove_tree(self.store.fd, os.path.basename(own.real_path))


def _prune(root: SpillRoot) -> None:
    now = time.time()
    files: list[tuple[float, str]] = []
    with contextlib.suppress(OSError), os.scandir(root.handle()) as it:
        for entry in it:
            with contextlib.suppress(OSError):
                files.append((entry.stat(follow_symlinks=False).st_mtime, entry.name))
    files.sort(reverse=True)
    for i, (mtime, name) in enumerate(files):
        if i >= KEEP_FILES or now - mtime > MAX_AGE_SECONDS:
            with contextlib.suppress(OSError):
                os.unlink(name, dir_fd=root.handle())


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
        self.fd: int | None = os.open(self.name, flags, 0o600, dir_fd=root.handle())

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

    def discard(self) -> None:
        """Remove the file: the result showed the whole output, so nothing points at it."""
        self.close()
        with contextlib.suppress(OSError):
            os.unlink(self.name, dir_fd=self.root.handle())

    def info(self) -> SpillInfo:
        return SpillInfo(self.root.name, self.name, self.size, self.complete)


def new_command_id() -> str:
    """Sortable and unguessable: `20261126T021103-3f9a1c2b`."""
    return time.strftime("%Y%m%dT%H%M%S", time.gmtime()) + "-" + secrets.token_hex(4)
