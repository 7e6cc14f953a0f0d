"""Shared by the soak passes (bench/soak.py, bench/soak_faults.py): the score a pass returns, and the real
server process driven over stdio or HTTP.

A pass is `Callable[[argparse.Namespace], Score]`; `bench/soak.py` runs the passes asked for and prints
the scoreboard.
"""

from __future__ import annotations

import argparse
import json
import os
import select
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx2

__all__ = ["ROOTBOUND", "Pass", "RawStdio", "Score", "http_server", "process_stats", "workspace"]

ROOTBOUND = [sys.executable, "-m", "rootbound"]
MAX_NOTES = 12


@dataclass
class Score:
    """What one pass did: how many things it tried, how many went wrong, and what is worth reading."""

    attempts: int = 0
    failures: int = 0
    notes: list[str] = field(default_factory=list)

    def fail(self, what: str) -> None:
        self.failures += 1
        if self.failures <= MAX_NOTES:  # the first few, verbatim; the count says the rest
            self.notes.append(f"FAIL {what[:300]}")

    def note(self, text: str) -> None:
        self.notes.append(text)


Pass = Callable[[argparse.Namespace], Score]


@contextmanager
def workspace(files: int = 20) -> Iterator[Path]:
    """A temporary root with `files` small text files f0.txt … and a folder `sub`."""
    with tempfile.TemporaryDirectory(prefix="rootbound-soak-") as tmp:
        ws = Path(tmp) / "ws"
        (ws / "sub").mkdir(parents=True)
        for i in range(files):
            (ws / f"f{i}.txt").write_text(f"file {i}\n" + "line of text\n" * 20)
        yield ws


def process_stats(pid: int) -> tuple[float, int]:
    """(RSS in MiB, open file descriptors) of a live process."""
    with open(f"/proc/{pid}/status") as f:
        rss = next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))
    return rss / 1024, len(os.listdir(f"/proc/{pid}/fd"))


class RawStdio:
    """`rootbound` over stdio, line by line, with no client library in between (so nothing is tidied up)."""

    def __init__(self, args: list[str], stderr: Path) -> None:
        self.stderr_path = stderr
        with open(stderr, "wb") as err:
            self.proc = subprocess.Popen([*ROOTBOUND, *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         stderr=err)
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self._in, self._out = self.proc.stdin, self.proc.stdout.fileno()
        self._pending = b""

    def send(self, line: bytes | dict[str, Any]) -> None:
        data = json.dumps(line).encode() if isinstance(line, dict) else line
        self._in.write(data + b"\n")
        self._in.flush()

    def recv(self, timeout: float) -> dict[str, Any] | None:
        """The next message, or None if none came in time (or the server closed its output)."""
        deadline = time.monotonic() + timeout
        while b"\n" not in self._pending:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._out], [], [], left)[0]:
                return None
            chunk = os.read(self._out, 1 << 20)
            if not chunk:
                return None
            self._pending += chunk
        line, self._pending = self._pending.split(b"\n", 1)
        try:
            value = json.loads(line)
        except ValueError:
            return {"unparseable_output": line[:200].decode(errors="replace")}
        return value if isinstance(value, dict) else {"non_object_output": value}

    def request(self, message: dict[str, Any], timeout: float = 30) -> dict[str, Any] | None:
        """Send a request and return its answer (notifications in between are skipped)."""
        self.send(message)
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            reply = self.recv(left)
            if reply is None:
                return None
            if "method" not in reply and reply.get("id") == message["id"]:
                return reply
        return None

    def initialize(self) -> None:
        reply = self.request({"jsonrpc": "2.0", "id": "init", "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "soak", "version": "0"}}})
        assert reply is not None and "result" in reply, reply
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def close(self) -> int:
        self._in.close()
        try:
            return self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()
        finally:
            self.proc.stdout.close()  # type: ignore[union-attr]


@contextmanager
def http_server(args: list[str], stderr: Path) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """`rootbound serve --transport http ARGS` on a free loopback port: (base URL, process); SIGTERM at the end."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with open(stderr, "wb") as err:
        proc = subprocess.Popen([*ROOTBOUND, "serve", "--transport", "http", "--port", str(port), *args],
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx2.get(f"{base}/health", timeout=1).status_code == 200:
                    break
            except httpx2.TransportError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the HTTP server did not start: {stderr.read_text()[-2000:]}")
            time.sleep(0.05)
        yield base, proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
