"""A server that is not root, under bubblewrap: what most deployments run, end to end over stdio.

The rest of the suite runs the server in-process as root (CI runs as root); here the real `rootbound` process
runs as `nobody`, so the unprivileged paths are exercised: the command supervisor in a user namespace that maps
the server's user as uid 0 (each command mapped back to the server's uid in one of its own), and a bubblewrap per
command where the supervisor does not apply (a working directory outside the view).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
import yaml
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client

from rootbound.sandbox import bwrap, helper
from tests import live
from tests.conftest import text_of
from tests.live import ROOTBOUND, clean_env

NOBODY = 65534
AS_NOBODY = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]


def _works_as_nobody(*argv: str) -> bool:
    try:
        return subprocess.run([*AS_NOBODY, *argv], capture_output=True, cwd="/", timeout=60).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def _why_not() -> str | None:
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        return "needs root and util-linux's setpriv to start a server as nobody"
    if bwrap.BWRAP is None or helper.supervisor_bytes() is None:
        return "needs bubblewrap and a C compiler"
    if not _works_as_nobody(bwrap.BWRAP, "--unshare-user", "--ro-bind", "/", "/", "true"):
        return "bubblewrap does not work for an unprivileged user here (no unprivileged user namespaces)"
    if not _works_as_nobody(sys.executable, "-c", "import rootbound.cli"):
        return "this Python and rootbound cannot be run by nobody (a private install directory)"
    return None


WHY_NOT = _why_not()
pytestmark = [pytest.mark.anyio, pytest.mark.skipif(WHY_NOT is not None, reason=WHY_NOT or "")]


@pytest.fixture
def place() -> Iterator[Path]:
    """A folder nobody owns, under /tmp (pytest's own are private to root): `ws` (writable root, with a `.git`),
    `docs` (read-only root), and room for the config and the logs."""
    top = Path(tempfile.mkdtemp(prefix="rootbound-unprivileged-"))
    try:
        (top / "ws" / ".git" / "hooks").mkdir(parents=True)
        (top / "ws" / "a.txt").write_text("hello\n")
        (top / "docs").mkdir()
        (top / "docs" / "guide.md").write_text("read me\n")
        for path in [top, *top.rglob("*")]:
            os.chown(path, NOBODY, NOBODY)
        top.chmod(0o755)
        yield top
    finally:
        shutil.rmtree(top, ignore_errors=True) if not os.environ.get("KEEP") else None


def _params(place: Path, cwd: Path) -> StdioServerParameters:
    config = {"roots": [{"name": "ws", "path": str(place / "ws")},
                        {"name": "docs", "path": str(place / "docs"), "allowed_tools": ["read_file", "list_folder"]}],
              "commands": {"allowed": "*", "sandbox": "bwrap", "max_concurrent": 4}}
    (place / "rootbound.yaml").write_text(yaml.safe_dump(config))
    # (sh writes the server's PID, then becomes it: setpriv and Python exec in place)
    return StdioServerParameters(command="/bin/sh", args=["-c", 'echo $$ > "$0"; exec "$@"', str(place / "pid"),
                                                          *AS_NOBODY, ROOTBOUND, "--config",
                                                          str(place / "rootbound.yaml")],
                                 env={**clean_env(), "HOME": "/nonexistent"}, cwd=str(cwd))


async def _run(client: Client, command: str, **more: Any) -> dict[str, Any]:
    result = await client.call_tool("execute_command", {"command": command, "root": "ws", **more})
    assert not result.is_error and result.structured_content is not None, text_of(result)
    return result.structured_content


def _comms_below(pid: int) -> list[str]:
    return [live.comm(p) for p in live.descendants(pid)]


def _status(text: str) -> dict[str, str]:
    return dict(line.split(":\t", 1) for line in text.splitlines() if ":\t" in line)


async def test_an_unprivileged_servers_commands_run_in_its_supervisor_confined(place: Path) -> None:
    ws = place / "ws"
    with open(place / "stderr.log", "w") as errlog:
        async with Client(stdio_client(_params(place, ws), errlog=errlog)) as client:
            check = subprocess.run([*AS_NOBODY, ROOTBOUND, "check", "--config", str(place / "rootbound.yaml")],
                                   capture_output=True, text=True, cwd=str(ws), env=clean_env(), timeout=60)
            assert "commands start: by a command supervisor" in check.stdout, check.stdout + check.stderr
            server = int((place / "pid").read_text())
            seen: list[str] = []
            async with anyio.create_task_group() as tg:
                tg.start_soon(_run, client, "sleep 2")
                for _ in range(100):
                    await anyio.sleep(0.03)
                    seen = _comms_below(server)
                    if "sleep" in seen:
                        break
            assert ".rootbound-supe" in seen and seen.count("bwrap") <= 2, seen  # (bubblewrap: a parent and PID 1)

            # The server's user, no capability (the bounding set: the launcher's one at most), its own PID 1.
            got = await _run(client, "sh -c 'id -u; id -g; echo $$; grep -E \"^(Cap|NoNewPrivs)\" /proc/self/status'")
            lines = got["stdout"].splitlines()
            assert lines[:2] == [str(NOBODY), str(NOBODY)], got
            assert int(lines[2]) < 10, got  # a new PID namespace: the shell is one of its first processes
            status = _status("\n".join(lines[3:]))
            assert {status[k] for k in ("CapInh", "CapPrm", "CapEff", "CapAmb")} == {"0" * 16}, status
            assert status["CapBnd"] == "0" * 16, status  # (nothing to gain again by an exec either)
            assert status["NoNewPrivs"] == "1", status

            # Writes land in the writable root as the server's user; the read-only root and git's hooks stay so.
            got = await _run(client, "sh -c 'echo made > made.txt; touch .git/hooks/pre-commit; "
                                     f"touch {place / 'docs'}/x; ls -a /tmp'")
            assert (ws / "made.txt").read_text() == "made\n" and (ws / "made.txt").stat().st_uid == NOBODY, got
            assert not (ws / ".git" / "hooks" / "pre-commit").exists(), got
            assert not (place / "docs" / "x").exists(), got
            assert "Read-only file system" in got["stderr"], got

            # Two at once: neither sees the other's /tmp or processes.
            first, second = {}, {}

            async def one(into: dict[str, Any], name: str) -> None:
                script = f"echo {name} > /tmp/{name}; sleep 2 & sleep 0.5; ls /tmp; ps -e -o comm="
                into.update(await _run(client, f"sh -c '{script}'"))

            async with anyio.create_task_group() as tg:
                tg.start_soon(one, first, "first")
                tg.start_soon(one, second, "second")
            assert "first" in first["stdout"] and "second" not in first["stdout"], first
            assert "second" in second["stdout"] and "first" not in second["stdout"], second
            sleeps = [got["stdout"].split().count("sleep") for got in (first, second)]
            assert sleeps == [1, 1], (first, second)  # each its own, though both ran at once


async def test_a_timeout_ends_every_process_of_an_unprivileged_servers_command(place: Path) -> None:
    ws = place / "ws"
    with open(place / "stderr.log", "w") as errlog:
        async with Client(stdio_client(_params(place, ws), errlog=errlog)) as client:
            server = int((place / "pid").read_text())
            result = await client.call_tool("execute_command", {
                "command": "sh -c 'sleep 30 & sleep 31 & setsid sleep 32 & wait'", "root": "ws", "timeout": 1})
            assert result.structured_content is not None and result.structured_content["timed_out"] is True, \
                text_of(result)
            for _ in range(100):
                if not any(c == "sleep" for c in _comms_below(server)):
                    break
                await anyio.sleep(0.05)
            assert "sleep" not in _comms_below(server)
            assert (await _run(client, "echo still here"))["stdout"] == "still here\n"


async def test_outside_the_view_an_unprivileged_server_gives_each_command_a_bubblewrap(place: Path) -> None:
    """A working directory outside every root (the server's own) is not the supervisor's: a bubblewrap per
    command runs it, as confined."""
    with open(place / "stderr.log", "w") as errlog:
        async with Client(stdio_client(_params(place, place), errlog=errlog)) as client:
            server = int((place / "pid").read_text())
            seen: list[str] = []
            async with anyio.create_task_group() as tg:
                tg.start_soon(client.call_tool, "execute_command", {"command": "sleep 2"})
                for _ in range(100):
                    await anyio.sleep(0.03)
                    seen = _comms_below(server)
                    if "sleep" in seen:
                        break
            assert "sleep" in seen and ".rootbound-supe" not in seen, seen
            result = await client.call_tool("execute_command", {
                "command": f"sh -c 'id -u; touch {place}/ws/.git/hooks/x {place}/ws/ok'"})
            got = result.structured_content
            assert got is not None and got["stdout"].splitlines()[0] == str(NOBODY), got
            assert not (place / "ws" / ".git" / "hooks" / "x").exists(), got
            assert (place / "ws" / "ok").stat().st_uid == NOBODY, got  # (the root itself is writable)
