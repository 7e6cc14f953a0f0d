"""Streamable HTTP: the Starlette app around an App's MCP server, and uvicorn serving it.

What the app adds to the SDK's: Host and Origin allowlists always explicit (`hosts.py`: the
SDK turns its checks off by itself for a 0.0.0.0 bind) and compared lower-case; the
operator's bearer tokens, compared in constant time, each known by its name (which the App
logs and limits to the token's roots; the SDK binds a session to the token that opened it);
`GET /health`; the journal's page `GET /changes` behind the same checks (`changes.py`); no session id on a
refused request (`session_ids.py`); and a request whose
client disconnects is cancelled (`disconnects.py`). The socket is bound before the server
says it listens (`listening.py`).
"""

from __future__ import annotations

import contextlib
import hmac
import ipaddress
import math
import signal
import threading
from collections.abc import Iterator
from types import FrameType
from typing import Any

import uvicorn
from mcp.server.auth.provider import AccessToken, TokenVerifier
from mcp.server.auth.settings import AuthSettings
from mcp.server.transport_security import TransportSecuritySettings
from pydantic import AnyHttpUrl
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from rootbound.config import TokenConfig
from rootbound.hosts import host_patterns, origin_patterns, url_host
from rootbound.logs import log
from rootbound.server import changes
from rootbound.server.app import App
from rootbound.server.disconnects import CancelOnDisconnect, cancel_on_disconnect
from rootbound.server.listening import listen
from rootbound.server.session_ids import NoSessionIdOnError
from rootbound.server.signals import STOP_SIGNALS
from rootbound.tokens import reach_warnings

__all__ = ["LowercaseHost", "http_app", "serve_http"]


class _StaticTokens(TokenVerifier):
    """The operator's bearer tokens, each compared in constant time. A match is known by the token's name
    (`client_id`): the SDK binds each session to it (a session id shown with another token gets 404), and
    the App logs it and gives the calls that token's roots. The token itself is kept nowhere else."""

    def __init__(self, tokens: list[TokenConfig]) -> None:
        self._tokens = [(t.token.encode(), t.name) for t in tokens]

    async def verify_token(self, token: str) -> AccessToken | None:
        given = token.encode()
        found = None
        for secret, name in self._tokens:  # every one compared: the time taken does not tell which matched
            if hmac.compare_digest(given, secret):
                found = name
        return AccessToken(token="<redacted>", client_id=found, scopes=[]) if found is not None else None


class LowercaseHost:
    """ASGI middleware: the Host header lower-cased before the SDK's exact-string Host check sees it."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            headers = [(k, v.lower()) if k == b"host" else (k, v) for k, v in scope["headers"]]
            scope = {**scope, "headers": headers}
        await self.app(scope, receive, send)


def http_app(app: App, *, json_response: bool = False) -> ASGIApp:
    """The ASGI app serving `app` at /mcp (and /health)."""
    cfg = app.config
    # Always explicit: the SDK turns Host/Origin checks off by itself for a 0.0.0.0 bind.
    hosts = ["127.0.0.1", "localhost", "[::1]", *cfg.allowed_hosts]
    origins = ["http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*", *cfg.allowed_origins]
    if not _is_wildcard(cfg.host) and not _is_loopback(cfg.host):
        hosts.append(url_host(cfg.host))
        origins.append(f"http://{url_host(cfg.host)}:*")
    # Each entry matches with and without a port (hosts.py): behind a TLS proxy, `Host: name`.
    security = TransportSecuritySettings(enable_dns_rebinding_protection=True, allowed_hosts=host_patterns(hosts),
                                         allowed_origins=origin_patterns(origins))
    auth: dict[str, Any] = {}
    if cfg.tokens:
        auth = {"token_verifier": _StaticTokens(cfg.tokens),
                "auth": AuthSettings(issuer_url=AnyHttpUrl("http://127.0.0.1"), resource_server_url=None)}
    if cancel_on_disconnect not in app.server.middleware:
        app.server.middleware.insert(0, cancel_on_disconnect)  # outermost: it wraps the whole request
    asgi = app.server.streamable_http_app(
        transport_security=security, host=cfg.host, max_request_body_size=cfg.max_request_body_size,
        json_response=json_response,
        custom_starlette_routes=[Route("/health", _health, methods=["GET"]), *changes.routes(app, security)],
        **auth,
    )
    asgi.add_middleware(NoSessionIdOnError)  # a refused request names no (discarded) session
    asgi.add_middleware(LowercaseHost)
    return CancelOnDisconnect(asgi)


async def serve_http(app: App) -> int | None:
    """Serve HTTP until a stop signal (returned) has let the calls in flight finish or run out of grace."""
    cfg = app.config
    for warning in reach_warnings(cfg):
        log.warning(warning)
    if not _is_loopback(cfg.host) and not cfg.tokens:
        log.warning("HTTP bound to a non-loopback address WITHOUT an auth token: anyone who can reach "
                    "this port can use every tool. Set auth_token (or ROOTBOUND_AUTH_TOKEN).",
                    extra={"host": cfg.host})
    server = _Uvicorn(uvicorn.Config(
        http_app(app), host=cfg.host, port=cfg.port, log_config=None, log_level="warning",
        lifespan="on", timeout_graceful_shutdown=math.ceil(cfg.shutdown_grace)))
    sock = listen(cfg.host, cfg.port)  # before saying so: a port in use is a ListenError, not a later traceback
    log.info("listening", extra={"address": f"http://{url_host(cfg.host)}:{sock.getsockname()[1]}/mcp",
                                 "auth": _auth(cfg.tokens)})
    await server.serve(sockets=[sock])
    return server.stopped_by


class _Uvicorn(uvicorn.Server):
    """uvicorn, except that a stop signal is not raised again once it has shut down.

    uvicorn re-raises the signal it caught so that the process dies by it; then `App.close()` never
    ran, and running commands' groups and the spill directory outlived the server. Here the signal is
    only recorded, and `run()` cleans up and exits with a status that tells what stopped it.
    """

    stopped_by: int | None = None

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        if threading.current_thread() is not threading.main_thread():
            yield
            return

        def on_signal(sig: int, frame: FrameType | None) -> None:
            self.stopped_by = self.stopped_by or sig
            self.handle_exit(sig, frame)  # graceful; a second SIGINT forces

        previous = {sig: signal.signal(sig, on_signal) for sig in STOP_SIGNALS}
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)


def _auth(tokens: list[TokenConfig]) -> str:
    """How /mcp is protected, in words: the tokens by name, never their values."""
    if not tokens:
        return "none"
    return f"bearer token{'s' if len(tokens) > 1 else ''}: {', '.join(t.name for t in tokens)}"


def _is_wildcard(host: str) -> bool:
    return host in ("0.0.0.0", "::", "")


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


async def _health(request: Request) -> PlainTextResponse:
    return PlainTextResponse("ok")
