"""SIGTERM, SIGINT and Ctrl-C stop the real server, with its commands killed and its spill directory removed
(issue 12 item 4, issue 13 item 3).

Before, a stdio server that had served one call ignored SIGTERM while its client kept stdin open (a
worker thread sat in a blocking read of stdin), and Ctrl-C likewise; over HTTP, uvicorn re-raised the
signal, so the process died by it before `App.close()` removed the spill directory.
"""

from __future__ import annotations

import os
import pty
import random
import select
import signal
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.live import MODERN, ROOTBOUND, call, clean_env, http_process, post_unread, raw_stdio, running, wait_until

BOUND = 5.0  # seconds from the signal to the exit; the default shutdown_grace is 10


def _tmpdir(tmp_path: Path) -> Path:
    """A TMPDIR of the server's own: the spill directory (and any command's temp) lives there, and must go."""
    path = tmp_path / "tmp"
    path.mkdir()
    return path


def _exit_within(exited: Callable[[], bool], seconds: float) -> None:
    assert wait_until(exited, seconds), f"still running {seconds} s after the signal"


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
@pytest.mark.parametrize("busy", [False, True], ids=["idle", "running-a-command"])
def test_a_signal_stops_a_stdio_server_whose_client_keeps_stdin_open(tmp_path: Path, sig: int, busy: bool) -> None:
    tmp = _tmpdir(tmp_path)
    (tmp_path / "ws").mkdir()
    marker = f"50.{random.randrange(10**6):06d}"
    with raw_stdio(["--root", f"ws={tmp_path / 'ws'}", "--allow-commands", "sleep"], tmp_path / "err.log",
                   clean_env(TMPDIR=str(tmp))) as server:
        server.initialize()
        server.send(call("list_roots", {}, 1))
        assert "result" in server.answer(1)  # it has served a call: its stdin reader is in place
        assert any(tmp.iterdir()), "no spill directory was made"
        if busy:
            server.send(call("execute_command", {"command": f"sleep {marker}", "root": "ws"}, 2))
            assert wait_until(lambda: running(marker), 30)
        server.proc.send_signal(sig)
        _exit_within(lambda: server.proc.poll() is not None, BOUND)
        if busy:  # the call in flight is answered, not left hanging
            assert server.answer(2)["error"]["message"] == "Connection closed"
        stderr = server.stderr()
    assert server.proc.returncode == (130 if sig == signal.SIGINT else 0), stderr
    assert "Traceback" not in stderr
    assert f'"msg": "stopped", "signal": "{signal.Signals(sig).name}"' in stderr
    assert not running(marker)
    assert list(tmp.iterdir()) == []


def test_ctrl_c_on_a_terminal_stops_the_stdio_server(tmp_path: Path) -> None:
    """Started by hand in a terminal, as the startup notice says: Ctrl-C stops it within 2 s."""
    tmp = _tmpdir(tmp_path)
    env = clean_env(TMPDIR=str(tmp))
    pid, master = pty.fork()
    if pid == 0:  # the child: a login-like terminal session running rootbound in the foreground
        try:
            os.execve(ROOTBOUND, [ROOTBOUND, "--root", f"ws={tmp_path}", "--allow-commands", "true"], env)
        finally:
            os._exit(127)
    seen = b""
    try:
        deadline = time.monotonic() + 60
        while b"press Ctrl-C to stop" not in seen and time.monotonic() < deadline:
            if select.select([master], [], [], 1)[0]:
                seen += os.read(master, 4096)
        assert b"press Ctrl-C to stop" in seen, seen
        assert any(tmp.iterdir()), "no spill directory was made"
        os.write(master, b"\x03")  # what the terminal sends for Ctrl-C: SIGINT to the foreground group
        status: list[int] = []

        def exited() -> bool:
            if not status:
                done, code = os.waitpid(pid, os.WNOHANG)
                if done:
                    status.append(code)
            return bool(status)

        _exit_within(exited, 2)
        with_output = select.select([master], [], [], 0.5)[0]
        while with_output:
            try:
                chunk = os.read(master, 4096)
            except OSError:  # EIO: the terminal's only process is gone
                break
            if not chunk:
                break
            seen += chunk
    finally:
        if not status:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        os.close(master)
    assert os.waitstatus_to_exitcode(status[0]) == 130, seen
    assert b"Traceback" not in seen and b"KeyboardInterrupt" not in seen
    assert list(tmp.iterdir()) == []


def test_sigterm_stops_the_http_server_cleanly(tmp_path: Path) -> None:
    """The process exits by itself (status 0, not killed by the signal), after cleaning up."""
    tmp = _tmpdir(tmp_path)
    marker = f"50.{random.randrange(10**6):06d}"
    with http_process(tmp_path, env=clean_env(TMPDIR=str(tmp)), shutdown_grace=1,
                      commands={"allowed": ["sleep"]}) as (base, proc, log):
        assert any(tmp.iterdir()), "no spill directory was made"
        body = call("execute_command", {"command": f"sleep {marker}", "root": "workspace"}, 1, modern=True)
        with post_unread(base, body, {"MCP-Protocol-Version": MODERN, "Mcp-Method": "tools/call",
                                      "Mcp-Name": "execute_command"}):
            assert wait_until(lambda: running(marker), 30)
            proc.send_signal(signal.SIGTERM)
            _exit_within(lambda: proc.poll() is not None, BOUND)
    assert proc.returncode == 0, log.read_text()
    assert "Traceback" not in log.read_text()
    assert not running(marker)
    assert list(tmp.iterdir()) == []
