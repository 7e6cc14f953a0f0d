"""Asking a client for its roots (`roots/list`) without ever making a tool call wait on the answer.

A handshake-era client that declares `roots` is asked right after `notifications/initialized` and
again on `notifications/roots/list_changed`. Over HTTP the first request can be lost (it rides a
stream the client may not have opened yet), and some clients declare the capability but never
answer. So:

* every request is sent from one background task per connection, and its answer is applied whenever
  it arrives, however late (within ROOTS_TIMEOUT);
* the first tool call that finds no answer yet asks once more on its own response stream (which cannot
  be lost) and waits at most CALL_WAIT for an answer, then runs with the operator's roots; calls that
  start later wait only for what is left of that CALL_WAIT, so a silent client costs CALL_WAIT once;
* a call-time request that fails or times out is final until the client says its roots changed.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import anyio
from mcp.shared.message import ServerMessageMetadata
from mcp.types import ListRootsRequest, ListRootsResult

from rootbound.logs import log
from rootbound.server.client_roots import ClientRootsState

__all__ = ["CALL_WAIT", "ROOTS_TIMEOUT", "RootsAsker"]

CALL_WAIT = 0.3  # seconds a tool call may wait for the client's roots; then the operator's roots serve
ROOTS_TIMEOUT = 30.0  # seconds a roots/list request stays open in the background for a late answer

Apply = Callable[[list[tuple[str, str | None]]], None]


@dataclass(frozen=True)
class _Ask:
    session: Any  # the SDK's per-message session proxy: a call's routes the request onto its own stream
    related_request_id: Any  # None: the connection's standalone stream


class RootsAsker:
    """One connection's roots requests: sent from `run()` (a background task), answers applied by `apply`."""

    def __init__(self, state: ClientRootsState, apply: Apply) -> None:
        self.state = state
        self._apply = apply
        self._send, self._receive = anyio.create_memory_object_stream[_Ask](16)
        self._settled = anyio.Event()  # set when an answer (or a final failure) is recorded; new per generation
        self._wait_until: float | None = None  # set by the first call that asks on its own stream
        self.running = False

    async def run(self) -> None:
        """Send every queued request, each in its own task; returns only when the connection ends."""
        self.running = True
        async with self._receive, anyio.create_task_group() as tg:
            async for ask in self._receive:
                tg.start_soon(self._ask, ask)

    def ask(self, session: Any, related_request_id: Any = None) -> None:
        with contextlib.suppress(anyio.WouldBlock):  # requests are already queued; any of their answers will do
            self._send.send_nowait(_Ask(session, related_request_id))

    def changed(self, session: Any) -> None:
        """The client's roots changed: forget that we have an answer and ask again."""
        self.state.answered = False
        self._wait_until = None
        self._settled = anyio.Event()
        self.ask(session)

    async def before_call(self, session: Any, request_id: Any) -> None:
        """Give the client at most CALL_WAIT to have answered; ask on this call's stream if not done yet."""
        if self.state.answered:
            return
        if self._wait_until is None:
            self._wait_until = anyio.current_time() + CALL_WAIT
            self.ask(session, request_id)
        # One wait in all, shared by the calls that start meanwhile: a client that does not answer within
        # CALL_WAIT costs each later call nothing until its roots change.
        with anyio.move_on_after(max(0.0, self._wait_until - anyio.current_time())):
            await self._settled.wait()

    async def _ask(self, ask: _Ask) -> None:
        generation = self._settled
        metadata = ServerMessageMetadata(related_request_id=ask.related_request_id) \
            if ask.related_request_id is not None else None
        try:
            answer = await ask.session.send_request(ListRootsRequest(), ListRootsResult,
                                                    request_read_timeout_seconds=ROOTS_TIMEOUT, metadata=metadata)
        except Exception as exc:  # timeout, an error answer, no back-channel: roots stay the operator's
            log.info("client roots unavailable; serving the operator's roots",
                     extra={"error": f"{type(exc).__name__}: {exc}"[:300]})
            # Only a call-time request is final: one sent after `initialized` may just have been lost.
            if ask.related_request_id is not None and generation is self._settled and not self.state.answered:
                self.state.answered = True
                generation.set()
            return
        if generation is not self._settled:
            return  # an answer from before the client's roots changed: a newer request is on its way
        self._apply([(str(r.uri), r.name) for r in answer.roots])
        generation.set()
