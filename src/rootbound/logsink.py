"""The server's stderr as a log handler that never keeps a call waiting, whoever reads it, or not.

The tool-call line is written on every call's path, on the event loop. A client that starts the server with
its stderr on a pipe and never reads that pipe fills it (64 KiB: a few hundred lines), and a blocking write
then stopped every call for good. So each line is written without waiting (`rootbound.outlet`); what the pipe
cannot take yet waits in memory, in order, and a thread of its own (started only then) writes it as the
reader makes room. The backlog is bounded: past BACKLOG bytes, new lines are counted instead of kept, and once
the backlog has left, one line says how many were dropped. A line is never cut in two by a drop.

At exit (`flush`, which `logging.shutdown` calls) the backlog gets FINAL_WAIT to leave; a reader that never
reads does not hold the server's exit longer than that.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from typing import Final

from rootbound.outlet import Outlet

__all__ = ["BACKLOG", "FINAL_WAIT", "StderrSink"]

BACKLOG: Final = 1 << 20  # bytes of log lines kept while the reader is not reading
FINAL_WAIT: Final = 1.0  # seconds the backlog may take to leave at exit
_IOV: Final = 64  # lines per write when the backlog leaves (well under IOV_MAX)


class StderrSink(logging.Handler):
    """Log lines to a descriptor (the server's stderr), each written at once or kept for a thread to write."""

    def __init__(self, fd: int) -> None:
        super().__init__()
        assert self.lock is not None  # (Handler.__init__ made it; `handle` holds it around `emit`)
        self._guard = self.lock
        self._out = Outlet(fd)
        self._backlog: deque[memoryview] = deque()
        self._kept = 0  # bytes in the backlog
        self._dropped = 0  # lines not kept since the backlog last left
        self._broken = False  # the reader has gone (EPIPE): lines are no longer written
        self._writer: threading.Thread | None = None

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.write_line(self.format(record))
        except Exception:  # (as logging's own handlers: a line that cannot be formatted is reported, not raised)
            self.handleError(record)

    def write_line(self, text: str) -> None:
        """Write one line (without its newline), or keep it for later: never waits for the reader."""
        data = memoryview((text + "\n").encode("utf-8", "backslashreplace"))
        with self._guard:
            if self._broken:
                return
            if self._backlog or self._dropped:
                self._drain()  # what is kept goes first: the lines stay in order
            if not self._backlog and not self._dropped:
                written = self._write_now([data])
                if written == len(data):
                    return
                data = data[written:]
                if written:  # a part has left: the rest must follow, whatever the backlog holds
                    self._keep(data, whole=False)
                    return
            self._keep(data, whole=True)

    def flush(self) -> None:
        """Let the backlog leave, waiting at most FINAL_WAIT for the reader (called at exit)."""
        deadline = time.monotonic() + FINAL_WAIT
        while True:
            with self._guard:
                self._drain()
                if self._broken or not (self._backlog or self._dropped):
                    return
            left = deadline - time.monotonic()
            if left <= 0 or not self._out.has_room(int(left * 1000) + 1):
                return

    @property
    def backlog_bytes(self) -> int:
        """Bytes of lines waiting for the reader (a test watches it)."""
        return self._kept

    # -- under the lock ---------------------------------------------------------------------------

    def _write_now(self, views: list[memoryview]) -> int:
        try:
            return self._out.write_now(views)
        except OSError:  # EPIPE (the reader closed its end), EBADF: nobody will read these lines
            self._broken = True
            self._backlog.clear()
            self._kept = 0
            return 0

    def _keep(self, data: memoryview, whole: bool) -> None:
        if whole and self._kept + len(data) > BACKLOG:
            self._dropped += 1
        else:
            self._backlog.append(data)
            self._kept += len(data)
        if self._writer is None:
            self._writer = threading.Thread(target=self._write_later, name="rootbound-log", daemon=True)
            try:
                self._writer.start()
            except RuntimeError:  # no thread to be had (a limit): the next line's write takes the backlog along
                self._writer = None

    def _drain(self) -> None:
        """Write what the descriptor takes of the backlog now, then the count of dropped lines."""
        while self._backlog:
            views = [self._backlog[i] for i in range(min(_IOV, len(self._backlog)))]
            written = self._write_now(views)
            if not written:
                return
            self._kept -= written
            while written:
                if written >= len(self._backlog[0]):
                    written -= len(self._backlog.popleft())
                else:
                    self._backlog[0], written = self._backlog[0][written:], 0
        if self._dropped and not self._broken:
            record = logging.makeLogRecord({"name": "rootbound", "levelno": logging.WARNING, "levelname": "WARNING",
                                            "msg": "log lines dropped: the server's stderr was not being read",
                                            "dropped": self._dropped})
            self._dropped = 0
            self._keep(memoryview((self.format(record) + "\n").encode()), whole=False)
            self._drain()

    # -- the writer thread ------------------------------------------------------------------------

    def _write_later(self) -> None:
        """Write the backlog as the reader makes room; end once it has all left."""
        while True:
            self._out.has_room(None)
            with self._guard:
                self._drain()
                if self._broken or not (self._backlog or self._dropped):
                    self._writer = None
                    return

