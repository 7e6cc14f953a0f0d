"""Writes that never wait, to a descriptor whose reader may not be reading: the client's stdout (the replies) and
the server's stderr (the log).

A blocking write to a full pipe waits for the reader; on the event loop, that stops every call. The descriptors'
file status flags are never changed (stdout or stderr may be a terminal shared with the user's shell, which must
not be left non-blocking), so each write is made non-blocking on its own: with RWF_NOWAIT (Linux 4.14+; pipes take
it); a terminal, which refuses that, through a second open of it that is non-blocking (a file description of
its own); where neither works (an older kernel), at most PIPE_BUF bytes once poll reports room. Anything else (a
regular file, /dev/null) never keeps a writer waiting for a reader, and is written plainly.
"""

from __future__ import annotations

import errno
import os
import select
import stat
from typing import Final, Literal

__all__ = ["CHUNK", "Outlet"]

CHUNK: Final = select.PIPE_BUF  # 4096 on Linux: one page, which a pipe that polls writable always has room for

_WRITABLE: Final = select.POLLOUT | select.POLLERR | select.POLLHUP  # room, or an end the next write reports

Mode = Literal["nowait", "own", "chunks", "plain"]


class Outlet:
    """One descriptor, written without waiting: `write_now` takes what it can at once and says how much."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self._own: int | None = None  # a terminal's own non-blocking open file description
        kind = os.fstat(fd).st_mode
        # "nowait": RWF_NOWAIT (pipes, sockets); "own": a terminal (which refuses RWF_NOWAIT, and whose reader can
        # stop, with Ctrl-S) opened again non-blocking: its own file description, so the user's shell's stays as
        # it is; "chunks": PIPE_BUF after readiness, where that open fails; "plain": a file or device that never
        # waits on a reader
        self.mode: Mode = "plain"
        if stat.S_ISFIFO(kind) or stat.S_ISSOCK(kind):
            self.mode = "nowait"
        elif os.isatty(fd):
            try:
                self._own = os.open(f"/proc/self/fd/{fd}",
                                    os.O_WRONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
                self.mode = "own"
            except OSError:
                self.mode = "chunks"
        self._poll = select.poll()  # (for `write_now`'s look, by the one writer at a time)
        self._poll.register(fd, select.POLLOUT)

    def close(self) -> None:
        """Close what this outlet opened itself (not `fd`)."""
        if self._own is not None:
            os.close(self._own)
            self._own = None

    def write_now(self, views: list[memoryview]) -> int:
        """Write what the descriptor takes of `views`, in order, without waiting; 0 if it has no room."""
        if self.mode == "nowait":  # one call for all the parts while the reader keeps up
            try:
                return os.pwritev(self.fd, views, -1, os.RWF_NOWAIT)
            except BlockingIOError:
                return 0
            except OSError as exc:
                if exc.errno not in (errno.EOPNOTSUPP, errno.EINVAL, errno.ESPIPE):
                    raise
                self.mode = "chunks"  # a terminal, or an older kernel
        if self.mode == "plain":
            return os.writev(self.fd, views)
        if self.mode == "own" and self._own is not None:
            try:
                return os.writev(self._own, views)
            except BlockingIOError:
                return 0
        if not any(event & _WRITABLE for _, event in self._poll.poll(0)):
            return 0
        try:  # (with room, or failed: a reader that left makes the write fail at once, EPIPE or EIO)
            return os.write(self.fd, views[0][:CHUNK])
        except BlockingIOError:  # someone else made the descriptor non-blocking, and filled it first
            return 0

    def has_room(self, timeout_ms: int | None) -> bool:
        """Whether the descriptor can take a write (or has failed: the write will say how), waiting at most
        `timeout_ms` (None: until it can)."""
        poll = select.poll()  # (one per wait: a poll object cannot wait in two threads at once)
        poll.register(self.fd, select.POLLOUT)
        return any(event & _WRITABLE for _, event in poll.poll(timeout_ms))
