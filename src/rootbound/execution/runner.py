"""Run one program to completion under the rules: own process group, no stdin, bounded output, bounded time.

* stdin is /dev/null, so an interactive program reads EOF instead of waiting forever;
* stdout and stderr are read concurrently into `Capture`s (head + tail + spill);
* on timeout the whole group gets SIGTERM, then SIGKILL after a short grace;
* when the program has exited but something it started still holds a pipe open
  (a daemonized grandchild), the drain is bounded: the group is killed;
* whatever way the call ends (normal exit, timeout, the client's cancellation,
  server shutdown), nothing of the command's process group outlives it, and
  stragglers that left the group (daemons, re-parented to the server as their
  subreaper) are found by their command id and killed too (`groups`);
* the command is recorded as running (`recovery`), so if the server itself is
  SIGKILLed, its next start stops what the command left.
"""

from __future__ import annotations

import asyncio
import errno
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass

import anyio
import anyio.to_thread

from rootbound.execution import groups, inline
from rootbound.execution.environment import COMMAND_ID_VAR
from rootbound.execution.launch import Child, Launch, PopenChild, popen
from rootbound.execution.output import Capture, StreamResult
from rootbound.execution.progress import ProgressFeed
from rootbound.execution.spill import SpillFile
from rootbound.fs import recovery

__all__ = ["DRAIN_SECONDS", "RunResult", "SpawnError", "run"]

DRAIN_SECONDS = 1.0  # how long output may stay open after the program exited
_READ_SIZE = 1 << 20


class SpawnError(Exception):
    """The program could not be started (not found, not executable, bad format)."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.errno = code
        self.message = message


@dataclass
class RunResult:
    exit_code: int | None  # None when a signal ended it
    signal: str | None
    timed_out: bool
    duration_ms: float
    stdout: StreamResult
    stderr: StreamResult
    held_open: bool  # the program exited but its output stayed open: stragglers were killed

    @property
    def truncated(self) -> bool:
        return self.stdout.truncated or self.stderr.truncated


async def _read(reader: asyncio.StreamReader | None, capture: Capture) -> None:
    if reader is None:
        return
    while chunk := await reader.read(_READ_SIZE):
        capture.feed(chunk)


async def _spawn(launch: Launch) -> Child:
    try:
        if launch.spawn is not None:
            return await launch.spawn(launch)
        # Forked from the loop's thread (bubblewrap's --die-with-parent watches the thread that started it) and not
        # cancellable (as `spawn_restricted`): a cancel landing mid-spawn (a client that disconnects at once) would
        # leave a started process that nobody tracks or kills.
        with anyio.CancelScope(shield=True):
            child = PopenChild(popen(launch, **launch.popen_options), asyncio.get_running_loop())
            await child.connect()
    except OSError as exc:
        code = exc.errno or errno.EIO
        raise SpawnError(code, exc.strerror or str(exc)) from None
    return child


async def _cleanup(child: Child, command_id: str, abnormal: bool, registry: groups.ProcessGroups) -> None:
    """Leave nothing running: the group (if any member is left), stragglers, the pipes."""
    pgid = child.pid
    try:
        with anyio.CancelScope(shield=True):
            if groups.live_members(pgid):
                await groups.terminate_group(pgid)
            with anyio.move_on_after(groups.KILL_GRACE):
                await child.exited.wait()
            # The leader is gone, so its daemons are ours now (subreaper): kill them, whatever the ending.
            if child.contained and child.exited.is_set():
                pass  # none: its processes ended with its namespace, and none could be re-parented to us
            elif groups.is_subreaper():
                await registry.stop_strays(command_id)
            elif abnormal:
                await anyio.to_thread.run_sync(groups.sweep, COMMAND_ID_VAR, command_id)
    finally:
        registry.unregister(pgid, reaped=child.exited.is_set())
        child.close()


async def run(launch: Launch, *, timeout: float, max_output: int, command_id: str, registry: groups.ProcessGroups,
              open_spill: Callable[[str], SpillFile | None] | None = None,
              progress: ProgressFeed | None = None, inline_limit: int | None = None, line_cost: int = 0) -> RunResult:
    """`max_output` bounds what each stream keeps in memory; `inline_limit` what the result shows of both
    (`line_cost`: what the tool's text adds per line)."""
    on_lines = progress.add if progress is not None else None
    spill_after = inline.spill_threshold(inline_limit) if inline_limit is not None else None
    out = Capture("stdout", max_output, open_spill, on_lines, spill_after)
    err = Capture("stderr", max_output, open_spill, on_lines, spill_after)
    with registry.running(command_id), recovery.command_running(command_id):
        result = await _run(launch, timeout, command_id, out, err, progress, registry)
    if inline_limit is not None:
        result.stdout, result.stderr = inline.fit(result.stdout, result.stderr, inline_limit, line_cost)
    return result


async def _run(launch: Launch, timeout: float, command_id: str, out: Capture, err: Capture,
               progress: ProgressFeed | None, registry: groups.ProcessGroups) -> RunResult:
    start = time.perf_counter()
    with registry.spawning():
        child = await _spawn(launch)
        registry.register(child.pid)
    readers = [asyncio.ensure_future(_read(child.stdout, out)), asyncio.ensure_future(_read(child.stderr, err))]
    pump = asyncio.ensure_future(progress.pump()) if progress is not None else None
    waiter = asyncio.ensure_future(child.exited.wait())
    timed_out = held_open = False
    abnormal = True
    try:
        done, _ = await asyncio.wait({waiter}, timeout=timeout)
        if not done:
            timed_out = True
            await groups.terminate_group(child.pid)
        _, pending = await asyncio.wait(readers, timeout=DRAIN_SECONDS)
        if pending:
            held_open = True
            await groups.terminate_group(child.pid)
            if groups.is_subreaper():
                await registry.stop_strays(command_id)
            else:
                await anyio.to_thread.run_sync(groups.sweep, COMMAND_ID_VAR, command_id)
            await asyncio.wait(pending, timeout=0.5)
        abnormal = timed_out or held_open
    finally:
        for task in (*readers, waiter, *((pump,) if pump else ())):
            task.cancel()
        await _cleanup(child, command_id, abnormal, registry)
    stdout, stderr = out.finish(), err.finish()
    if progress is not None:
        with anyio.move_on_after(0.5):  # the last lines, unless the client is too slow to take them
            await progress.flush()
    code = child.returncode()
    sig = None
    if code is not None and code < 0:
        try:
            sig = signal.Signals(-code).name
        except ValueError:
            sig = f"signal {-code}"
        code = None
    duration = (time.perf_counter() - start) * 1000
    return RunResult(code, sig, timed_out, duration, stdout, stderr, held_open)
