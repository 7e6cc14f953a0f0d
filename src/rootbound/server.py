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
from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.provider import AccessToken, TokenVerifier
from mcp.server.auth.settings import AuthSettings
from mcp.server.context import CallNext, HandlerResult
from mcp.server.transport_security import TransportSecuritySettings
from mcp.shared.exceptions import MCPDeprecationWarning, MCPError
from mcp.types import (
    CallToolRequestParams,
    CallToolResult,
    ClientCapabilities,
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

from rootbound import __version__, recovery
from rootbound.client_roots import ClientRootsState, build_client_roots
from rootbound.config import Config
from rootbound.disconnects import CancelOnDisconnect, cancelled_on_disconnect
from rootbound.execution import groups
from rootbound.execution.output import return_big_buffers
from rootbound.execution.spill import SpillStore
from rootbound.grep.helper import SharedHelper
from rootbound.hosts import LowercaseHost, host_patterns, origin_patterns, url_host
from rootbound.listening import listen
from rootbound.logs import log, shorten
from rootbound.roots import Root, RootSet
from rootbound.roots_request import RootsAsker
from rootbound.sandbox.select import headline as sandbox_headline
from rootbound.session_ids import NoSessionIdOnError
from rootbound.stdio import stdio_transport
from rootbound.tools import all_tools
from rootbound.tools.base import CallContext, Caller, Progress, ToolSpec, Workers, call_tool

__all__ = ["App", "open_roots", "run"]

# We use `roots/list` on purpose, for handshake-era clients only; the SDK warns on every use.
warnings.filterwarnings("ignore", category=MCPDeprecationWarning)

INSTRUCTIONS = (
    "rootbound gives you file tools confined to named roots. Call list_roots first to learn the root names "
    "and which tools each allows; then pass `root` and a path relative to it to every file tool."
)
_STATE_KEY = "rootbound.client_roots"
_ASKER_KEY = "rootbound.roots_asker"
_CALLER_KEY = "rootbound.caller"
ANONYMOUS = "anonymous"  # the principal of sessionless requests when no auth token is configured
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
REQUEST_CANCELLED = -32800  # as the SDK answers a cancelled handshake-era request
_ROOTS_CAPABILITY = ClientCapabilities(roots=RootsCapability())
_COMMAND_TOOLS = ("execute_command", "shell")  # listed only when some program is allowed


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
        # Before anything is served: finish or roll back what a killed server left half done.
        self.state_dir = recovery.start(config.state_dir, [(r.real_path, r.fd) for r in self.roots.values()])
        # Commands whose output had to be cut keep the whole of it in a spill file, served read-only
        # as one more root (`command-output`) so the agent can page through it with read_file; each
        # client sees only its own (see `_caller`).
        self.spill: SpillStore | None = None
        if config.commands.allowed:
            _hide_process_memory()
            return_big_buffers()  # command output must not leave the heap grown for good
            if not groups.become_subreaper():  # daemons of commands are re-parented to us, so we can end them
                log.warning("could not become a child subreaper; daemons that commands start may outlive them")
            self.spill = SpillStore(self.roots)
        self.workers = Workers()
        self.grep_helper = SharedHelper()  # started by the first grep that can use it
        # Sessionless requests' clients, by auth principal (one entry per configured token, at most,
        # plus the anonymous one): they live as long as the server.
        self._principals: dict[str, Caller] = {}
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
                report_progress: Progress | None = None, caller: Caller | None = None) -> CallContext:
        caller = caller or self._principal_caller(ANONYMOUS)
        roots = roots if roots is not None else self.roots
        if caller.spill is not None:
            roots = RootSet([*roots.values(), caller.spill.root])
        return CallContext(
            roots=roots,
            config=self.config,
            project_dir=project_dir or self.config.project_dir or os.getcwd(),
            caller=caller,
            workers=self.workers,
            report_progress=report_progress,
            grep_helper=self.grep_helper,
        )

    def _new_caller(self) -> Caller:
        return Caller(self.spill.area() if self.spill is not None else None)

    def _principal_caller(self, principal: str) -> Caller:
        caller = self._principals.get(principal)
        if caller is None:
            caller = self._principals[principal] = self._new_caller()
        return caller

    def _caller(self, ctx: ServerRequestContext[Any]) -> Caller:
        """The client making this request: its connection (stdio, or a stateful HTTP session) on the
        handshake-era protocol; on the sessionless 2026-07-28 protocol, which has no connection to speak
        of, its auth principal (every sessionless request is one anonymous principal without auth)."""
        if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:
            token = get_access_token()
            return self._principal_caller(f"token:{token.client_id}" if token is not None else ANONYMOUS)
        connection = ctx.session._connection  # see _connection_state
        caller = connection.state.get(_CALLER_KEY)
        if caller is None:
            caller = connection.state[_CALLER_KEY] = self._new_caller()
            connection.exit_stack.callback(caller.close)  # its spill files go with the connection
        assert isinstance(caller, Caller)
        return caller

    async def _list_tools(self, ctx: ServerRequestContext[Any], params: PaginatedRequestParams | None
                          ) -> ListToolsResult:
        return ListToolsResult(tools=self._definitions)

    async def _call_tool(self, ctx: ServerRequestContext[Any], params: CallToolRequestParams) -> CallToolResult:
        roots, project_dir = None, None
        if self._wants_client_roots(ctx):
            asker = self._asker(ctx.session)
            await asker.before_call(ctx.session, ctx.request_id)  # at most CALL_WAIT; never the client's pace
            roots, project_dir = asker.state.roots, asker.state.project_dir
        return await self.call(params.name, params.arguments,
                               self.context(roots, project_dir, ctx.session.report_progress, self._caller(ctx)))

    async def call(self, name: str, arguments: dict[str, Any] | None, ctx: CallContext | None = None
                   ) -> CallToolResult:
        spec = self.tools.get(name)
        if spec is None:
            text = f"unknown tool: {shorten(name)}; known tools: {', '.join(self.tools)}"
            if name in _COMMAND_TOOLS:
                text += ("; the command tools are off on this server: the operator enables them with "
                         "--allow-commands LIST or commands.allowed in the config")
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
            asker = self._asker(ctx.session)
            if ctx.method == "notifications/roots/list_changed":
                asker.changed(ctx.session)
            elif not asker.running:
                asker.ask(ctx.session)  # early: answered before the first call, with luck
                await asker.run()  # this notification's task now sends the connection's requests, until it ends
        return result

    def _asker(self, session: Any) -> RootsAsker:
        """This connection's roots requests (roots_request.py), built around its client-roots state."""
        states = session._connection.state
        asker = states.get(_ASKER_KEY)
        if asker is None:
            state = _connection_state(session)
            asker = states[_ASKER_KEY] = RootsAsker(
                state, lambda pairs: build_client_roots(
                    self.config.client_roots, self.roots, pairs, state,
                    reserved={self.spill.name} if self.spill is not None else set(),
                    allow_self_modification=self.config.allow_self_modification))
        assert isinstance(asker, RootsAsker)
        return asker

    # -- transports -------------------------------------------------------------------------

    async def serve_stdio(self, stop: anyio.CancelScope | None = None) -> None:
        """Serve one client on stdin/stdout until end of input, or until `stop` is cancelled."""
        async with stdio_transport() as (read, write):
            with stop or anyio.CancelScope():
                await self.server.run(read, write, self.server.create_initialization_options())

    def http_app(self, *, json_response: bool = False) -> ASGIApp:
        cfg = self.config
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
        if cfg.auth_token:
            auth = {"token_verifier": _StaticToken(cfg.auth_token),
                    "auth": AuthSettings(issuer_url=AnyHttpUrl("http://127.0.0.1"), resource_server_url=None)}
        app = self.server.streamable_http_app(
            transport_security=security, host=cfg.host, max_request_body_size=cfg.max_request_body_size,
            json_response=json_response, custom_starlette_routes=[Route("/health", _health, methods=["GET"])],
            **auth,
        )
        app.add_middleware(NoSessionIdOnError)  # a refused request names no (discarded) session
        app.add_middleware(LowercaseHost)
        return CancelOnDisconnect(app)

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
        sock = listen(cfg.host, cfg.port)  # before saying so: a port in use is a ListenError, not a later traceback
        log.info("listening", extra={"address": f"http://{url_host(cfg.host)}:{sock.getsockname()[1]}/mcp",
                                     "auth": "bearer token" if cfg.auth_token else "none"})
        await server.serve(sockets=[sock])
        return server.stopped_by

    def close(self) -> None:
        groups.kill_all()  # no command outlives the server
        self.grep_helper.close()
        for root in self.roots.values():
            root.close()
        for caller in self._principals.values():
            caller.close()
        if self.spill is not None:
            self.spill.close()


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
