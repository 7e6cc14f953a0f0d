"""Streamable HTTP as it would be exposed: per-session roots, bearer token, Host/Origin checks, concurrency.

Each test runs the real `rootbound serve --transport http` process on a free loopback port.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
import yaml
from mcp import Client
from mcp.client import ClientRequestContext
from mcp.client.streamable_http import streamable_http_client
from mcp.types import ListRootsResult, Root

from tests.conftest import RootsClient
from tests.live import running

pytestmark = pytest.mark.anyio

TOKEN = "s3cret-token-for-tests"
INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                   "clientInfo": {"name": "probe", "version": "0"}}}
MCP_HEADERS = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Served(str):
    """The server's base URL, with its process (to signal it)."""

    proc: subprocess.Popen[bytes]


@contextmanager
def http_server(tmp_path: Path, **config: Any) -> Iterator[Served]:
    port = free_port()
    cfg = {"port": port, "roots": [{"name": "workspace", "path": str(tmp_path / "workspace")}], **config}
    (tmp_path / "workspace").mkdir(exist_ok=True)
    path = tmp_path / f"http-{port}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    env = {k: v for k, v in os.environ.items() if k != "ROOTBOUND_AUTH_TOKEN"}
    log = (tmp_path / f"http-{port}.log").open("wb")
    proc = subprocess.Popen([sys.executable, "-m", "rootbound", "serve", "--transport", "http", "--config",
                             str(path)], stdout=subprocess.DEVNULL, stderr=log, env=env)
    base = Served(f"http://127.0.0.1:{port}")
    base.proc = proc
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx2.get(f"{base}/health", timeout=0.5).status_code == 200:
                    break
            except httpx2.TransportError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"server did not start: {(tmp_path / f'http-{port}.log').read_text()}")
            time.sleep(0.05)
        yield base
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        finally:
            if proc.poll() is None:
                proc.kill()
            log.close()


@asynccontextmanager
async def mcp_client(base: str, token: str | None = None, **kwargs: Any) -> AsyncIterator[Client]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with httpx2.AsyncClient(headers=headers, timeout=30) as http, \
            Client(streamable_http_client(f"{base}/mcp", http_client=http), **kwargs) as client:
        yield client


async def test_health_and_a_tool_call(tmp_path: Path) -> None:
    (tmp_path / "workspace").mkdir()
    (tmp_path / "workspace" / "a.txt").write_text("over http\n")
    with http_server(tmp_path) as base:
        r = httpx2.get(f"{base}/health")
        assert (r.status_code, r.text) == (200, "ok")
        async with mcp_client(base) as c:
            got = await c.call_tool("read_file", {"root": "workspace", "path": "a.txt"})
            assert got.structured_content and got.structured_content["content"] == "over http\n"


async def test_two_sessions_never_see_each_others_roots(tmp_path: Path) -> None:
    ws = tmp_path / "workspace"
    for name in ("alpha", "beta"):
        (ws / name).mkdir(parents=True)
        (ws / name / "who.txt").write_text(name)
    with http_server(tmp_path) as base:
        async with mcp_client(base, mode="legacy", list_roots_callback=RootsClient(f"file://{ws}/alpha").list_roots
                              ) as a, \
                mcp_client(base, mode="legacy", list_roots_callback=RootsClient(f"file://{ws}/beta").list_roots
                           ) as b:
            for client, mine, theirs in ((a, "alpha", "beta"), (b, "beta", "alpha"), (a, "alpha", "beta")):
                listed = (await client.call_tool("list_roots", {})).structured_content
                assert listed is not None
                assert [r["name"] for r in listed["roots"]] == [mine]
                denied = await client.call_tool("read_file", {"root": theirs, "path": "who.txt"})
                assert denied.is_error


async def test_a_client_that_declares_roots_but_answers_late_or_never_does_not_slow_the_first_call(
        tmp_path: Path) -> None:
    """Inspector 2.12 declares `roots` and never answers: the first call waited 9.2 s. Now it waits at most
    ~0.3 s and runs with the operator's roots; a late answer is picked up when it arrives."""
    ws = tmp_path / "workspace"
    (ws / "proj").mkdir(parents=True)
    late = anyio.Event()

    async def never(context: ClientRequestContext) -> ListRootsResult:
        await anyio.sleep(3600)
        raise AssertionError("unreachable")

    async def after_two_seconds(context: ClientRequestContext) -> ListRootsResult:
        await anyio.sleep(2)
        late.set()
        return ListRootsResult(roots=[Root(uri=f"file://{ws}/proj")])

    with http_server(tmp_path) as base:
        for callback in (never, after_two_seconds):
            async with mcp_client(base, mode="legacy", list_roots_callback=callback) as c:
                started = time.monotonic()
                listed = (await c.call_tool("list_roots", {})).structured_content
                assert time.monotonic() - started < 1.0
                assert listed is not None and [r["name"] for r in listed["roots"]] == ["workspace"]
                if callback is after_two_seconds:
                    with anyio.fail_after(10):
                        await late.wait()
                        while [r["name"] for r in (await c.call_tool("list_roots", {})).structured_content[
                                "roots"]] != ["proj"]:  # type: ignore[index]
                            await anyio.sleep(0.05)


async def test_bearer_token_is_required_but_health_stays_open(tmp_path: Path) -> None:
    with http_server(tmp_path, auth_token=TOKEN) as base:
        assert httpx2.get(f"{base}/health").status_code == 200
        assert httpx2.post(f"{base}/mcp", json=INIT, headers=MCP_HEADERS).status_code == 401
        wrong = {**MCP_HEADERS, "Authorization": "Bearer nope"}
        assert httpx2.post(f"{base}/mcp", json=INIT, headers=wrong).status_code == 401
        async with mcp_client(base, token=TOKEN) as c:
            listed = (await c.call_tool("list_roots", {})).structured_content
            assert listed is not None and listed["roots"][0]["name"] == "workspace"


async def test_foreign_origin_and_host_are_refused_even_on_a_wildcard_bind(tmp_path: Path) -> None:
    # Bound to 0.0.0.0, where the SDK alone would switch these checks off.
    with http_server(tmp_path, host="0.0.0.0") as base:
        evil_origin = {**MCP_HEADERS, "Origin": "http://evil.example"}
        assert httpx2.post(f"{base}/mcp", json=INIT, headers=evil_origin).status_code == 403
        evil_host = {**MCP_HEADERS, "Host": "evil.example"}
        assert httpx2.post(f"{base}/mcp", json=INIT, headers=evil_host).status_code in (403, 421)
        local_origin = {**MCP_HEADERS, "Origin": "http://localhost:3000"}
        assert httpx2.post(f"{base}/mcp", json=INIT, headers=local_origin).status_code == 200
    logged = next(tmp_path.glob("http-*.log")).read_text()
    assert "WITHOUT an auth token" in logged  # a wildcard bind with no token is announced loudly


HOST_CASES = [
    # Behind a TLS proxy clients send the name without the default port; direct clients send a port.
    ("mcp.example.com", 200), ("mcp.example.com:443", 200), ("mcp.example.com:8443", 200),  # "name:*"
    ("bare.example.com", 200), ("bare.example.com:443", 200), ("BARE.Example.com:443", 200),  # "name"
    ("tls.example.com", 200), ("tls.example.com:443", 200), ("tls.example.com:8443", 421),  # "name:443"
    ("[2001:db8::1]", 200), ("[2001:db8::1]:443", 200), ("[2001:db8::2]:443", 421),  # "[v6]" and "v6"
    ("[2001:db8::3]", 200), ("[2001:db8::3]:8091", 200),
    ("localhost", 200), ("127.0.0.1", 200),  # a local proxy forwarding a port-less Host
    ("evil.example.com", 421), ("mcp.example.com.evil.example", 421), ("mcp.example.comx:443", 421),
]


async def test_allowed_hosts_match_with_and_without_a_port(tmp_path: Path) -> None:
    with http_server(tmp_path, allowed_hosts=["mcp.example.com:*", "bare.example.com", "tls.example.com:443",
                                              "[2001:db8::1]", "2001:db8::3"]) as base:
        got = [(host, httpx2.post(f"{base}/mcp", json=INIT, headers={**MCP_HEADERS, "Host": host}).status_code)
               for host, _ in HOST_CASES]
    assert got == HOST_CASES


async def test_allowed_origins_match_with_and_without_a_port(tmp_path: Path) -> None:
    origins = ["https://app.example.com:*", "https://tls.example.com:443", "https://exact.example.com"]
    with http_server(tmp_path, allowed_hosts=["mcp.example.com"], allowed_origins=origins) as base:
        for origin, status in (("https://app.example.com", 200), ("https://app.example.com:8443", 200),
                               ("https://tls.example.com", 200), ("https://tls.example.com:8443", 403),
                               ("https://exact.example.com", 200), ("https://exact.example.com:8443", 403),
                               ("https://evil.example.com", 403), ("http://localhost", 200)):
            headers = {**MCP_HEADERS, "Host": "mcp.example.com", "Origin": origin}
            r = httpx2.post(f"{base}/mcp", json=INIT, headers=headers)
            assert r.status_code == status, (origin, r.status_code, r.text)


def test_a_port_in_use_is_one_line_naming_the_flag(tmp_path: Path) -> None:
    """It used to log `listening`, then `[Errno 98] address already in use` and exit 3 with no hint."""
    (tmp_path / "workspace").mkdir()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        got = subprocess.run([sys.executable, "-m", "rootbound", "serve", "--transport", "http", "--port", str(port),
                              "--root", str(tmp_path / "workspace")], capture_output=True, text=True, timeout=60,
                             stdin=subprocess.DEVNULL)
    assert got.returncode == 1, got.stderr
    last = got.stderr.strip().splitlines()[-1]
    assert last == (f"rootbound: cannot listen on 127.0.0.1:{port}: the port is already in use (another "
                    "rootbound?); choose another with --port N (config key: port) or stop what is using it")
    assert '"listening"' not in got.stderr and "Traceback" not in got.stderr and got.stdout == ""


async def test_a_refused_request_gets_no_session_id(tmp_path: Path) -> None:
    """The SDK minted a session for each request without one and named it in the error response."""
    tools_list = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
    accept = {"Accept": MCP_HEADERS["Accept"]}
    with http_server(tmp_path) as base:
        refused = [
            httpx2.post(f"{base}/mcp", content=b"{}", headers={"Content-Type": "application/json"}),  # no Accept
            httpx2.post(f"{base}/mcp", content=b"{not json", headers=MCP_HEADERS),
            httpx2.post(f"{base}/mcp", json=tools_list, headers=MCP_HEADERS),  # not initialize, no session
            httpx2.get(f"{base}/mcp", headers=accept),
            httpx2.delete(f"{base}/mcp", headers=accept),
            httpx2.put(f"{base}/mcp", headers=accept),
        ]
        assert [r.status_code >= 400 for r in refused] == [True] * len(refused)
        assert [r.headers.get("mcp-session-id") for r in refused] == [None] * len(refused)
        opened = httpx2.post(f"{base}/mcp", json=INIT, headers=MCP_HEADERS)
        session = opened.headers.get("mcp-session-id")
        assert opened.status_code == 200 and session
        # Within a session the id is the client's own: errors there still carry it.
        again = httpx2.post(f"{base}/mcp", content=b"{not json", headers={**MCP_HEADERS, "mcp-session-id": session})
        assert again.status_code == 400 and again.headers.get("mcp-session-id") == session


async def test_oversized_request_body_is_refused(tmp_path: Path) -> None:
    with http_server(tmp_path, max_request_body_size=64 * 1024) as base:
        big = {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
               "params": {"name": "list_roots", "arguments": {"pad": "x" * 100_000}}}
        r = httpx2.post(f"{base}/mcp", content=json.dumps(big), headers=MCP_HEADERS)
        assert r.status_code == 413


async def test_fifty_concurrent_calls_over_fifty_sessions_and_on_one(tmp_path: Path) -> None:
    ws = tmp_path / "workspace"
    ws.mkdir()
    for i in range(50):
        (ws / f"f{i}.txt").write_text(f"file {i}\n")
    with http_server(tmp_path) as base:
        failures: list[str] = []

        async def read(c: Client, i: int) -> None:
            r = await c.call_tool("read_file", {"root": "workspace", "path": f"f{i}.txt"})
            if r.is_error or not r.structured_content or r.structured_content["content"] != f"file {i}\n":
                failures.append(f"call {i}")

        async def own_session(i: int) -> None:
            async with mcp_client(base) as c:
                await read(c, i)

        async with mcp_client(base) as shared:
            for run in (own_session, lambda i: read(shared, i)):  # 50 sessions, then 50 calls on one session
                with anyio.fail_after(60):
                    async with anyio.create_task_group() as tg:
                        for i in range(50):
                            tg.start_soon(run, i)
                assert failures == []


async def test_sigterm_lets_the_server_stop_and_kills_running_commands(tmp_path: Path) -> None:
    marker = f"31.{os.getpid()}"  # a sleep nobody else runs (not a run beside this one), to find it by
    with http_server(tmp_path, commands={"allowed": ["sleep"]}, shutdown_grace=1) as base:

        async def call() -> None:
            with contextlib.suppress(Exception):  # the server goes away mid-call
                async with mcp_client(base) as c:
                    await c.call_tool("execute_command", {"command": f"sleep {marker}", "root": "workspace"})

        async with anyio.create_task_group() as tg:
            tg.start_soon(call)
            with anyio.fail_after(20):
                while not running(marker):
                    await anyio.sleep(0.05)
            base.proc.send_signal(signal.SIGTERM)
            with anyio.fail_after(30):
                while base.proc.poll() is None:
                    await anyio.sleep(0.05)
    with anyio.fail_after(10):
        while running(marker):
            await anyio.sleep(0.05)


# -- command output belongs to the connection that produced it ---------------------------------------------------

async def _spill_secret(client: Client, secret: str) -> dict[str, Any]:
    """Run a command whose output is cut, so its whole output (with `secret`) lands in a spill file."""
    got = await client.call_tool("shell", {"command": f"echo {secret}; seq 1 3000", "root": "workspace"})
    assert not got.is_error and got.structured_content, got
    [spill] = got.structured_content["output_files"]
    return dict(spill)


async def _can_see(client: Client, spill: dict[str, Any], secret: str) -> bool:
    """Whether `client` can reach the spill: by listing its root, or by naming the file outright."""
    listed = await client.call_tool("list_folder", {"root": spill["root"], "path": "."})
    names = [e["name"] for e in (listed.structured_content or {}).get("entries", [])]
    read = await client.call_tool("read_file", {"root": spill["root"], "path": spill["path"],
                                                "offset_bytes": 0, "limit_bytes": 200})
    grep = await client.call_tool("grep", {"root": spill["root"], "pattern": secret})
    found = (grep.structured_content or {}).get("matches", [])
    if read.is_error:
        assert "file not found" in "".join(c.text for c in read.content if c.type == "text")
    return spill["path"] in names or not read.is_error or bool(found)


async def test_spilled_output_is_visible_only_to_the_session_that_made_it(tmp_path: Path) -> None:
    commands = {"allowed": ["echo", "seq"], "max_output_size": 1024}
    with http_server(tmp_path, commands=commands) as base:
        async with mcp_client(base, mode="legacy") as a, mcp_client(base, mode="legacy") as b, \
                mcp_client(base) as sessionless:
            spill_a = await _spill_secret(a, "db_password=hunter2")
            assert await _can_see(a, spill_a, "hunter2")
            assert not await _can_see(b, spill_a, "hunter2")
            assert not await _can_see(sessionless, spill_a, "hunter2")
            # Sessionless requests have no session: they share the spills of their principal (here, with no
            # auth token, the one anonymous principal) and see no session's.
            spill_s = await _spill_secret(sessionless, "api_key=swordfish")
            assert await _can_see(sessionless, spill_s, "swordfish")
            assert not await _can_see(a, spill_s, "swordfish")
            assert not await _can_see(b, spill_s, "swordfish")
            spill_b = await _spill_secret(b, "b_secret=tuna")
            assert not await _can_see(a, spill_b, "tuna")
            assert await _can_see(b, spill_b, "tuna")
            assert await _can_see(a, spill_a, "hunter2")
