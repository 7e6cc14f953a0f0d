"""The App: one configured rootbound — its roots, its tools, the dispatch of every call, and per-connection state.

The low-level MCP `Server` is used rather than `MCPServer` so that each tool's schema,
error text and structured result are exactly ours, and so that every call passes
through one dispatcher (`tools.base.call_tool`) that validates, logs and never
leaks an exception's text to the client.

Per connection (a stdio process, a stateful HTTP session; for sessionless 2026-07-28
requests, an auth principal): the client's roots (`client_roots.py`, asked for by
`roots_request.py`) and its `Caller` (its spill area, its share of the worker threads).
Per request: the bearer token's name and the roots it reaches (`tokens.py`), and who is
calling, which every log line of the call carries (`connection`, `client`, `token`).
What the App builds once at start-up and closes: the roots' handles, the grep helper
process, the spill directory, the commands' launcher, queue and process groups, and the
process-wide set-up commands need.

The App knows no transport: `stdio.py` and `http.py` take one and serve it.
"""

from __future__ import annotations

import os
from functools import cached_property
from typing import TYPE_CHECKING, Any

from mcp.server import Server, ServerRequestContext
from mcp.server._otel import OpenTelemetryMiddleware
from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.context import CallNext, HandlerResult
from mcp.types import (
    CallToolRequestParams,
    CallToolResult,
    ClientCapabilities,
    ListToolsResult,
    PaginatedRequestParams,
    RootsCapability,
    Tool,
)
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from opentelemetry import trace

from rootbound import __version__
from rootbound.config import Config
from rootbound.execution import groups
from rootbound.execution.spill import SpillStore
from rootbound.fs import Root, RootSet, recovery
from rootbound.libc import libc
from rootbound.logs import attributed, log, shorten
from rootbound.server.client_roots import ClientRootsState, build_client_roots
from rootbound.server.roots_request import RootsAsker
from rootbound.tokens import reach, start_dir

if TYPE_CHECKING:
    from rootbound.execution.service import CommandHost
    from rootbound.grep.helper import SharedHelper
    from rootbound.journal.change import Journal
    from rootbound.tools.base import CallContext, Caller, Progress, Reply, ToolSpec, Workers

__all__ = ["ANONYMOUS", "App", "open_journal", "open_roots"]

INSTRUCTIONS = (
    "rootbound gives you file tools confined to named roots. Call list_roots first to learn the root names "
    "and which tools each allows; then pass a path relative to a root, and `root` unless it is the default one."
)
_STATE_KEY = "rootbound.client_roots"
_ASKER_KEY = "rootbound.roots_asker"
_CALLER_KEY = "rootbound.caller"
_TOKEN_KEY = "rootbound.token"
_WHO_KEY = "rootbound.who"
ANONYMOUS = "anonymous"  # the principal of sessionless requests when no auth token is configured
_ROOTS_CAPABILITY = ClientCapabilities(roots=RootsCapability())
_COMMAND_TOOLS = ("execute_command", "shell")  # listed only when some program is allowed


def open_roots(config: Config) -> RootSet:
    """Open every configured root once, as a directory handle the tools resolve beneath."""
    return RootSet(Root.at(r.name, r.path, r.allowed_tools) for r in config.roots)


def open_journal(config: Config, roots: list[Root]) -> Journal | None:
    """The change journal of these roots (None: `journal: off`, or no usable directory, which is logged), with
    what killed servers left pending settled and retention applied."""
    if not config.journal.enabled:
        return None  # (and SQLite is never imported)
    from rootbound.journal import recovery as journal_recovery
    from rootbound.journal import retention
    from rootbound.journal import settings as journal_settings

    j = config.journal
    settings = journal_settings.resolve(j.dir, config.state_dir, [r.real_path for r in roots], max_bytes=j.max_bytes,
                                        max_age=j.max_age_seconds, max_file_size=j.max_file_size)
    if settings is None:
        log.warning("the change journal is off: no usable directory outside the roots (set journal.dir)")
        return None
    journal = journal_recovery.start(settings, [(root, root.handle()) for root in roots])
    journal.after_commit.append(retention.Upkeep(settings))
    for root in roots:
        try:
            retention.maintain(journal.store(root.real_path), settings)
        except Exception as exc:  # upkeep must not stop the server: the journal still records
            log.warning("journal upkeep failed", extra={"root": root.name, "error": str(exc)[:200]})
    return journal


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


class App:
    """One configured rootbound: its roots, its tools, and the MCP server that exposes them."""

    def __init__(self, config: Config, roots: RootSet | None = None) -> None:
        self.config = config
        self.roots = roots if roots is not None else open_roots(config)
        # Before anything is served: finish or roll back what a killed server left half done.
        self.state_dir = recovery.start(config.state_dir, [(r.real_path, r.handle()) for r in self.roots.values()],
                                        groups.sweep_ids)
        # The change journal: what killed writers left pending is settled before anything is served.
        self.journal = open_journal(config, list(self.roots.values()))
        # Commands whose output had to be cut keep the whole of it in a spill file, served read-only
        # as one more root (`command-output`) so the agent can page through it with read_file; each
        # client sees only its own (see `_caller`).
        self.spill: SpillStore | None = None
        if config.commands.allowed:
            _hide_process_memory()  # at once: the environment may hold a bearer token
            self.spill = SpillStore(self.roots)
        # What each bearer token reaches, by its name (http.py makes the name the token's client_id): its roots,
        # and for a token limited to some roots, where its relative command cwds start.
        self._reach = {t.name: (reach(self.roots, t.roots),
                                None if t.roots is None else
                                start_dir(reach(self.roots, t.roots), config.project_dir or os.getcwd()))
                       for t in config.tokens}
        # Sessionless requests' clients, by auth principal (one entry per configured token, at most,
        # plus the anonymous one): they live as long as the server.
        self._principals: dict[str, Caller] = {}
        self._built: list[Tool] | None = None  # see _definitions
        self._input_schemas: dict[str, dict[str, Any]] = {}
        self.server: Server[Any] = Server(
            "rootbound", version=__version__, instructions=INSTRUCTIONS,
            on_list_tools=self._list_tools, get_tool_input_schema=self._input_schema,
        )
        if not _tracing():  # the SDK's span per message is a no-op without a tracer, yet costs ~0.1 ms of CPU
            self.server.middleware[:] = [m for m in self.server.middleware
                                         if not isinstance(m, OpenTelemetryMiddleware)]
        # tools/call answers with the result's wire form, as `tools.base.reply` builds it: no model is made per call
        # only to be dumped again (a 10,000-entry listing's structuredContent is 1 MB of JSON).
        self.server.add_request_handler("tools/call", CallToolRequestParams, self._call_tool)
        self.server.middleware.append(self._roots_middleware)

    # -- built on first use ------------------------------------------------------------------
    # `initialize` needs none of these, and together they were most of start-up (the tool modules' pydantic
    # models, probing bubblewrap): each is built by the first request that needs it, on the event loop,
    # before that request does anything else.

    @cached_property
    def tools(self) -> dict[str, ToolSpec]:
        """The tools this configuration exposes, by name, in the order clients list them."""
        from rootbound.tools import all_tools

        return {t.name: t for t in all_tools(self.config)}

    @cached_property
    def commands(self) -> CommandHost | None:
        """The launcher (chosen once: probing for bubblewrap runs it), the queue and the process groups of
        commands; None when no command is allowed."""
        if not self.config.commands.allowed:
            return None
        from rootbound.execution.output import return_big_buffers
        from rootbound.execution.service import CommandHost
        from rootbound.sandbox.select import headline, launcher_for

        return_big_buffers()  # command output must not leave the heap grown for good
        if not groups.become_subreaper():  # daemons of commands are re-parented to us, so we can end them
            log.warning("could not become a child subreaper; daemons that commands start may outlive them")
        host = CommandHost.build(self.config, launcher_for(self.config))
        log.info("commands ready", extra={"commands": headline(self.config, host.launcher)})
        return host

    @cached_property
    def workers(self) -> Workers:
        from rootbound.tools.base import Workers

        return Workers()

    @cached_property
    def grep_helper(self) -> SharedHelper:
        """The helper process of grep and glob: started by the first search that can use it."""
        from rootbound.grep.helper import SharedHelper

        return SharedHelper()

    @property
    def definitions(self) -> list[Tool]:
        """The tool definitions clients are given (`tools/list`), in order."""
        return list(self._definitions())

    def _definitions(self) -> list[Tool]:
        # Built once, on first use rather than at start (generating the JSON Schemas is a good part of start-up,
        # and `initialize` needs none): 2026-07-28 HTTP requests consult a tool's input schema on every call.
        if self._built is None:
            self._built = [t.definition() for t in self.tools.values()]
            self._input_schemas = {d.name: d.input_schema for d in self._built}
        return self._built

    def _input_schema(self, name: str) -> dict[str, Any] | None:
        self._definitions()
        return self._input_schemas.get(name)

    # -- per-call context -------------------------------------------------------------------

    def context(self, roots: RootSet | None = None, project_dir: str | None = None,
                report_progress: Progress | None = None, caller: Caller | None = None) -> CallContext:
        from rootbound.tools.base import CallContext

        caller = caller or self._principal_caller(ANONYMOUS)
        roots = roots if roots is not None else self.roots
        if caller.spill is not None:
            roots = roots.plus(caller.spill.root)
        return CallContext(
            roots=roots,
            config=self.config,
            project_dir=project_dir or self.config.project_dir,
            caller=caller,
            workers=self.workers,
            report_progress=report_progress,
            grep_helper=self.grep_helper,
            commands=self.commands,
            journal=self.journal,
        )

    def _reach_of(self, token: str | None) -> tuple[RootSet | None, str | None]:
        """The roots (None: the operator's) and command start directory (None: the default) of a token's calls."""
        if token is None:
            return None, None  # no authentication: the operator's roots
        # A name no token has cannot come from http.py; if it did, it would reach nothing.
        return self._reach.get(token, (RootSet([]), None))

    def _new_caller(self, connection: str) -> Caller:
        from rootbound.tools.base import Caller

        return Caller(self.spill.area() if self.spill is not None else None, connection)

    def _principal_caller(self, principal: str) -> Caller:
        caller = self._principals.get(principal)
        if caller is None:
            caller = self._principals[principal] = self._new_caller(principal)
        return caller

    def _caller(self, ctx: ServerRequestContext[Any]) -> Caller:
        """The client making this request: its connection (stdio, or a stateful HTTP session) on the
        handshake-era protocol; on the sessionless 2026-07-28 protocol, which has no connection to speak
        of, its auth principal (every sessionless request is one anonymous principal without auth; on stdio,
        the process's one client)."""
        from rootbound.tools.base import Caller

        if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:
            return self._principal_caller(_connection_id(ctx))
        connection = ctx.session._connection  # see _connection_state
        caller = connection.state.get(_CALLER_KEY)
        if caller is None:
            caller = connection.state[_CALLER_KEY] = self._new_caller(_connection_id(ctx))
            connection.exit_stack.callback(caller.close)  # its spill files go with the connection
        assert isinstance(caller, Caller)
        return caller

    def _who(self, ctx: ServerRequestContext[Any], token: str | None) -> tuple[Caller, dict[str, str], bool]:
        """The client making this request, who it is for the log (`_identity`), and whether its roots are asked for.

        The same for every call of a handshake-era connection (its token is bound to it, its clientInfo and
        capabilities came with initialize): worked out by its first call, not by each one."""
        if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:  # no connection: each request is its own
            caller = self._caller(ctx)
            return caller, _identity(ctx, caller, token), self._wants_client_roots(ctx)
        state = ctx.session._connection.state  # see _connection_state
        known = state.get(_WHO_KEY)
        if known is None or known[0] != token:
            caller = self._caller(ctx)
            found = (token, caller, _identity(ctx, caller, token), self._wants_client_roots(ctx))
            if known is None:  # (a call with another token is refused by `_bound_to`: not remembered)
                state[_WHO_KEY] = found
            known = found
        return known[1], known[2], known[3]

    async def _list_tools(self, ctx: ServerRequestContext[Any], params: PaginatedRequestParams | None
                          ) -> ListToolsResult:
        return ListToolsResult(tools=self._definitions())

    async def _call_tool(self, ctx: ServerRequestContext[Any], params: CallToolRequestParams) -> Reply:
        token = _token_name()
        caller, identity, wants_client_roots = self._who(ctx, token)
        with attributed(identity):
            if not _bound_to(ctx, token):
                from rootbound.tools.base import reply

                log.warning("call refused: the session was opened with another token", extra={"tool": params.name})
                return reply("this session was opened with another bearer token; start a new session", is_error=True)
            roots, project_dir = self._reach_of(token)
            if wants_client_roots:
                asker = self._asker(ctx.session, roots)
                await asker.before_call(ctx.session, ctx.request_id)  # at most CALL_WAIT; never the client's pace
                if asker.state.roots is not None:  # the client's roots, within the token's
                    roots, project_dir = asker.state.roots, asker.state.project_dir
            return await self.reply(params.name, params.arguments,
                                    self.context(roots, project_dir, ctx.session.report_progress, caller))

    async def reply(self, name: str, arguments: dict[str, Any] | None, ctx: CallContext | None = None) -> Reply:
        """Call a tool; its result in the wire form the client receives."""
        from rootbound.tools.base import call_tool, reply

        spec = self.tools.get(name)
        if spec is None:
            text = f"unknown tool: {shorten(name)}; known tools: {', '.join(self.tools)}"
            if name in _COMMAND_TOOLS:
                text += ("; the command tools are off on this server: the operator enables them with "
                         "--allow-commands LIST or commands.allowed in the config")
            return reply(text, is_error=True)
        return await call_tool(spec, ctx or self.context(), arguments)

    async def call(self, name: str, arguments: dict[str, Any] | None, ctx: CallContext | None = None
                   ) -> CallToolResult:
        """Call a tool in process (tests, benchmarks): its result as the client's model of it."""
        return CallToolResult.model_validate(await self.reply(name, arguments, ctx))

    # -- client roots -----------------------------------------------------------------------

    def _wants_client_roots(self, ctx: ServerRequestContext[Any]) -> bool:
        return (self.config.client_roots != "off"
                and ctx.protocol_version not in MODERN_PROTOCOL_VERSIONS
                and ctx.session.check_client_capability(_ROOTS_CAPABILITY))

    async def _roots_middleware(self, ctx: ServerRequestContext[Any], call_next: CallNext) -> HandlerResult:
        result = await call_next(ctx)
        if ctx.method in ("notifications/initialized", "notifications/roots/list_changed") \
                and self._wants_client_roots(ctx):
            token = _token_name()
            if not _bound_to(ctx, token):
                return result
            with attributed(_identity(ctx, self._caller(ctx), token)):
                asker = self._asker(ctx.session, self._reach_of(token)[0])
                if ctx.method == "notifications/roots/list_changed":
                    asker.changed(ctx.session)
                elif not asker.running:
                    asker.ask(ctx.session)  # early: answered before the first call, with luck
                    await asker.run()  # this notification's task now sends the connection's requests, until it ends
        return result

    def _asker(self, session: Any, reached: RootSet | None) -> RootsAsker:
        """This connection's roots requests (roots_request.py), built around its client-roots state.

        `reached`: the roots of the connection's token (None: all). A token limited to some roots gets client
        roots only within them, whatever `client_roots` says: a client must not widen what its token reaches."""
        states = session._connection.state
        asker = states.get(_ASKER_KEY)
        if asker is None:
            state = _connection_state(session)
            fence = reached if reached is not None else self.roots
            policy = self.config.client_roots if fence is self.roots else "within"
            asker = states[_ASKER_KEY] = RootsAsker(
                state, lambda pairs: build_client_roots(
                    policy, fence, pairs, state,
                    reserved={self.spill.name} if self.spill is not None else set(),
                    allow_self_modification=self.config.allow_self_modification,
                    journal_dir=self.journal.settings.dir if self.journal is not None else None))
        assert isinstance(asker, RootsAsker)
        return asker

    def close(self) -> None:
        built = self.__dict__  # what was never built needs no closing (and must not be built now)
        if built.get("commands") is not None:
            built["commands"].close()  # no command outlives the server
        if "grep_helper" in built:
            built["grep_helper"].close()
        for root in self.roots.values():
            root.close()
        for caller in self._principals.values():
            caller.close()
        if self.spill is not None:
            self.spill.close()
        if self.journal is not None:
            self.journal.close()


def _tracing() -> bool:
    """Whether OpenTelemetry traces go anywhere: a tracer provider was installed before the server started
    (`opentelemetry-instrument rootbound ...`); without one the API hands out non-recording spans."""
    return not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)


def _token_name() -> str | None:
    """The name of the bearer token this request came with (http.py: a token's client_id is its name); None
    without authentication (stdio, or HTTP with no token configured)."""
    access = get_access_token()
    return access.client_id if access is not None else None


def _bound_to(ctx: ServerRequestContext[Any], token: str | None) -> bool:
    """Whether this connection serves `token`: a connection serves the token it was opened with, for life.

    The SDK already answers 404 to a session id presented with another token; checked again on every
    request here, because a restricted token's fence must not rest on one check elsewhere."""
    if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:
        return True  # no session: each request is its own connection
    first = ctx.session._connection.state.setdefault(_TOKEN_KEY, token)
    return bool(first == token)


def _connection_id(ctx: ServerRequestContext[Any]) -> str:
    """The connection a request belongs to, as its `Caller` and the log name it: an HTTP session's id; on stdio
    the server process (`stdio:PID`: it serves one client); for a sessionless 2026-07-28 HTTP request, which has
    no connection, its auth principal (`token:NAME`, or `anonymous` without auth)."""
    if ctx.request is None:  # not HTTP
        return f"stdio:{os.getpid()}"
    session_id = ctx.session._connection.session_id
    if session_id is not None and ctx.protocol_version not in MODERN_PROTOCOL_VERSIONS:
        return str(session_id)
    token = get_access_token()
    return f"token:{token.client_id}" if token is not None else ANONYMOUS


def _identity(ctx: ServerRequestContext[Any], caller: Caller, token: str | None) -> dict[str, str]:
    """Who is calling, for the log: `connection` (the Caller's: `_connection_id`), `client` (the clientInfo
    name/version the client gave, at initialize or in the request's _meta) and `token` (the bearer token's name)."""
    fields = {"connection": caller.connection}
    params = ctx.session._connection.client_params  # see _connection_state
    if params is not None:
        fields["client"] = f"{params.client_info.name}/{params.client_info.version}"
    if token is not None:
        fields["token"] = token
    return fields


def _hide_process_memory() -> None:
    """Make this process non-dumpable, so a process of our user without CAP_SYS_PTRACE cannot read our
    /proc/<pid>/environ or memory, where ROOTBOUND_AUTH_TOKEN may live. Sandboxed commands are denied
    that already (no capabilities, Landlock's ptrace scoping, bubblewrap's PID namespace); this also
    covers `sandbox: off` with a non-root server. Children are dumpable again after exec."""
    pr_set_dumpable = 4
    if libc.prctl(pr_set_dumpable, 0, 0, 0, 0) != 0:
        log.warning("could not make the server non-dumpable; commands may read its environment")
