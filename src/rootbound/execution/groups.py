"""Ending a command's processes: its whole process group, then any straggler that left the group.

Each command leads its own process group (`start_new_session`), so one `killpg`
reaches every child and grandchild that stayed in it. A process that called
`setsid` itself (a daemon) leaves the group; it still carries the command's
`ROOTBOUND_COMMAND_ID` in its environment, which `sweep` looks for. (A PID
namespace from the later sandbox closes the remaining gap: a daemon that also
scrubs its environment.)

Groups still running are remembered, so server shutdown and interpreter exit
can kill them (`kill_all`).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import time

import anyio

__all__ = ["KILL_GRACE", "kill_all", "live_members", "register", "sweep", "terminate_group", "unregister"]

KILL_GRACE = 1.0  # seconds between SIGTERM and SIGKILL
_POLL = 0.02
_LIVE: set[int] = set()


def register(pgid: int) -> None:
    _LIVE.add(pgid)


def unregister(pgid: int) -> None:
    _LIVE.discard(pgid)


def kill_all() -> None:
    """SIGKILL every command group still running (server shutdown, interpreter exit)."""
    for pgid in list(_LIVE):
        with contextlib.suppress(OSError):
            os.killpg(pgid, signal.SIGKILL)
    _LIVE.clear()


atexit.register(kill_all)


def _stat_fields(pid: str) -> tuple[str, int] | None:
    """(state, process group) of a process, from /proc/PID/stat (the name may contain spaces or parens)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    rest = data[data.rfind(b")") + 2:].split()
    return rest[0].decode(), int(rest[2])


def live_members(pgid: int) -> list[int]:
    """Processes of the group that are not zombies (a zombie holds nothing and dies with its reaper)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return []
    except PermissionError:
        pass
    members = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            fields = _stat_fields(pid)
            if fields is not None and fields[1] == pgid and fields[0] not in ("Z", "X"):
                members.append(int(pid))
    return members


def _signal(pgid: int, sig: int) -> bool:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        return False
    return True


async def terminate_group(pgid: int, grace: float = KILL_GRACE) -> None:
    """SIGTERM the group, give it `grace` seconds to exit, then SIGKILL whatever is left."""
    if not _signal(pgid, signal.SIGTERM):
        return
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        if not live_members(pgid):
            return
        await anyio.sleep(_POLL)
    _signal(pgid, signal.SIGKILL)


def sweep_ids(command_ids: list[str], marker_var: str = "ROOTBOUND_COMMAND_ID") -> int:
    """SIGKILL processes of ours whose environment carries one of these command ids; return how many."""
    return sum(sweep(marker_var, cid) for cid in command_ids)


def sweep(marker_var: str, command_id: str) -> int:
    """SIGKILL processes of ours whose environment carries this command's id; return how many."""
    needle = f"{marker_var}={command_id}".encode()
    me, uid, killed = os.getpid(), os.getuid(), 0
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == me:
            continue
        try:
            if os.stat(f"/proc/{pid}").st_uid != uid:
                continue
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = f.read()
        except OSError:
            continue
        if needle in env.split(b"\0"):
            with contextlib.suppress(OSError):
                os.kill(int(pid), signal.SIGKILL)
                killed += 1
    return killed
