"""What gets executed: a `Launch` (program, argv, working directory, environment), and the hook that wraps it.

Every command goes through one `Launcher` before it is spawned. `UNCONFINED`
(`commands.sandbox: off`) changes nothing: commands run as the server's user with
the server's view of the filesystem and network. The OS sandboxes
(`rootbound.sandbox`) return a new `Launch` whose argv runs the original inside
bubblewrap, or whose `spawn` starts it from a thread restricted by Landlock; the
runner only honours `spawn`, `popen_options` and (through the service) `cleanup`.

Every command is a `subprocess.Popen` (vfork + exec in C) driven from the event loop
as a `PopenChild`: its pipes through `connect_read_pipe`, its exit through a pidfd.
(asyncio's own `subprocess_exec` starts a watcher thread per process on Python 3.11,
about a millisecond of every call.)
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import threading
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import IO, TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from rootbound.fs import Root

__all__ = ["UNCONFINED", "Child", "Launch", "Launcher", "PopenChild", "popen"]

_STREAM_LIMIT = 1 << 16


class Child(Protocol):
    """A started command, as the runner drives it."""

    pid: int
    stdout: asyncio.StreamReader
    stderr: asyncio.StreamReader
    exited: asyncio.Event  # set once the process has exited (its output may still be open)
    # Every process of it lived in a PID namespace that had ended, each one reaped inside it, when `exited` was
    # set: none can be left, nor become a stray of ours (an orphan is re-parented within its namespace).
    contained: bool

    def returncode(self) -> int | None: ...  # negative: ended by that signal

    def close(self) -> None: ...  # release pipes and handles; kill the process if it somehow still runs


class PopenChild:
    """A started `Popen` as the runner drives it: async stdout/stderr, an exit event (a pidfd on the loop)."""

    contained = False  # (a bubblewrap per command: its sandbox's init becomes our zombie, reaped as a stray)

    def __init__(self, proc: subprocess.Popen[bytes], loop: asyncio.AbstractEventLoop) -> None:
        self.pid = proc.pid
        self.stdout = asyncio.StreamReader(limit=_STREAM_LIMIT, loop=loop)
        self.stderr = asyncio.StreamReader(limit=_STREAM_LIMIT, loop=loop)
        self.exited = asyncio.Event()
        self._proc = proc
        self._loop = loop
        self._transports: list[asyncio.BaseTransport] = []
        self._pidfd: int | None = os.pidfd_open(proc.pid)
        loop.add_reader(self._pidfd, self._on_exit)

    async def connect(self) -> None:
        """Wire the pipes to the loop; on failure the process is killed (nobody else could stop it)."""
        assert self._proc.stdout is not None and self._proc.stderr is not None
        try:
            await wire_pipes(self._loop, ((self._proc.stdout, self.stdout), (self._proc.stderr, self.stderr)),
                             self._transports)
        except BaseException:
            self.close()
            raise

    def _stop_watching(self) -> None:
        if self._pidfd is not None:
            self._loop.remove_reader(self._pidfd)
            os.close(self._pidfd)
            self._pidfd = None

    def _on_exit(self) -> None:
        self._stop_watching()
        self._proc.poll()  # reaps it; the status becomes returncode
        self.exited.set()

    def returncode(self) -> int | None:
        return self._proc.returncode

    def close(self) -> None:
        self._stop_watching()
        for transport in self._transports:
            transport.close()
        for pipe in (self._proc.stdout, self._proc.stderr):  # those never wired (a closed file ignores a close)
            if pipe is not None:
                pipe.close()
        if self._proc.poll() is None:  # only on an abnormal path: kill and reap off the loop
            self._proc.kill()
            threading.Thread(target=self._proc.wait, daemon=True).start()


async def wire_pipes(loop: asyncio.AbstractEventLoop, pairs: Iterable[tuple[IO[bytes], asyncio.StreamReader]],
                     transports: list[asyncio.BaseTransport]) -> None:
    """Feed each pipe into its reader on the loop, adding each transport to `transports` as it is made (the
    caller closes them, also those made before a failure)."""
    for pipe, reader in pairs:
        transport, _ = await loop.connect_read_pipe(
            lambda r=reader: asyncio.StreamReaderProtocol(r), pipe)  # type: ignore[misc]
        transports.append(transport)


def popen(launch: Launch, **options: Any) -> subprocess.Popen[bytes]:
    """Start `launch` (its own session, no stdin, output piped, no other descriptor but `options`' pass_fds)."""
    return subprocess.Popen(
        list(launch.argv), executable=launch.executable, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, cwd=f"/proc/self/fd/{launch.cwd_fd}", env=dict(launch.env),
        start_new_session=True, close_fds=True, **options)


@dataclass(frozen=True)
class Launch:
    executable: str  # the file to execute (absolute)
    argv: Sequence[str]  # argv[0] is the name the program sees (kept as written: multi-call binaries read it)
    cwd_fd: int  # the checked working directory, as an open handle
    cwd_path: str  # its canonical path (for PWD, and for a sandbox to bind)
    env: Mapping[str, str]
    roots: Sequence[Root] = ()  # the roots in force for this call: what a sandbox lets the command reach
    # The programs the allowlist names by absolute path: a sandbox lets the command read and execute these files
    # wherever they are (plain data, so that a sandbox needs nothing of the policy).
    programs: Sequence[str] = ()
    # Set by a sandbox: start the command this way instead of the event loop's subprocess support.
    spawn: Callable[[Launch], Awaitable[Child]] | None = None
    popen_options: Mapping[str, Any] = field(default_factory=dict)  # extra subprocess options (pass_fds, user)
    # Run once the command has ended; quick (no waiting on the loop). Returns what the sandbox removed afterwards
    # (protected paths the command created, as "root:path"), which the result reports.
    cleanup: Callable[[], Sequence[str] | None] | None = None


class Launcher(Protocol):
    name: str
    confined: bool
    problem: str | None  # why commands are refused (fail closed), for `rootbound check`

    def wrap(self, launch: Launch) -> Launch: ...

    def describe(self) -> list[str]: ...  # what the confinement guarantees, for `rootbound check`

    def close(self) -> None: ...  # stop what it keeps running for commands (a command supervisor)


class _Unconfined:
    name = "none"
    confined = False
    problem: str | None = None

    def wrap(self, launch: Launch) -> Launch:
        return launch

    def close(self) -> None:
        pass

    def describe(self) -> list[str]:
        return ["  OS confinement: NONE (commands.sandbox: off). Commands run as the server's user and can read, "
                "write and reach whatever it can, outside the roots too; the allowlist is policy, not a sandbox"]


UNCONFINED: Launcher = _Unconfined()
