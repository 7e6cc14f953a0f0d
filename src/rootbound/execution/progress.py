"""Output lines forwarded as MCP progress notifications while a command runs, at most 10 a second.

The readers only append to a small buffer (they must never wait on the client);
one pump task sends what accumulated, then sleeps out the interval. `progress`
is the number of output lines so far, so it only grows, as the protocol asks.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Awaitable, Callable

import anyio

__all__ = ["ProgressFeed"]

INTERVAL = 0.1  # seconds between notifications: <= 10/s
_KEEP = 20  # lines per notification
_MAX_MESSAGE = 4000

Send = Callable[[float, float | None, str | None], Awaitable[None]]


class ProgressFeed:
    def __init__(self, send: Send) -> None:
        self.send = send
        self.lines: deque[str] = deque(maxlen=_KEEP)
        self.count = 0
        self.sent = 0
        self.ready = anyio.Event()

    def add(self, stream: str, count: int, recent: list[str]) -> None:
        self.count += count
        prefix = "" if stream == "stdout" else f"[{stream}] "
        self.lines.extend(prefix + line for line in recent)
        self.ready.set()

    async def pump(self) -> None:
        """Run until cancelled: wait for lines, send them, pause."""
        while True:
            await self.ready.wait()
            self.ready = anyio.Event()
            await self.flush()
            await anyio.sleep(INTERVAL)

    async def flush(self) -> None:
        if self.count == self.sent or not self.lines:
            return
        message = "\n".join(self.lines)[-_MAX_MESSAGE:]
        self.lines.clear()
        self.sent = self.count
        await self.send(float(self.count), None, message)
