"""list_folder on a directory of 10,000 files vs `os.scandir` + stat of every entry.

    .venv/bin/python bench/list_folder.py [--entries N] [--runs N]

Cases, timed in turns on a warm cache:
- `scandir+lstat+sort` (baseline): what any lister must do at least.
- `handler`: the tool function alone (resolve beneath the root, list, stat, build the result).
- `server dispatch`: `App.call`, i.e. everything the server does per request: argument
  validation, the worker thread hop, the handler, the JSON text block, the log line.
- `MCP client call`: an in-memory MCP client's `call_tool`, protocol layer included.
- the stages of a reply after the handler, each alone: `shape` (structuredContent and the text block),
  `wire` (the SDK's check of the result's shape, and the JSON line our stdio transport writes), and
  `client parse` (that line into a message, as the SDK's stdio client does).
Target (issue 2): server-side under 50 ms for 10,000 entries (the seed allows 1 s).
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path
from typing import Any

import anyio
from mcp.shared.message import SessionMessage
from mcp.types import CallToolResult, JSONRPCResponse, jsonrpc_message_adapter
from mcp_types.methods import serialize_server_result

from _util import checked, measure, print_table, served, verdict
from rootbound.server.app import _wire
from rootbound.server.stdio import _encode
from rootbound.tools import reading
from rootbound.tools.base import _shape


def wire_line(result: CallToolResult) -> bytes:
    """The reply's line on stdio: the SDK's shape check (a 2025-11-25 session), then our transport's encoding."""
    checked_result = serialize_server_result("tools/call", "2025-11-25", _wire(result))
    return _encode(SessionMessage(message=JSONRPCResponse(jsonrpc="2.0", id=1, result=checked_result)))


def scandir_baseline(path: Path) -> list[tuple[str, os.stat_result]]:
    with os.scandir(path) as it:
        rows = [(entry.name, entry.stat(follow_symlinks=False)) for entry in it]
    rows.sort(key=lambda row: row[0])
    return rows


async def main(entries: int, runs: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        big = Path(tmp) / "big"
        big.mkdir()
        for i in range(entries):
            with open(big / f"file_{i:05d}.txt", "wb") as f:
                f.write(b"x" * (i % 100))
        async with served(Path(tmp)) as (app, client):
            args: dict[str, Any] = {"root": "bench", "path": "big", "limit": min(entries, reading.MAX_LIST_LIMIT)}
            typed = reading.ListFolderArgs(**args)
            ctx = app.context()
            assert checked(await client.call_tool("list_folder", args))["count"] == min(entries,
                                                                                        reading.MAX_LIST_LIMIT)

            async def dispatch() -> None:
                checked(await app.call("list_folder", args))

            async def mcp_call() -> None:
                checked(await client.call_tool("list_folder", args))

            spec, listed = app.tools["list_folder"], reading.list_folder(ctx, typed)
            shaped = _shape(spec, typed, listed)
            line = wire_line(shaped)
            samples = await measure({
                "scandir+lstat+sort": lambda: scandir_baseline(big),
                "handler": lambda: reading.list_folder(ctx, typed),
                "shape": lambda: _shape(spec, typed, listed),
                "wire": lambda: wire_line(shaped),
                "client parse": lambda: jsonrpc_message_adapter.validate_json(line, by_name=False),
                "server dispatch": dispatch,
                "MCP client call": mcp_call,
            }, runs)
    medians = print_table(f"list_folder, {entries:,} entries, {runs} runs ({len(line):,}-byte reply)", samples,
                          "scandir+lstat+sort")
    server_ms = medians["server dispatch"] * 1000
    verdict("server-side < 50 ms", server_ms < 50, f"{server_ms:.1f} ms")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--entries", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=15)
    opts = parser.parse_args()
    anyio.run(main, opts.entries, opts.runs)
