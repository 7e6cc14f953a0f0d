"""The per-root lock that makes the server's changes and an undo of the same root take turns, across processes.

`fs.atomic.target_lock` serialises one server's writes of one file, in-process only. The journal adds
an advisory `flock` on `<root's journal>/lock`, taken through a new open file description each time
(flock belongs to the open file description, so two threads of one process exclude each other only
that way):

* every journaled change holds it **shared** from `Journal.begin` until it is committed or abandoned,
  so changes run side by side as before;
* an undo holds it **exclusive** for all the roots it touches while it compares and restores, so no
  change of the server is half done under it and none starts until it is over.

A change may reach a second root after its first (a move between roots), so shared locks are taken
in whatever order changes declare them; the exclusive side therefore never waits while holding one:
it tries every lock without blocking, and on a miss releases what it got and tries again shortly.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Iterator, Sequence

__all__ = ["Busy", "exclusive", "shared"]

_RETRY = 0.02


class Busy(Exception):
    """A root stayed busy with changes for longer than the caller would wait."""


def _open(path: str) -> int:
    return os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)


def shared(path: str) -> int:
    """Take the lock shared (waiting for an undo to finish); returns the descriptor: close it to release."""
    fd = _open(path)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)
    except BaseException:
        os.close(fd)
        raise
    return fd


@contextlib.contextmanager
def exclusive(paths: Sequence[str], timeout: float = 30.0) -> Iterator[None]:
    """Hold every lock in `paths` exclusively for the block (all or none at any moment: never deadlocks)."""
    deadline = time.monotonic() + timeout
    wanted = sorted(set(paths))
    while True:
        held: list[int] = []
        try:
            for path in wanted:
                fd = _open(path)
                held.append(fd)
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            for fd in held:
                os.close(fd)
            if time.monotonic() > deadline:
                raise Busy(f"the root stayed busy with changes for {timeout:.0f} s") from None
            time.sleep(_RETRY)
            continue
        except BaseException:
            for fd in held:
                os.close(fd)
            raise
        try:
            yield
        finally:
            for fd in held:
                os.close(fd)
        return
