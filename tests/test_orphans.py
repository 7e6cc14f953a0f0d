"""No daemon outlives its command: a double-forked, `setsid`, output-closed `sleep` started by a command is gone
within a second of the call's end — when the command exits, times out or is cancelled — under Landlock alone
and unconfined, where no PID namespace catches it (the server is a child subreaper)."""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import pytest
import yaml
from mcp import Client

from rootbound.config import load_config
from rootbound.server import App
from tests.conftest import MakeServer, text_of
from tests.test_commands_support import CommandServers, eventually, file_text

pytestmark = pytest.mark.anyio

SANDBOXES = ["landlock", "off"]


def daemon(tag: str) -> str:
    """A shell line that double-forks a daemon: a new session, output closed, environment kept."""
    return f"setsid sh -c 'exec >/dev/null 2>&1 </dev/null; exec sleep {tag}' &"


_tags: list[str] = []


def new_tag() -> str:
    tag = f"300.{secrets.randbelow(10**8):08d}"  # a `sleep` duration no other process has
    _tags.append(tag)
    return tag


@pytest.fixture(autouse=True)
def _no_sleeper_left() -> Iterator[None]:
    """Whatever a test asserts, the daemons it started do not outlive it (killed by pid)."""
    yield
    for tag in _tags:
        for pid in sleepers(tag):
            os.kill(pid, signal.SIGKILL)
    _tags.clear()


def sleepers(tag: str) -> list[int]:
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
            with open(f"/proc/{pid}/stat", "rb") as f:
                state = f.read().rsplit(b")", 1)[1].split()[0]
        except OSError:
            continue
        if argv[:2] == [b"sleep", tag.encode()] and state not in (b"Z", b"X"):
            found.append(int(pid))
    return found


async def started(tag: str) -> None:
    assert await eventually(lambda: sleepers(tag), 10), "the daemon never started"


@pytest.mark.parametrize("sandbox", SANDBOXES)
async def test_daemon_is_gone_when_its_command_exits(servers: CommandServers, sandbox: str) -> None:
    h = await servers({"allowed": "*", "sandbox": sandbox})
    tag = new_tag()
    got = await h.ok("shell", command=f"{daemon(tag)} sleep 0.3; echo started", root="workspace")
    assert got["stdout"] == "started\n"
    assert await eventually(lambda: not sleepers(tag), 1.0), f"daemon outlived its command ({sandbox})"


@pytest.mark.parametrize("sandbox", SANDBOXES)
async def test_daemon_is_gone_when_its_command_times_out(servers: CommandServers, sandbox: str) -> None:
    h = await servers({"allowed": "*", "sandbox": sandbox})
    tag = new_tag()
    result = await h.call("shell", command=f"{daemon(tag)} sleep 30", root="workspace", timeout=1)
    assert text_of(result).startswith("Command timed out after 1 seconds")
    assert await eventually(lambda: not sleepers(tag), 1.0), f"daemon outlived its command ({sandbox})"


@pytest.mark.parametrize("sandbox", SANDBOXES)
async def test_daemon_is_gone_when_its_call_is_cancelled(servers: CommandServers, tmp_path: Path,
                                                         sandbox: str) -> None:
    h = await servers({"allowed": "*", "sandbox": sandbox})
    tag = new_tag()
    with anyio.move_on_after(20) as scope:
        async with anyio.create_task_group() as tg:
            tg.start_soon(partial(h.call, "shell", command=f"{daemon(tag)} echo up > up; sleep 30", root="workspace"))
            await file_text(tmp_path / "workspace" / "up")
            await started(tag)
            tg.cancel_scope.cancel()
    assert not scope.cancelled_caught
    assert await eventually(lambda: not sleepers(tag), 1.0), f"daemon outlived its command ({sandbox})"


async def test_a_daemon_of_a_running_command_is_left_alone(servers: CommandServers, tmp_path: Path) -> None:
    """Strays are attributed to their command: one command ending does not stop another's daemon."""
    h = await servers({"allowed": "*", "sandbox": "landlock"})
    mine, theirs = new_tag(), new_tag()
    async with anyio.create_task_group() as tg:
        tg.start_soon(partial(h.call, "shell", command=f"{daemon(theirs)} echo up > up; sleep 3", root="workspace"))
        await file_text(tmp_path / "workspace" / "up")
        await started(theirs)
        await h.ok("shell", command=f"{daemon(mine)} sleep 0.3", root="workspace")
        assert await eventually(lambda: not sleepers(mine), 1.0)
        assert sleepers(theirs), "another command's daemon was stopped while that command still ran"
    assert await eventually(lambda: not sleepers(theirs), 1.0)


def _send(proc: subprocess.Popen[bytes], message: dict[str, object]) -> None:
    assert proc.stdin is not None
    proc.stdin.write(json.dumps(message).encode() + b"\n")
    proc.stdin.flush()


def _kill_server_mid_command(config: Path, tag: str) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ROOTBOUND_", "ALLOWED_"))}
    server = str(Path(sys.executable).with_name("rootbound"))
    proc = subprocess.Popen([server, "--config", str(config), "--log-level", "ERROR"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
    try:
        _send(proc, {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}})
        assert proc.stdout is not None and json.loads(proc.stdout.readline())["id"] == 1
        _send(proc, {"jsonrpc": "2.0", "method": "notifications/initialized"})
        _send(proc, {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "shell", "arguments": {
            "command": f"{daemon(tag)} exec sleep {tag}", "root": "ws"}}})
        deadline = time.monotonic() + 20
        while len(sleepers(tag)) < 2 and time.monotonic() < deadline:  # the daemon and the command itself
            time.sleep(0.02)
        assert len(sleepers(tag)) == 2, "the command never started its daemon"
    finally:
        proc.kill()
        proc.wait(10)


async def test_processes_of_a_sigkilled_server_are_stopped_by_its_next_start(
        make_server: MakeServer, tmp_path: Path) -> None:
    """Under Landlock alone nothing ends a command when the server is SIGKILLed (bubblewrap dies with it):
    the running command was recorded, and the next start stops it and its daemon."""
    ws = tmp_path / "ws"
    ws.mkdir()
    cfg = tmp_path / "server.yaml"
    cfg.write_text(yaml.safe_dump({"roots": [{"name": "ws", "path": str(ws)}], "state_dir": str(tmp_path / "state"),
                                   "commands": {"allowed": "*", "sandbox": "landlock"}}))
    tag = new_tag()
    await anyio.to_thread.run_sync(_kill_server_mid_command, cfg, tag)
    assert len(sleepers(tag)) == 2  # the server is gone, its command and the daemon are not
    await make_server({"ws": ws}, state_dir=str(tmp_path / "state"))
    assert await eventually(lambda: not sleepers(tag), 1.0)


async def test_closing_one_app_leaves_another_apps_commands_alone(servers: CommandServers, tmp_path: Path) -> None:
    """Each App owns the process groups of its commands: closing one (its shutdown kills what it runs) stops
    neither the command of another App in the same process nor that command's daemon."""
    h = await servers({"allowed": "*", "sandbox": "landlock"})
    other_root = tmp_path / "other"
    other_root.mkdir()
    cfg_file = tmp_path / "other.yaml"
    cfg_file.write_text(yaml.safe_dump({"roots": [{"name": "other", "path": str(other_root)}],
                                        "commands": {"allowed": "*", "sandbox": "landlock"}}))
    other = App(load_config(str(cfg_file), env={}))
    theirs, mine = new_tag(), new_tag()
    async with anyio.create_task_group() as tg:
        results: list[dict[str, Any]] = []

        async def long_call() -> None:
            results.append(await h.ok("shell", command=f"{daemon(theirs)} echo up > up; sleep 2; echo done",
                                      root="workspace"))

        tg.start_soon(long_call)
        await file_text(tmp_path / "workspace" / "up")
        await started(theirs)
        try:
            async with Client(other.server) as client:
                got = await client.call_tool("shell", {"command": f"{daemon(mine)} echo ok", "root": "other"})
                assert not got.is_error
        finally:
            other.close()
        assert await eventually(lambda: not sleepers(mine), 1.0), "the closed App's daemon outlived it"
        assert sleepers(theirs), "closing one App stopped the daemon of another App's running command"
    assert results[0]["exit_code"] == 0 and results[0]["stdout"] == "done\n", results
    assert await eventually(lambda: not sleepers(theirs), 1.0)
