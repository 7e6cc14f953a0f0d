"""When a search stops: its own time limit ran out, or the call was cancelled.

The walk polls it before each directory, the scanner between files and 1 MiB blocks, so
a call that ends stops its worker thread (which is never abandoned) within a block.
"""

from __future__ import annotations

import time
from collections.abc import Callable

__all__ = ["Clock"]


def _not_cancelled() -> bool:
    return False


class Clock:
    """The stop condition of one search: `seconds` from now, or `cancelled()` says so."""

    def __init__(self, seconds: float, cancelled: Callable[[], bool] = _not_cancelled) -> None:
        self.deadline = time.monotonic() + seconds
        self.cancelled = cancelled
        self.fired = False

    def expired(self) -> bool:
        if time.monotonic() >= self.deadline or self.cancelled():
            self.fired = True
        return self.fired
