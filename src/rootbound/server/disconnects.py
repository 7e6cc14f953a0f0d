"""A request whose HTTP client goes away is cancelled, so its command stops and frees its slot.

In the handshake era the SDK runs a request's handler in the session's own task, apart from the
POST that carried it: when that POST's connection drops (stream closed, socket reset), the
response stream ends but the handler runs on, until its command's own timeout. `CancelOnDisconnect`
wraps the ASGI app: once a POST's body is read it listens for `http.disconnect`, and if the client
leaves before the response is complete it cancels every handler registered for that POST through
`cancelled_on_disconnect` (the handler finds its POST through the request the SDK hands it);
`cancel_on_disconnect` is the MCP server middleware that registers each request's handler.
It works the same for 2026-07-28 requests and in JSON-response and SSE modes alike.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import anyio
from mcp.server import ServerRequestContext
from mcp.server.context import CallNext, HandlerResult
from mcp.shared.exceptions import MCPError
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from rootbound.logs import log

__all__ = ["CancelOnDisconnect", "cancel_on_disconnect", "cancelled_on_disconnect"]

_SCOPE_KEY = "rootbound.disconnect"
REQUEST_CANCELLED = -32800  # as the SDK answers a cancelled handshake-era request


class _Watch:
    """One POST: whether its client left early, and the handlers to cancel when it does."""

    def __init__(self) -> None:
        self.gone = False
        self.scopes: set[anyio.CancelScope] = set()

    def client_left(self) -> None:
        self.gone = True
        for scope in self.scopes:
            scope.cancel()


class CancelOnDisconnect:
    """ASGI middleware: watch each POST's connection and cancel its handlers if the client leaves."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("method") != "POST":
            await self.app(scope, receive, send)
            return
        watch = _Watch()
        scope[_SCOPE_KEY] = watch
        body_read = complete = False
        disconnected = anyio.Event()

        async def listen() -> None:
            # The only reader of the server's `receive` once the body is in; the app's own
            # readers (sse-starlette's and the SDK's disconnect watchers) wait on `disconnected`.
            while (await receive())["type"] != "http.disconnect":
                pass
            disconnected.set()
            if not complete:
                log.info("client disconnected; cancelling its request", extra={"path": scope.get("path")})
                watch.client_left()

        async with anyio.create_task_group() as tg:

            async def app_receive() -> Message:
                nonlocal body_read
                if body_read:
                    await disconnected.wait()
                    return {"type": "http.disconnect"}
                message = await receive()
                if message["type"] == "http.disconnect":
                    disconnected.set()
                    watch.client_left()
                elif not message.get("more_body", False):
                    body_read = True
                    tg.start_soon(listen)
                return message

            async def app_send(message: Message) -> None:
                nonlocal complete
                if message["type"] == "http.response.body" and not message.get("more_body", False):
                    complete = True  # before sending: the server reports a finished response as a disconnect
                await send(message)

            await self.app(scope, app_receive, app_send)
            tg.cancel_scope.cancel()


@contextmanager
def cancelled_on_disconnect(request: Any) -> Iterator[anyio.CancelScope]:
    """A cancel scope that is cancelled if the HTTP client behind `request` leaves (a no-op scope on stdio)."""
    scope_data = getattr(request, "scope", None)
    watch = scope_data.get(_SCOPE_KEY) if isinstance(scope_data, dict) else None
    with anyio.CancelScope() as scope:
        if not isinstance(watch, _Watch):
            yield scope
            return
        if watch.gone:
            scope.cancel()
        watch.scopes.add(scope)
        try:
            yield scope
        finally:
            watch.scopes.discard(scope)


async def cancel_on_disconnect(ctx: ServerRequestContext[Any], call_next: CallNext) -> HandlerResult:
    """MCP server middleware: a request whose HTTP client has gone is cancelled, so that its command stops
    and frees its slot."""
    if ctx.request_id is None or ctx.request is None:
        return await call_next(ctx)
    with cancelled_on_disconnect(ctx.request):
        return await call_next(ctx)
    raise MCPError(code=REQUEST_CANCELLED, message="request cancelled: the client disconnected")
