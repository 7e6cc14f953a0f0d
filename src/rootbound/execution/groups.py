"""Ending a command's processes: its whole process group, then any straggler that left the group.

Each command leads its own process group (`start_new_session`), so one `killpg`
reaches every child and grandchild that stayed in it. A process that called
`setsid` itself (a daemon) leaves the group. To find those, the server makes itself
a *child subreaper* (`PR_SET_CHILD_SUBREAPER`): a daemon whose parent exits is
re-parented to the server instead of init, so the server's own children are the
only place to look (`/proc/self/task/*/children`, well under a millisecond). Each
one carries its command's `ROOTBOUND_COMMAND_ID` in its environment: when a
command ends, its strays (and strays of commands no longer running) are killed,
round after round (killing one re-parents its own children to us), and reaped —
only strays, never a command's leader, whose exit status its own watcher waits
for (and not while a command is being spawned, when a fresh leader is not yet
registered). A stray that scrubbed its environment is not recognised; under
bubblewrap the PID namespace ends it anyway. Without the subreaper (prctl
refused), `sweep` scans all of /proc for the id instead.

Groups still running are remembered by the App that runs them (`ProcessGroups`), so
its close and interpreter exit can kill them (`kill_all`).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import time
import weakref
from collections.abc import Iterator

import anyio

from rootbound.execution.environment import COMMAND_ID_VAR
from rootbound.libc import libc

__all__ = ["KILL_GRACE", "ProcessGroups", "become_subreaper", "is_subreaper", "live_members", "sweep", "sweep_ids",
           "terminate_group"]

KILL_GRACE = 1.0  # seconds between SIGTERM and SIGKILL
_POLL = 0.02
_ROUNDS = 50  # rounds of stray killing per command end (each re-parents the next generation to us)
_PR_SET_CHILD_SUBREAPER = 36
_subreaper = False


class ProcessGroups:
    """The command groups of one App: the leaders it is running, the ids of its commands, its spawns under way.

    The App owns one and kills what is left in it when it closes. Strays, though, are children of the *process*
    (the subreaper is process-wide), so a stray round consults every App's registry (`_REGISTRIES`): it never
    takes another App's leader for a stray, nor kills the strays of a command another App is still running.
    """

    def __init__(self) -> None:
        self._live: set[int] = set()  # leaders (= process groups) whose status a watcher of theirs will collect
        self._unreaped: set[int] = set()  # leaders no longer running as commands, not yet collected by watchers
        self._running: set[str] = set()  # ids of the commands running now
        self._spawning = 0  # spawns under way: a leader not yet registered may exist
        _REGISTRIES.add(self)

    def register(self, pgid: int) -> None:
        self._live.add(pgid)

    def unregister(self, pgid: int, *, reaped: bool = True) -> None:
        """The command is over; `reaped=False` when its leader's watcher has yet to collect it (keep off it)."""
        self._live.discard(pgid)
        if not reaped:
            self._unreaped.add(pgid)

    @contextlib.contextmanager
    def running(self, command_id: str) -> Iterator[None]:
        """While the block runs, processes carrying this command id are not leftovers of a finished command."""
        self._running.add(command_id)
        try:
            yield
        finally:
            self._running.discard(command_id)

    @contextlib.contextmanager
    def spawning(self) -> Iterator[None]:
        """Around a spawn and the leader's `register`: meanwhile no dead stray is reaped (it could be the new
        leader)."""
        self._spawning += 1
        try:
            yield
        finally:
            self._spawning -= 1

    def kill_all(self) -> None:
        """SIGKILL every command group of this App still running, and the strays of its commands and of finished
        ones (App close, interpreter exit)."""
        for pgid in list(self._live):
            with contextlib.suppress(OSError):
                os.killpg(pgid, signal.SIGKILL)
        self._live.clear()
        if _subreaper:
            for _ in range(_ROUNDS):
                if not any(self._stray_round(None)):
                    break
                time.sleep(0.005)

    async def stop_strays(self, command_id: str) -> int:
        """Kill and reap every stray of this command (and leftovers of finished ones); return how many rounds
        acted.

        Runs on the event loop's thread, between awaits, so no spawn can start inside a round."""
        if not _subreaper:
            return 0
        rounds = 0
        for _ in range(_ROUNDS):
            killed, reaped = self._stray_round(command_id)
            if not (killed or reaped):
                break
            rounds += 1
            # A round that only reaped zombies (bubblewrap's own sandbox init, every time) ends it: their children
            # were re-parented to us when they died, before this round listed ours, so it saw them already.
            if not killed:
                break
            await anyio.sleep(0.005)  # SIGKILLed processes die and re-parent their children meanwhile
        return rounds

    def _stray_round(self, command_id: str | None) -> tuple[int, int]:
        """One pass over our children: kill the strays of `command_id` (None: of every command of this App) and of
        commands no longer running anywhere, and reap strays that are dead. Returns how many were killed and how
        many reaped."""
        mine = os.getsid(0)
        killed = reaped = 0
        for pid in list(self._unreaped):
            if not os.path.exists(f"/proc/{pid}"):
                self._unreaped.discard(pid)  # collected by its watcher
        registries = list(_REGISTRIES)
        leaders = set().union(*(r._live | r._unreaped for r in registries))
        running = set().union(*(r._running for r in registries))
        spawning = any(r._spawning for r in registries)
        for pid in _children():
            if pid in leaders:
                continue  # a command's leader: its own watcher reaps it
            fields = _stat_all(str(pid))
            if fields is None or fields[3] == mine:
                continue  # gone, or in our own session: a helper the server started itself (grep's), not a command's
            if fields[0] in ("Z", "X"):
                if not spawning:  # else it might be a leader that exited before it was registered
                    _reap(pid)
                    reaped += 1
                continue
            owner = _command_id(pid)
            if owner and (owner == command_id or owner not in running
                          or (command_id is None and owner in self._running)):
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
                    killed += 1
        return killed, reaped


# Every App's registry, for the stray rounds and interpreter exit: an index, not state (each App owns its own).
_REGISTRIES: weakref.WeakSet[ProcessGroups] = weakref.WeakSet()


def become_subreaper() -> bool:
    """Make this process the reaper of its orphaned descendants (Linux >= 3.4); True if it is."""
    global _subreaper
    if not _subreaper:
        _subreaper = libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    return _subreaper


def is_subreaper() -> bool:
    return _subreaper


@atexit.register
def _kill_everything() -> None:
    """No command outlives the interpreter, whichever App started it."""
    for registry in list(_REGISTRIES):
        registry.kill_all()


def _stat_fields(pid: str) -> tuple[str, int] | None:
    """(state, process group) of a process."""
    fields = _stat_all(pid)
    return None if fields is None else (fields[0], fields[2])


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


# -- strays: descendants re-parented to us ---------------------------------------------------------


def _children() -> list[int]:
    """This process's children (of every thread: an orphan is re-parented to one of them)."""
    pids: list[int] = []
    tasks = os.listdir("/proc/self/task")
    if os.path.exists(f"/proc/self/task/{tasks[0]}/children"):
        for task in tasks:
            with contextlib.suppress(OSError), open(f"/proc/self/task/{task}/children", "rb") as f:
                pids.extend(int(p) for p in f.read().split())
        return pids
    me = os.getpid()  # kernels without CONFIG_PROC_CHILDREN: look at every process's parent
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            fields = _stat_all(pid)
            if fields is not None and fields[1] == me:
                pids.append(int(pid))
    return pids


def _stat_all(pid: str) -> tuple[str, int, int, int] | None:
    """(state, parent, process group, session) of a process."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    rest = data[data.rfind(b")") + 2:].split()
    return rest[0].decode(), int(rest[1]), int(rest[2]), int(rest[3])


def _command_id(pid: int) -> str | None:
    """The command id in a process's environment; "" when it has none; None when it cannot be read."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            env = f.read()
    except OSError:
        return None
    prefix = COMMAND_ID_VAR.encode() + b"="
    for item in env.split(b"\0"):
        if item.startswith(prefix):
            return item[len(prefix):].decode(errors="replace")
    return ""


def _reap(pid: int) -> None:
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


def sweep_ids(command_ids: list[str], marker_var: str = COMMAND_ID_VAR) -> int:
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
