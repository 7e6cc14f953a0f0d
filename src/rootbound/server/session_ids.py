"""No session id on a refused HTTP request.

The SDK mints a session, with its `mcp-session-id`, for every request that arrives without one, before
it knows whether the request is a valid `initialize` (`StreamableHTTPSessionManager._admit_session`). If
it is not, the session is discarded at once, yet the error response still names it: each bad request got
a fresh id for a session that does not exist. This middleware drops the header from such responses.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["NoSessionIdOnError"]

_HEADER = b"mcp-session-id"


class NoSessionIdOnError:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or any(name.lower() == _HEADER for name, _ in scope["headers"]):
            await self.app(scope, receive, send)  # a request of an existing session: its id is no news
            return

        async def send_without_id(message: Message) -> None:
            if message["type"] == "http.response.start" and message["status"] >= 400:
                message = {**message, "headers": [(k, v) for k, v in message.get("headers", [])
                                                  if k.lower() != _HEADER]}
            await send(message)

        await self.app(scope, receive, send_without_id)
