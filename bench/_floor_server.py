"""The SDK's floor for one tool call: a lowlevel `Server` answering `stat_file` with a constant result of the same
shape as rootbound's, on rootbound's own stdio transport. Started by bench/per_call.py."""

from __future__ import annotations

from typing import Any

import anyio
from mcp.server import Server, ServerRequestContext
from mcp.types import CallToolRequestParams, CallToolResult, ListToolsResult, PaginatedRequestParams, TextContent, Tool

from rootbound.server.stdio import stdio_transport

STAT = {"name": "read-10k.txt", "path": "files/read-10k.txt", "type": "file", "size": 10240, "is_directory": False,
        "is_symlink": False, "modified_at": "2026-11-26T08:45:01.123456Z"}


async def list_tools(ctx: ServerRequestContext[Any], params: PaginatedRequestParams | None) -> ListToolsResult:
    return ListToolsResult(tools=[Tool(name="stat_file", description="constant", input_schema={"type": "object"})])


async def call_tool(ctx: ServerRequestContext[Any], params: CallToolRequestParams) -> CallToolResult:
    return CallToolResult(content=[TextContent(type="text", text="file files/read-10k.txt: 10,240 bytes")],
                          structured_content=dict(STAT))


async def main() -> None:
    server: Server[Any] = Server("floor", on_list_tools=list_tools, on_call_tool=call_tool)
    async with stdio_transport() as (read, write):
        await server.run(read, write, server.create_initialization_options())


if __name__ == "__main__":
    anyio.run(main)
