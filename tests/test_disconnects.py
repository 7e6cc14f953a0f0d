"""A client that drops its HTTP connection mid-command takes the command with it (issue 12, item 1).

Before, a handshake-era session's command ran on until its own timeout, holding its `max_concurrent`
slot: after 8 dropped clients, a new session's `echo hi` got no answer within 20 s.
"""

from __future__ import annotations

import json
import random
import socket
import struct
import time
from pathlib import Path

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from tests.conftest import text_of
from tests.live import INITIALIZE, MODERN, MODERN_META, http_process, post_unread, running, wait_until

pytestmark = pytest.mark.anyio

ACCEPT = "application/json, text/event-stream"


def _session(base: str) -> str:
    """A handshake-era session, initialized."""
    opened = httpx2.post(f"{base}/mcp", json=INITIALIZE, headers={"Accept": ACCEPT}, timeout=30)
    session = opened.headers["mcp-session-id"]
    done = httpx2.post(f"{base}/mcp", json={"jsonrpc": "2.0", "method": "notifications/initialized"},
                       headers={"Accept": ACCEPT, "mcp-session-id": session, "MCP-Protocol-Version": "2025-11-25"},
                       timeout=30)
    assert done.status_code == 202
    return session


def _start_command(base: str, era: str, command: str) -> socket.socket:
    arguments = {"command": command, "root": "workspace"}
    if era == "modern":
        body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                "params": {"name": "execute_command", "arguments": arguments, "_meta": MODERN_META}}
        return post_unread(base, body, {"MCP-Protocol-Version": MODERN, "Mcp-Method": "tools/call",
                                  "Mcp-Name": "execute_command"})
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": "execute_command", "arguments": arguments}}
    return post_unread(base, body, {"mcp-session-id": _session(base), "MCP-Protocol-Version": "2025-11-25"})


def _drop(sock: socket.socket, reset: bool) -> None:
    if reset:  # RST instead of FIN: the peer sees ECONNRESET
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


@pytest.mark.parametrize("json_response", [False, True], ids=["sse", "json"])
@pytest.mark.parametrize("era", ["handshake", "modern"])
async def test_dropped_clients_take_their_commands_with_them(tmp_path: Path, era: str, json_response: bool) -> None:
    marker = f"60.{random.randrange(10**6):06d}"  # a sleep nobody else runs, to find it in /proc
    with http_process(tmp_path, json_response=json_response,
                      commands={"allowed": ["sleep", "echo"], "max_concurrent": 8}) as (base, _, log):
        sockets = [_start_command(base, era, f"sleep {marker}") for _ in range(8)]
        try:
            assert wait_until(lambda: len([p for p in running(marker)]) >= 8, 60), "the 8 sleeps did not start"
            for i, sock in enumerate(sockets):
                _drop(sock, reset=i % 2 == 1)
            dropped = time.monotonic()
            assert wait_until(lambda: not running(marker), 2), \
                f"commands still running {time.monotonic() - dropped:.1f} s after their clients left"
        finally:
            for sock in sockets:
                sock.close()

        # Their slots are free again: a new client's command runs at once.
        with anyio.fail_after(10):
            async with httpx2.AsyncClient(timeout=30) as http, Client(
                    streamable_http_client(f"{base}/mcp", http_client=http),
                    mode="legacy" if era == "handshake" else "auto") as client:
                result = await client.call_tool("execute_command", {"command": "echo hi", "root": "workspace"})
        assert not result.is_error, text_of(result)
        assert result.structured_content is not None and result.structured_content["stdout"] == "hi\n"
    cancelled = [json.loads(line) for line in log.read_text().splitlines()
                 if '"tool call"' in line and '"cancelled"' in line]
    assert len(cancelled) == 8 and all(c["tool"] == "execute_command" for c in cancelled)
