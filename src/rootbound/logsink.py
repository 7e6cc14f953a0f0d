"""The server's stderr as a log handler that never keeps a call waiting, whoever reads it, or not.

The tool-call line is written on every call's path, on the event loop. A client that starts the server with
its stderr on a pipe and never reads that pipe fills it (64 KiB: a few hundred lines), and a blocking write
then stopped every call for good. So each line is written without waiting (`rootbound.outlet`); what the pipe
cannot take yet waits in memory, in order, and a thread of its own (started only then) writes it as the
reader makes room. The backlog is bounded: past BACKLOG bytes, new lines are counted instead of kept until
the backlog has left, and one line then says how many were dropped there. A line is dropped whole, never cut
in two, except where a write fails after part of it went out (a full disk): the next line starts a new line.

A failed write (a full disk, an I/O error) drops what is kept and goes on with the next line; only a reader
that is gone for good (EPIPE, a closed descriptor) ends the writing. At exit (`flush`, which `logging.shutdown`
calls) the backlog gets FINAL_WAIT to leave; a reader that never reads does not hold the server's exit longer.

A line logged while this handler is itself writing, on the same thread (a finalizer or a signal handler that
logs, run between two steps of a write), is only queued: the write in progress finishes first.
"""

from __future__ import annotations

import errno
import json
import logging
import sys
import threading
import time
import traceback
from collections import deque
from types import TracebackType
from typing import Final

from rootbound.outlet import Outlet

__all__ = ["BACKLOG", "FINAL_WAIT", "StderrSink", "log_uncaught"]

BACKLOG: Final = 1 << 20  # bytes of log lines kept while the reader is not reading
FINAL_WAIT: Final = 1.0  # seconds the backlog may take to leave at exit
_IOV: Final = 64  # lines per write when the backlog leaves (well under IOV_MAX)
_GONE: Final = frozenset({errno.EPIPE, errno.EBADF, errno.ECONNRESET, errno.ENOTCONN, errno.EINVAL})
_NEWLINE: Final = memoryview(b"\n")


class StderrSink(logging.Handler):
    """Log lines to a descriptor (the server's stderr), each written at once or kept for a thread to write."""

    def __init__(self, fd: int) -> None:
        super().__init__()
        assert self.lock is not None  # (Handler.__init__ made it; `handle` holds it around `emit`)
        self._guard = self.lock
        self._out = Outlet(fd)
        self._backlog: deque[memoryview] = deque()  # whole lines; the first may be the rest of one partly written
        self._kept = 0  # bytes in the backlog
        self._partial = False  # the first line in the backlog was partly written
        self._cut = False  # a line was cut short by a failed write: the next write starts a new line
        self._dropped = 0  # lines not written since the last count was
        self._failing = False  # the last write failed: no new try until a new line comes
        self._gone = False  # the reader is gone for good: nothing is written any more
        self._busy = False  # a write is in progress on the thread holding the lock
        self._closed = False
        self._writer: threading.Thread | None = None

    def handle(self, record: logging.LogRecord) -> bool:
        if self._closed or sys.is_finalizing():  # see `write_line`
            return False
        return super().handle(record)

    def emit(self, record: logging.LogRecord) -> None:
        try:
            text = self.format(record)
        except Exception:  # (as logging's own handlers: a record that cannot be formatted is reported, not raised)
            self.handleError(record)
            return
        self.write_line(text)

    def handleError(self, record: logging.LogRecord) -> None:
        """A record that could not be formatted: one line that says so, through the sink (logging's own report
        is a traceback written to stderr with a blocking write)."""
        error = sys.exc_info()[1]
        self.write_line(json.dumps({"time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "level": "ERROR",
                                    "logger": "rootbound", "msg": "a log record could not be formatted",
                                    "error": repr(error)[:200], "record": repr(record.msg)[:200]}))

    def write_line(self, text: str) -> None:
        """Write one line (without its newline), or keep it for later: never waits for the reader, never raises."""
        if self._closed or sys.is_finalizing():
            # After close, and while the interpreter shuts down, the lock is not taken: a daemon writer thread that
            # took it just then is frozen with it for good, and this line would wait for ever.
            return
        data = memoryview((text + "\n").encode("utf-8", "backslashreplace"))
        with self._guard:
            if self._gone:
                return
            if self._busy:  # logged from within a write of this thread's: queued, written by that write's end
                self._keep(data)
                return
            self._busy, self._failing = True, False
            try:
                if self._dropped and not self._backlog:
                    self._drain()  # the count of the lines dropped goes where they were dropped: first
                self._keep(data)
                self._drain()
                if self._backlog and self._writer is None:
                    self._start_writer()
            except Exception as exc:  # (a log line must never fail the call that logs it)
                self._failed(OSError(errno.EIO, str(exc)))
            finally:
                self._busy = False

    def flush(self) -> None:
        """Let the backlog leave, waiting at most FINAL_WAIT for the reader (called at exit)."""
        deadline = time.monotonic() + FINAL_WAIT
        self._failing = False  # (one more try for what a failed write left: the count of dropped lines)
        while True:
            with self._guard:
                if self._busy or self._closed:
                    return
                self._busy = True
                try:
                    self._drain()
                    if not self._pending():
                        return
                finally:
                    self._busy = False
            left = deadline - time.monotonic()
            if left <= 0 or not self._out.has_room(int(left * 1000) + 1):
                return

    def close(self) -> None:
        with self._guard:
            self._closed = True  # (later lines are dropped: see `write_line`)
            self._out.close()
        super().close()

    @property
    def backlog_bytes(self) -> int:
        """Bytes of lines waiting for the reader (a test watches it)."""
        return self._kept

    @property
    def writer(self) -> threading.Thread | None:
        """The thread writing the backlog, while there is one (a test joins it)."""
        return self._writer

    # -- under the lock, with _busy set ----------------------------------------------------------------

    def _pending(self) -> bool:
        return not self._gone and (bool(self._backlog) or (self._dropped > 0 and not self._failing))

    def _keep(self, data: memoryview) -> None:
        if self._dropped or self._kept + len(data) > BACKLOG:  # (once one is dropped, all are until the count is
            self._dropped += 1                                  # written: it marks the gap where it was)
        else:
            self._backlog.append(data)
            self._kept += len(data)

    def _drain(self) -> None:
        """Write what the descriptor takes now, in order: a new line after a cut, the backlog, and once it has all
        left, the count of the lines dropped after it."""
        while not self._gone and not self._failing:
            views = [_NEWLINE] if self._cut else []
            reported = self._dropped
            notice = self._notice(reported) if reported and not self._backlog else None
            if notice is not None:
                views.append(notice)
            views.extend(self._backlog[i] for i in range(min(_IOV, len(self._backlog))))
            if not views:
                return
            try:
                written = self._out.write_now(views)
            except OSError as exc:
                self._failed(exc)
                return
            if not written:
                return
            if self._cut:
                self._cut, written = False, written - 1
            if notice is not None and written:
                self._dropped -= reported  # (a line counted meanwhile, by a finalizer's log call, stays counted)
                if written < len(notice):  # (its rest goes first next time)
                    self._backlog.appendleft(notice[written:])
                    self._kept += len(notice) - written
                    self._partial, written = True, 0
                else:
                    written -= len(notice)
            while written:
                first = self._backlog[0]
                if written >= len(first):
                    self._backlog.popleft()
                    self._kept -= len(first)
                    written -= len(first)
                    self._partial = False
                else:
                    self._backlog[0] = first[written:]
                    self._kept -= written
                    self._partial, written = True, 0

    def _failed(self, exc: OSError) -> None:
        """A write failed: what is kept is dropped (counted); a reader gone for good ends the writing."""
        self._dropped += len(self._backlog)
        self._cut = self._cut or self._partial
        self._backlog.clear()
        self._kept, self._partial = 0, False
        if exc.errno in _GONE:
            self._gone = True
        else:
            self._failing = True  # (tried again with the next line: no retry loop on a descriptor that fails)

    def _notice(self, dropped: int) -> memoryview:
        record = logging.makeLogRecord({"name": "rootbound", "levelno": logging.WARNING, "levelname": "WARNING",
                                        "msg": "log lines dropped: the server's stderr was not being read, or "
                                               "could not be written", "dropped": dropped})
        return memoryview((self.format(record) + "\n").encode("utf-8", "backslashreplace"))

    def _start_writer(self) -> None:
        self._writer = threading.Thread(target=self._write_later, name="rootbound-log", daemon=True)
        try:
            self._writer.start()
        except RuntimeError:  # no thread to be had (a limit): the next line's write takes the backlog along
            self._writer = None

    # -- the writer thread ------------------------------------------------------------------------------

    def _write_later(self) -> None:
        """Write the backlog as the reader makes room; end once nothing is left to write."""
        try:
            while not self._closed:
                self._out.has_room(None)
                with self._guard:
                    if not self._busy and not self._closed:
                        self._busy = True
                        try:
                            self._drain()
                        finally:
                            self._busy = False
                    if not self._pending():
                        return
        finally:
            self._writer = None


def log_uncaught(logger: logging.Logger) -> None:
    """Uncaught exceptions (the main thread's, other threads', and those Python can only report, in a finalizer)
    go to `logger` as one JSON line each, instead of the tracebacks Python writes to stderr with a blocking
    write (which a never-read pipe would hold for ever); warnings too."""

    def uncaught(kind: type[BaseException], value: BaseException, tb: TracebackType | None) -> None:
        logger.critical("uncaught exception", exc_info=(kind, value, tb))

    def in_thread(args: threading.ExceptHookArgs) -> None:
        if args.exc_type is SystemExit:
            return
        value = args.exc_value if args.exc_value is not None else args.exc_type()
        logger.error("uncaught exception in a thread", exc_info=(args.exc_type, value, args.exc_traceback),
                     extra={"thread": args.thread.name if args.thread else None})

    def unraisable(args: sys.UnraisableHookArgs) -> None:
        try:
            what = repr(args.object)[:200]
        except Exception:  # (an object whose repr fails too)
            what = f"<{type(args.object).__name__}>"
        lines = traceback.format_exception_only(args.exc_type, args.exc_value)
        logger.warning("exception ignored", extra={"where": args.err_msg or "", "object": what,
                                                   "error": "".join(lines).strip()[:400]})

    sys.excepthook = uncaught
    threading.excepthook = in_thread
    sys.unraisablehook = unraisable
    logging.captureWarnings(True)
