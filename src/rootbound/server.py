"""MCP wiring: the tools registered on a low-level `Server`, and the stdio and Streamable HTTP transports.

The low-level `Server` is used rather than `MCPServer` so that each tool's schema,
error text and structured result are exactly ours, and so that every call passes
through one dispatcher (`tools.base.call_tool`) that validates, logs and never
leaks an exception's text to the client.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import anyio
import uvicorn
from mcp.server import Server, ServerRequestContext
from mcp.server.stdio import stdio_server
from mcp.server.transport_security import TransportSecuritySettings
from mcp.types import (
    CallToolRequestParams,
    CallToolResult,
    ListToolsResult,
    PaginatedRequestParams,
    TextContent,
)
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from rootbound import __version__
from rootbound.config import Config
from rootbound.logs import log
from rootbound.roots import Root, RootSet
from rootbound.tools import all_tools
from rootbound.tools.base import CallContext, Progress, ToolSpec, call_tool

__all__ = ["App", "open_roots"]

INSTRUCTIONS = (
    "rootbound gives you file tools confined to named roots. Call list_roots first to learn the root names "
    "and which tools each allows; then pass `root` and a path relative to it to every file tool."
)


def open_roots(config: Config) -> RootSet:
    """Open every configured root once, as a directory handle the tools resolve beneath."""
    return RootSet(Root.at(r.name, r.path, r.allowed_tools) for r in config.roots)


class App:
    """One configured rootbound: its roots, its tools, and the MCP server that exposes them."""

    def __init__(self, config: Config, roots: RootSet | None = None) -> None:
        self.config = config
        self.roots = roots if roots is not None else open_roots(config)
        self.tools: dict[str, ToolSpec] = {t.name: t for t in all_tools(config)}
        self.server: Server[Any] = Server(
            "rootbound", version=__version__, instructions=INSTRUCTIONS,
            on_list_tools=self._list_tools, on_call_tool=self._call_tool,
        )

    def context(self, report_progress: Progress | None = None) -> CallContext:
        project_dir = self.config.project_dir or os.getcwd()
        return CallContext(roots=self.roots, config=self.config, project_dir=project_dir,
                           report_progress=report_progress)

    async def _list_tools(self, ctx: ServerRequestContext[Any], params: PaginatedRequestParams | None
                          ) -> ListToolsResult:
        return ListToolsResult(tools=[t.definition() for t in self.tools.values()])

    async def _call_tool(self, ctx: ServerRequestContext[Any], params: CallToolRequestParams) -> CallToolResult:
        return await self.call(params.name, params.arguments, self.context(ctx.session.report_progress))

    async def call(self, name: str, arguments: dict[str, Any] | None, ctx: CallContext | None = None
                   ) -> CallToolResult:
        spec = self.tools.get(name)
        if spec is None:
            text = f"unknown tool: {name}; known tools: {', '.join(self.tools)}"
            return CallToolResult(content=[TextContent(type="text", text=text)], is_error=True)
        return await call_tool(spec, ctx or self.context(), arguments)

    # -- transports -------------------------------------------------------------------------

    async def serve_stdio(self) -> None:
        async with stdio_server() as (read, write):
            await self.server.run(read, write, self.server.create_initialization_options())

    def http_app(self) -> Starlette:
        host = self.config.host
        # Always explicit: the SDK turns Host/Origin checks off by itself for a 0.0.0.0 bind.
        hosts = ["127.0.0.1:*", "localhost:*", "[::1]:*"]
        origins = ["http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*"]
        if host not in ("127.0.0.1", "localhost", "::1", "0.0.0.0", "::"):
            hosts.append(f"{host}:*")
            origins.append(f"http://{host}:*")
        security = TransportSecuritySettings(enable_dns_rebinding_protection=True, allowed_hosts=hosts,
                                             allowed_origins=origins)
        return self.server.streamable_http_app(
            transport_security=security, host=host,
            custom_starlette_routes=[Route("/health", _health, methods=["GET"])],
        )

    async def serve_http(self) -> None:
        app = self.http_app()
        config = uvicorn.Config(app, host=self.config.host, port=self.config.port, log_config=None,
                                log_level="warning", lifespan="on")
        server = uvicorn.Server(config)
        log.info("listening", extra={"address": f"http://{self.config.host}:{self.config.port}/mcp"})
        await server.serve()

    def close(self) -> None:
        self.roots.close()


async def _health(request: Request) -> PlainTextResponse:
    return PlainTextResponse("ok")


def run(app: App, transport: str) -> None:
    log.info("starting", extra={"version": __version__, "transport": transport, "roots": list(app.roots),
                                "config": app.config.source, "tools": len(app.tools)})
    if transport == "stdio" and sys.stderr.isatty():
        names = ", ".join(app.roots)
        print(f"rootbound {__version__}: serving root(s) {names} over stdio. This process speaks MCP on "
              "stdin/stdout; start it from an MCP client (see README), or press Ctrl-C to stop.",
              file=sys.stderr, flush=True)
    try:
        anyio.run(app.serve_stdio if transport == "stdio" else app.serve_http)
    except KeyboardInterrupt:
        pass
    finally:
        app.close()
