"""The real `rootbound` process, driven byte for byte: raw JSON-RPC lines over stdio, the HTTP server, /proc."""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any

import httpx2
import yaml

ROOTBOUND = str(Path(sys.executable).with_name("rootbound"))
ENV_KEYS = ("ROOTBOUND_AUTH_TOKEN", "ALLOWED_COMMANDS", "ALLOWED_CWD_ROOTS", "ROOTBOUND_RESOLVER")
MODERN = "2026-07-28"
MODERN_META = {"io.modelcontextprotocol/protocolVersion": MODERN,
               "io.modelcontextprotocol/clientCapabilities": {},
               "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "0"}}
INITIALIZE = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
    "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}}


def clean_env(**extra: str) -> dict[str, str]:
    return {**{k: v for k, v in os.environ.items() if k not in ENV_KEYS}, **extra}


def running(needle: str) -> list[int]:
    """Pids of live processes whose command line contains `needle` as a whole argument."""
    pids = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                args = f.read().split(b"\0")
            with open(f"/proc/{pid}/stat", "rb") as f:
                state = f.read().rsplit(b")", 1)[1].split()[0]
        except OSError:
            continue
        if needle.encode() in args and state not in (b"Z", b"X"):
            pids.append(int(pid))
    return pids


def descendants(pid: int) -> list[int]:
    """Every process below `pid` (children first, then theirs)."""
    found: list[int] = []
    todo = [pid]
    while todo:
        here = todo.pop()
        try:
            with open(f"/proc/{here}/task/{here}/children") as f:
                kids = [int(k) for k in f.read().split()]
        except OSError:  # (gone meanwhile)
            continue
        found += kids
        todo += kids
    return found


def comm(pid: int) -> str:
    """A process's name ("" when it is gone)."""
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except (FileNotFoundError, ProcessLookupError):  # gone before the open, or between the open and the read
        return ""


def wait_until(predicate: Callable[[], object], seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def write_config(tmp_path: Path, **config: Any) -> Path:
    ws = tmp_path / "workspace"
    ws.mkdir(exist_ok=True)
    path = tmp_path / f"rootbound-{len(list(tmp_path.glob('rootbound-*.yaml')))}.yaml"
    path.write_text(yaml.safe_dump({"roots": [{"name": "workspace", "path": str(ws)}], **config}))
    return path


def call(tool: str, arguments: dict[str, Any], id: int, *, modern: bool = False) -> dict[str, Any]:
    params: dict[str, Any] = {"name": tool, "arguments": arguments}
    if modern:
        params["_meta"] = MODERN_META
    return {"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params}


def post_unread(base: str, body: dict[str, Any], headers: dict[str, str]) -> socket.socket:
    """Send one POST on a socket of its own and leave it open, unread, for the test to drop."""
    port = int(base.rsplit(":", 1)[1])
    data = json.dumps(body).encode()
    head = {"Host": f"127.0.0.1:{port}", "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream", "Content-Length": str(len(data)), **headers}
    sock = socket.create_connection(("127.0.0.1", port))
    sock.sendall(b"POST /mcp HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in head.items()).encode()
                 + b"\r\n" + data)
    return sock


class RawStdio:
    """`rootbound` over stdio with nothing in between: the test writes lines and reads lines."""

    def __init__(self, args: list[str], stderr: Path | int, env: dict[str, str] | None = None) -> None:
        """`stderr`: a file for the server's log, or a descriptor (a pipe's end the test reads, or does not)."""
        self.stderr_path = stderr if isinstance(stderr, Path) else None
        with open(stderr, "wb") if isinstance(stderr, Path) else nullcontext(stderr) as err:
            self.proc = subprocess.Popen([ROOTBOUND, *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         stderr=err, env=env or clean_env())
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.stdin, self.stdout = self.proc.stdin, self.proc.stdout
        self._pending = b""

    def send(self, message: dict[str, Any] | str | bytes) -> None:
        if isinstance(message, dict):
            message = json.dumps(message)
        data = message.encode() if isinstance(message, str) else message
        self.stdin.write(data + b"\n")
        self.stdin.flush()

    def recv(self, timeout: float = 30) -> dict[str, Any]:
        """The next message the server writes (AssertionError if none comes in time)."""
        deadline = time.monotonic() + timeout
        fd = self.stdout.fileno()
        while b"\n" not in self._pending:
            left = deadline - time.monotonic()
            assert left > 0 and select.select([fd], [], [], left)[0], "no answer from the server"
            chunk = os.read(fd, 1 << 20)
            assert chunk, "the server closed its output"
            self._pending += chunk
        line, self._pending = self._pending.split(b"\n", 1)
        value = json.loads(line)
        assert isinstance(value, dict), line
        return value

    def answer(self, id: Any, timeout: float = 30) -> dict[str, Any]:
        """The reply to request `id`, skipping notifications."""
        while True:
            message = self.recv(timeout)
            if "method" not in message:
                assert message.get("id") == id, f"expected the answer to {id!r}, got {message}"
                return message

    def initialize(self) -> None:
        self.send(INITIALIZE)
        assert "result" in self.answer(0)
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def stderr(self) -> str:
        assert self.stderr_path is not None, "the server's stderr is a descriptor of the test's"
        return self.stderr_path.read_text(errors="replace")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self.stdin.close()
        self.stdout.close()


@contextmanager
def raw_stdio(args: list[str], stderr: Path | int, env: dict[str, str] | None = None) -> Iterator[RawStdio]:
    server = RawStdio(args, stderr, env)
    try:
        yield server
    finally:
        server.stop()


# `rootbound serve --transport http` cannot be told to answer in JSON instead of SSE; this serves the same app so.
_JSON_RESPONSE_SERVER = """
import sys, uvicorn
from rootbound.config import load_config
from rootbound.logs import configure_logging
from rootbound.server import App
from rootbound.server.http import http_app
configure_logging()
app = App(load_config(sys.argv[1]))
try:
    uvicorn.run(http_app(app, json_response=True), host="127.0.0.1", port=app.config.port, log_config=None,
                log_level="warning")
finally:
    app.close()
"""


@contextmanager
def http_process(tmp_path: Path, *, json_response: bool = False, env: dict[str, str] | None = None,
                 **config: Any) -> Iterator[tuple[str, subprocess.Popen[bytes], Path]]:
    """The HTTP server on a free port: (base URL, process, stderr file). Stopped with SIGTERM, then killed."""
    port = free_port()
    cfg = write_config(tmp_path, port=port, **config)
    argv = ([sys.executable, "-c", _JSON_RESPONSE_SERVER, str(cfg)] if json_response
            else [ROOTBOUND, "serve", "--transport", "http", "--config", str(cfg)])
    err = tmp_path / f"http-{port}.log"
    with open(err, "wb") as errfile:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=errfile,
                                env=env or clean_env())
    base = f"http://127.0.0.1:{port}"
    try:
        def up() -> bool:
            assert proc.poll() is None, err.read_text()
            try:
                return httpx2.get(f"{base}/health", timeout=0.5).status_code == 200
            except httpx2.TransportError:
                return False

        assert wait_until(up, 60), "the HTTP server did not start"
        yield base, proc, err
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
