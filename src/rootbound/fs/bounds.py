"""Every file tool call's time bound and cancellation, checked by long loops between chunks.

`call_tool` gives each call a `CallBound` (its deadline: `file_timeout` seconds from
the call's start) and runs the handler in a worker thread with that bound current.
Loops that can run long — hashing, skipping lines, copying, walking a tree, listing
a folder — call `checkpoint()` between chunks: it raises a `Failure` (TIMEOUT, CANCELLED) once the
deadline has passed or the client has cancelled the call (`notifications/cancelled`,
or a dropped request), so the thread stops within one chunk and frees its worker.

The bound travels in a context variable, because the loops sit several calls below
the handler (`copy` → `copy_tree` → `copy_fd`) and have no other business with it;
`anyio.to_thread.run_sync` copies the caller's context into the worker thread.
Outside a call (the grep helper process, the sandbox) `checkpoint()` does nothing.
"""

from __future__ import annotations

import contextlib
import contextvars
import time
from collections.abc import Iterator

import anyio.from_thread

from rootbound.errors import Failure, Kind

__all__ = ["CANCEL_POLL", "CallBound", "bounded", "checkpoint", "current"]

CANCEL_POLL = 0.01  # seconds between two looks at the client's cancellation


def _host_cancelled() -> bool:
    """True when the task waiting for this worker thread has been cancelled."""
    try:
        anyio.from_thread.check_cancelled()
    except RuntimeError:  # not in an anyio worker thread: nobody to cancel us
        return False
    except BaseException:  # the event loop's cancellation exception
        return True
    return False


class CallBound:
    """One call's deadline (None: no deadline of its own) and its client's cancellation."""

    def __init__(self, tool: str, where: str | None, seconds: float | None) -> None:
        self.tool = tool
        self.where = where
        self.seconds = seconds
        self.deadline = None if seconds is None else time.monotonic() + seconds
        self._next_poll = 0.0
        self._cancelled = False

    def remaining(self) -> float:
        return float("inf") if self.deadline is None else max(0.0, self.deadline - time.monotonic())

    def expired(self) -> bool:
        return self.deadline is not None and time.monotonic() >= self.deadline

    def cancelled(self) -> bool:
        """Whether the client cancelled the call. Asking the event loop costs microseconds, so it is asked
        at most every CANCEL_POLL seconds: cheap enough to call for every entry of a walk."""
        now = time.monotonic()
        if not self._cancelled and now >= self._next_poll:
            self._next_poll = now + CANCEL_POLL
            self._cancelled = _host_cancelled()
        return self._cancelled

    def stopped(self, kind: Kind) -> Failure:
        """A call stopped by its deadline (TIMEOUT), a wait for a worker (BUSY) or the client (CANCELLED)."""
        return Failure(kind, tool=self.tool, where=self.where, seconds=self.seconds)

    def check(self) -> None:
        """Raise if the call must stop now."""
        if self.expired():
            raise self.stopped(Kind.TIMEOUT)
        if self.cancelled():
            raise self.stopped(Kind.CANCELLED)


_current: contextvars.ContextVar[CallBound | None] = contextvars.ContextVar("rootbound_call_bound", default=None)


def current() -> CallBound | None:
    return _current.get()


def checkpoint() -> None:
    """Stop the current call if its time is up or its client cancelled it; a no-op outside a call."""
    bound = _current.get()
    if bound is not None:
        bound.check()


@contextlib.contextmanager
def bounded(bound: CallBound) -> Iterator[None]:
    token = _current.set(bound)
    try:
        yield
    finally:
        _current.reset(token)
