"""MCP wiring: the tools registered on a low-level `Server`, per-connection client roots, and the
stdio and Streamable HTTP transports.

The low-level `Server` is used rather than `MCPServer` so that each tool's schema,
error text and structured result are exactly ours, and so that every call passes
through one dispatcher (`tools.base.call_tool`) that validates, logs and never
leaks an exception's text to the client.
"""

from __future__ import annotations

import contextlib
import gc
import hmac
import ipaddress
import math
import os
import signal
import sys
import threading
import warnings
from collections.abc import Iterator
from types import FrameType
from typing import Any

import anyio
import anyio.abc
import uvicorn
from mcp.server import Server, ServerRequestContext
from mcp.server.auth.provider import AccessToken, TokenVerifier
from mcp.server.auth.settings import AuthSettings
from mcp.server.context import CallNext, HandlerResult
from mcp.server.transport_security import TransportSecuritySettings
from mcp.shared.exceptions import MCPDeprecationWarning, MCPError
from mcp.shared.message import ServerMessageMetadata
from mcp.types import (
    CallToolRequestParams,
    CallToolResult,
    ClientCapabilities,
    ListRootsRequest,
    ListRootsResult,
    ListToolsResult,
    PaginatedRequestParams,
    RootsCapability,
    TextContent,
)
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import AnyHttpUrl
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route
from starlette.types import ASGIApp

from rootbound import __version__
from rootbound.client_roots import ClientRootsState, build_client_roots
from rootbound.config import Config
from rootbound.disconnects import CancelOnDisconnect, cancelled_on_disconnect
from rootbound.execution import groups
from rootbound.execution.spill import SpillRoot, close_spill_root, find_spill_root, open_spill_root
from rootbound.logs import log, shorten
from rootbound.roots import Root, RootSet
from rootbound.sandbox.select import headline as sandbox_headline
from rootbound.stdio import stdio_transport
from rootbound.tools import all_tools
from rootbound.tools.base import CallContext, Progress, ToolSpec, call_tool

__all__ = ["App", "open_roots", "run"]

# We use `roots/list` on purpose, for handshake-era clients only; the SDK warns on every use.
warnings.filterwarnings("ignore", category=MCPDeprecationWarning)

INSTRUCTIONS = (
    "rootbound gives you file tools confined to named roots. Call list_roots first to learn the root names "
    "and which tools each allows; then pass `root` and a path relative to it to every file tool."
)
ROOTS_TIMEOUT = 5.0  # seconds to wait for a client's roots/list answer; never longer
_STATE_KEY = "rootbound.client_roots"
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
REQUEST_CANCELLED = -32800  # as the SDK answers a cancelled handshake-era request
_ROOTS_CAPABILITY = ClientCapabilities(roots=RootsCapability())


def open_roots(config: Config) -> RootSet:
    """Open every configured root once, as a directory handle the tools resolve beneath."""
    return RootSet(Root.at(r.name, r.path, r.allowed_tools) for r in config.roots)


def _connection_state(session: Any) -> ClientRootsState:
    """This connection's client-roots state (one per stdio process or stateful HTTP session).

    The SDK's per-connection store, `Connection.state`, has no public accessor in
    mcp 2.3 (the version is pinned exactly for this reason).
    """
    connection = session._connection
    state = connection.state.get(_STATE_KEY)
    if state is None:
        state = connection.state[_STATE_KEY] = ClientRootsState()
        connection.exit_stack.callback(state.close)
    assert isinstance(state, ClientRootsState)
    return state


class _StaticToken(TokenVerifier):
    """The operator's bearer token, compared in constant time."""

    def __init__(self, secret: str) -> None:
        self._secret = secret.encode()

    async def verify_token(self, token: str) -> AccessToken | None:
        if hmac.compare_digest(token.encode(), self._secret):
            return AccessToken(token="<redacted>", client_id="rootbound-client", scopes=[])
        return None


class App:
    """One configured rootbound: its roots, its tools, and the MCP server that exposes them."""

    def __init__(self, config: Config, roots: RootSet | None = None) -> None:
        self.config = config
        self.roots = roots if roots is not None else open_roots(config)
        # Commands whose output had to be cut keep the whole of it in a spill file, served read-only
        # as one more root (`command-output`) so the agent can page through it with read_file.
        self.spill: SpillRoot | None = None
        if config.commands.allowed:
            _hide_process_memory()
        if config.commands.allowed and find_spill_root(self.roots) is None:
            self.spill = open_spill_root(self.roots)
            self.roots = RootSet([*self.roots.values(), self.spill])
        self.tools: dict[str, ToolSpec] = {t.name: t for t in all_tools(config)}
        # Built once: generating JSON Schemas is slow, and 2026-07-28 HTTP requests consult a tool's
        # input schema on every call (Mcp-Param header checks).
        self._definitions = [t.definition() for t in self.tools.values()]
        self._input_schemas = {d.name: d.input_schema for d in self._definitions}
        self.server: Server[Any] = Server(
            "rootbound", version=__version__, instructions=INSTRUCTIONS,
            on_list_tools=self._list_tools, on_call_tool=self._call_tool,
            get_tool_input_schema=self._input_schemas.get,
        )
        self.server.middleware.append(self._disconnect_middleware)
        self.server.middleware.append(self._roots_middleware)

    # -- per-call context -------------------------------------------------------------------

    def context(self, roots: RootSet | None = None, project_dir: str | None = None,
                report_progress: Progress | None = None) -> CallContext:
        return CallContext(
            roots=roots if roots is not None else self.roots,
            config=self.config,
            project_dir=project_dir or self.config.project_dir or os.getcwd(),
            report_progress=report_progress,
        )

    async def _list_tools(self, ctx: ServerRequestContext[Any], params: PaginatedRequestParams | None
                          ) -> ListToolsResult:
        return ListToolsResult(tools=self._definitions)

    async def _call_tool(self, ctx: ServerRequestContext[Any], params: CallToolRequestParams) -> CallToolResult:
        roots, project_dir = None, None
        if self._wants_client_roots(ctx):
            state = _connection_state(ctx.session)
            if not state.answered:
                # The request sent after `initialized` may have been lost (over HTTP it rides a stream the
                # client may not have opened yet): ask again, on this call's own response stream.
                await self._fetch_roots(ctx, state, related_request_id=ctx.request_id)
            roots, project_dir = state.roots, state.project_dir
        return await self.call(params.name, params.arguments,
                               self.context(roots, project_dir, ctx.session.report_progress))

    async def call(self, name: str, arguments: dict[str, Any] | None, ctx: CallContext | None = None
                   ) -> CallToolResult:
        spec = self.tools.get(name)
        if spec is None:
            text = f"unknown tool: {shorten(name)}; known tools: {', '.join(self.tools)}"
            return CallToolResult(content=[TextContent(type="text", text=text)], is_error=True)
        return await call_tool(spec, ctx or self.context(), arguments)

    async def _disconnect_middleware(self, ctx: ServerRequestContext[Any], call_next: CallNext) -> HandlerResult:
        """A request whose HTTP client has gone is cancelled, so that its command stops and frees its slot."""
        if ctx.request_id is None or ctx.request is None:
            return await call_next(ctx)
        with cancelled_on_disconnect(ctx.request):
            return await call_next(ctx)
        raise MCPError(code=REQUEST_CANCELLED, message="request cancelled: the client disconnected")

    # -- client roots -----------------------------------------------------------------------

    def _wants_client_roots(self, ctx: ServerRequestContext[Any]) -> bool:
        return (self.config.client_roots != "off"
                and ctx.protocol_version not in MODERN_PROTOCOL_VERSIONS
                and ctx.session.check_client_capability(_ROOTS_CAPABILITY))

    async def _roots_middleware(self, ctx: ServerRequestContext[Any], call_next: CallNext) -> HandlerResult:
        result = await call_next(ctx)
        if ctx.method in ("notifications/initialized", "notifications/roots/list_changed") \
                and self._wants_client_roots(ctx):
            state = _connection_state(ctx.session)
            if ctx.method == "notifications/roots/list_changed":
                state.answered = False
            await self._fetch_roots(ctx, state)
        return result

    async def _fetch_roots(self, ctx: ServerRequestContext[Any], state: ClientRootsState,
                           related_request_id: Any = None) -> None:
        """Ask the client for its roots (bounded by ROOTS_TIMEOUT); any failure leaves the operator roots."""
        async with state.lock:
            if state.answered:
                return
            metadata = ServerMessageMetadata(related_request_id=related_request_id) if related_request_id else None
            try:
                answer = await ctx.session.send_request(ListRootsRequest(), ListRootsResult,
                                                        request_read_timeout_seconds=ROOTS_TIMEOUT, metadata=metadata)
            except Exception as exc:  # timeout, an error answer, no back-channel: roots stay the operator's
                log.info("client roots unavailable; serving the operator's roots",
                         extra={"error": f"{type(exc).__name__}: {exc}"[:300]})
                # A call-time attempt that fails is final until the client says its roots changed;
                # an initialized-time one is not, because over HTTP it may simply have been lost.
                state.answered = related_request_id is not None
                return
            build_client_roots(self.config.client_roots, self.roots,
                               [(str(r.uri), r.name) for r in answer.roots], state)

    # -- transports -------------------------------------------------------------------------

    async def serve_stdio(self, stop: anyio.CancelScope | None = None) -> None:
        """Serve one client on stdin/stdout until end of input, or until `stop` is cancelled."""
        async with stdio_transport() as (read, write):
            with stop or anyio.CancelScope():
                await self.server.run(read, write, self.server.create_initialization_options())

    def http_app(self, *, json_response: bool = False) -> ASGIApp:
        cfg = self.config
        # Always explicit: the SDK turns Host/Origin checks off by itself for a 0.0.0.0 bind.
        hosts = ["127.0.0.1:*", "localhost:*", "[::1]:*", *cfg.allowed_hosts]
        origins = ["http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*", *cfg.allowed_origins]
        if not _is_wildcard(cfg.host) and not _is_loopback(cfg.host):
            hosts.append(f"{cfg.host}:*")
            origins.append(f"http://{cfg.host}:*")
        security = TransportSecuritySettings(enable_dns_rebinding_protection=True, allowed_hosts=hosts,
                                             allowed_origins=origins)
        auth: dict[str, Any] = {}
        if cfg.auth_token:
            auth = {"token_verifier": _StaticToken(cfg.auth_token),
                    "auth": AuthSettings(issuer_url=AnyHttpUrl("http://127.0.0.1"), resource_server_url=None)}
        return CancelOnDisconnect(self.server.streamable_http_app(
            transport_security=security, host=cfg.host, max_request_body_size=cfg.max_request_body_size,
            json_response=json_response, custom_starlette_routes=[Route("/health", _health, methods=["GET"])],
            **auth,
        ))

    async def serve_http(self) -> int | None:
        """Serve HTTP until a stop signal (returned) has let the calls in flight finish or run out of grace."""
        cfg = self.config
        if not _is_loopback(cfg.host) and not cfg.auth_token:
            log.warning("HTTP bound to a non-loopback address WITHOUT an auth token: anyone who can reach "
                        "this port can use every tool. Set auth_token (or ROOTBOUND_AUTH_TOKEN).",
                        extra={"host": cfg.host})
        server = _Uvicorn(uvicorn.Config(
            self.http_app(), host=cfg.host, port=cfg.port, log_config=None, log_level="warning",
            lifespan="on", timeout_graceful_shutdown=math.ceil(cfg.shutdown_grace)))
        log.info("listening", extra={"address": f"http://{cfg.host}:{cfg.port}/mcp",
                                     "auth": "bearer token" if cfg.auth_token else "none"})
        await server.serve()
        return server.stopped_by

    def close(self) -> None:
        groups.kill_all()  # no command outlives the server
        for root in self.roots.values():
            if root is self.spill:
                close_spill_root(root)
            else:
                root.close()


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


def _hide_process_memory() -> None:
    """Make this process non-dumpable, so a process of our user without CAP_SYS_PTRACE cannot read our
    /proc/<pid>/environ or memory, where ROOTBOUND_AUTH_TOKEN may live. Sandboxed commands are denied
    that already (no capabilities, Landlock's ptrace scoping, bubblewrap's PID namespace); this also
    covers `sandbox: off` with a non-root server. Children are dumpable again after exec."""
    import ctypes

    pr_set_dumpable = 4
    if ctypes.CDLL(None, use_errno=True).prctl(pr_set_dumpable, 0, 0, 0, 0) != 0:
        log.warning("could not make the server non-dumpable; commands may read its environment")


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


async def _serve_stdio_until_signal(app: App) -> int | None:
    """Serve stdio until end of input or a stop signal (returned). A signal cancels the calls in flight,
    so running commands' process groups are killed in their `finally` blocks instead of orphaned."""
    stopped_by: int | None = None
    stop = anyio.CancelScope()

    async def watch(*, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        nonlocal stopped_by
        with anyio.open_signal_receiver(*STOP_SIGNALS) as signals:
            task_status.started()
            async for sig in signals:
                if stopped_by is None:
                    stopped_by = sig
                    log.info("stopping on signal", extra={"signal": signal.Signals(sig).name})
                stop.cancel()

    async with anyio.create_task_group() as tg:
        await tg.start(watch)
        await app.serve_stdio(stop)
        tg.cancel_scope.cancel()
    return stopped_by


def exit_status(stopped_by: int | None) -> int:
    """0 after end of input, SIGTERM or SIGHUP (a requested stop that completed); 130 after Ctrl-C, as
    shells expect of an interrupted program."""
    return 128 + signal.SIGINT if stopped_by == signal.SIGINT else 0


class _StopEarly(BaseException):
    """A stop signal that came before the transport watched for them (while starting up)."""

    def __init__(self, sig: int) -> None:
        super().__init__(sig)
        self.sig = sig


def _stop_early(sig: int, frame: FrameType | None) -> None:
    raise _StopEarly(sig)


def run(app: App, transport: str) -> int:
    """Serve until end of input (stdio) or a stop signal, clean up, and return the exit status."""
    stopped_by: int | None = None
    for sig in STOP_SIGNALS:  # from the first line on, a stop signal still cleans up (the transports take over)
        signal.signal(sig, _stop_early)
    try:
        log.info("starting", extra={"version": __version__, "transport": transport, "roots": list(app.roots),
                                    "config": app.config.source, "tools": len(app.tools),
                                    "commands": sandbox_headline(app.config)})
        if transport == "stdio" and sys.stderr.isatty():
            names = ", ".join(app.roots)
            print(f"rootbound {__version__}: serving root(s) {names} over stdio. This process speaks MCP on "
                  "stdin/stdout; start it from an MCP client (see README), or press Ctrl-C to stop.",
                  file=sys.stderr, flush=True)
        stopped_by = anyio.run(_serve_stdio_until_signal if transport == "stdio" else App.serve_http, app)
    except _StopEarly as stop:
        stopped_by = stop.sig
    except KeyboardInterrupt:
        stopped_by = signal.SIGINT
    finally:
        for sig in STOP_SIGNALS:  # a stop is under way: a second signal must not cut the clean-up short
            signal.signal(sig, signal.SIG_IGN)
        app.close()
    if stopped_by is not None:
        log.info("stopped", extra={"signal": signal.Signals(stopped_by).name})
    # Interpreter teardown would garbage-collect the SDK's many thousands of model objects, which takes
    # a second or more on a busy machine; frozen objects are skipped, so the process ends promptly.
    gc.freeze()
    return exit_status(stopped_by)
