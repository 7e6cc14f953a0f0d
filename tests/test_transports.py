"""The real `rootbound` process over stdio and over Streamable HTTP."""

from __future__ import annotations

import json
import os
import pty
import select
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
import pytest
import yaml
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client

from tests.conftest import text_of

pytestmark = pytest.mark.anyio

ROOTBOUND = str(Path(sys.executable).with_name("rootbound"))
ENV_KEYS = ("ROOTBOUND_AUTH_TOKEN", "ALLOWED_COMMANDS", "ALLOWED_CWD_ROOTS", "ROOTBOUND_RESOLVER")


def clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in ENV_KEYS}


def json_lines(text: str) -> list[dict[str, Any]]:
    """Every non-empty line must be one JSON object."""
    lines = []
    for line in text.splitlines():
        if line.strip():
            value = json.loads(line)
            assert isinstance(value, dict), line
            lines.append(value)
    return lines


# -- stdio ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_stdio_process(tmp_path: Path, mode: str) -> None:
    """A tool call over the real process; stdout carries only JSON-RPC, the logs go to stderr."""
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "hello.txt").write_text("Hello over stdio\n")
    out_log, err_log = tmp_path / "stdout.log", tmp_path / "stderr.log"
    # `tee` keeps a copy of everything the server wrote on stdout, for the protocol-only check below.
    params = StdioServerParameters(
        command="/bin/sh",
        args=["-c", 'out="$1"; shift; "$@" | tee "$out"', "sh", str(out_log), ROOTBOUND, "--root", f"ws={ws}"],
        env=clean_env(),
    )
    with open(err_log, "w") as errlog:
        async with Client(stdio_client(params, errlog=errlog), mode=mode) as client:
            tools = {t.name for t in (await client.list_tools()).tools}
            assert {"list_roots", "read_file", "hash_file"} <= tools
            result = await client.call_tool("read_file", {"root": "ws", "path": "hello.txt"})
            assert not result.is_error, text_of(result)
            assert result.structured_content is not None
            assert result.structured_content["content"] == "Hello over stdio\n"
            denied = await client.call_tool("read_file", {"root": "ws", "path": "../x"})
            assert denied.is_error
            assert text_of(denied) == "path resolves outside root boundary"

    stdout = json_lines(out_log.read_text())
    assert stdout, "nothing was captured from the server's stdout"
    assert all(m.get("jsonrpc") == "2.0" for m in stdout), stdout
    assert "Hello over stdio" in out_log.read_text()

    logs = json_lines(err_log.read_text())
    starting = [line for line in logs if line["msg"] == "starting"]
    assert starting and starting[0]["roots"] == ["ws"] and starting[0]["transport"] == "stdio"
    assert str(ws) not in json.dumps(starting[0])  # root names only, never host paths (NFR-018)
    calls = [line for line in logs if line["msg"] == "tool call"]
    assert [(c["tool"], c["outcome"], c["level"]) for c in calls] == [
        ("read_file", "ok", "INFO"), ("read_file", "denied", "WARNING")]
    assert {"root", "path", "duration_ms", "response_bytes"} <= set(calls[0])
    assert calls[0]["response_bytes"] > 0


def test_stdio_on_a_terminal_says_what_it_serves(tmp_path: Path) -> None:
    """Started by hand, `serve` prints one line to stderr so the newcomer knows it is waiting."""
    master, slave = pty.openpty()
    proc = subprocess.Popen([ROOTBOUND, "--root", f"ws={tmp_path}"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=slave, env=clean_env())
    os.close(slave)
    seen = b""
    try:
        deadline = time.monotonic() + 30
        while b"over stdio" not in seen and time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 1)
            if ready:
                seen += os.read(master, 4096)
    finally:
        assert proc.stdin is not None
        proc.stdin.close()  # end of input: the server exits by itself
        proc.wait(timeout=30)
        os.close(master)
    assert b"serving root(s) ws over stdio" in seen
    assert proc.stdout is not None
    assert proc.stdout.read() == b""  # the notice never touches the protocol stream
    proc.stdout.close()
    assert proc.returncode == 0


# -- Streamable HTTP -----------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class HttpServer:
    base: str
    port: int
    workspace: Path
    stderr: Path


@pytest.fixture(scope="module")
def http_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HttpServer]:
    """`rootbound serve --transport http` from a config file (E2E-080), on a free loopback port."""
    tmp = tmp_path_factory.mktemp("http")
    ws = tmp / "ws"
    ws.mkdir()
    (ws / "hello.txt").write_text("Hello over HTTP\n")
    cfg = tmp / "rootbound.yaml"
    cfg.write_text(yaml.safe_dump({"roots": [{"name": "ws", "path": str(ws)}]}))
    port = free_port()
    err = tmp / "stderr.log"
    with open(err, "w") as errfile:
        proc = subprocess.Popen([ROOTBOUND, "serve", "--transport", "http", "--port", str(port), "--config", str(cfg)],
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=errfile, env=clean_env())
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            assert proc.poll() is None, err.read_text()
            try:
                httpx2.get(f"{base}/health", timeout=1)
                break
            except httpx2.TransportError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        yield HttpServer(base, port, ws, err)
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_health(http_server: HttpServer) -> None:
    """E2E-080, E2E-084."""
    response = httpx2.get(f"{http_server.base}/health")
    assert response.status_code == 200
    assert response.text == "ok"


def test_http_startup_log_names_address_and_roots(http_server: HttpServer) -> None:
    logs = json_lines(http_server.stderr.read_text())
    by_msg = {line["msg"]: line for line in logs}
    assert by_msg["starting"]["roots"] == ["ws"]
    assert by_msg["starting"]["transport"] == "http"
    assert by_msg["listening"]["address"] == f"{http_server.base}/mcp"
    assert str(http_server.workspace) not in json.dumps(by_msg["starting"])


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_tool_call_over_http(http_server: HttpServer, mode: str) -> None:
    async with Client(f"{http_server.base}/mcp", mode=mode) as client:
        result = await client.call_tool("read_file", {"root": "ws", "path": "hello.txt"})
        assert not result.is_error, text_of(result)
        assert result.structured_content is not None
        assert result.structured_content["content"] == "Hello over HTTP\n"
        roots = await client.call_tool("list_roots", {})
        assert roots.structured_content == {"roots": [{"name": "ws", "allowed_tools": [
            "list_folder", "read_file", "write_file", "remove_file", "patch_file", "edit_file", "create_folder",
            "remove_folder",
            "stat_file", "hash_file", "permissions_file", "copy", "move", "grep", "glob"]}], "default_root": "ws"}


def _initialize(http_server: HttpServer, **headers: str) -> httpx2.Response:
    body = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "probe", "version": "0"}}}
    return httpx2.post(f"{http_server.base}/mcp", json=body, timeout=10, headers={
        "Accept": "application/json, text/event-stream", **headers})


def test_dns_rebinding_is_refused(http_server: HttpServer) -> None:
    """A browser tricked into calling the server under another name (Host) or from a page (Origin) is refused."""
    assert _initialize(http_server).status_code == 200  # the control: a plain local client gets in
    assert _initialize(http_server, Host=f"evil.example:{http_server.port}").status_code == 421
    assert _initialize(http_server, Origin="http://evil.example").status_code == 403
    assert _initialize(http_server, Origin="null").status_code == 403
