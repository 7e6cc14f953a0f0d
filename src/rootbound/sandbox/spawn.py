"""Start a command from a fresh thread that first restricts itself, and drive it from the event loop.

Landlock, no_new_privs, capabilities and (with raw system calls) the user id are
per-thread attributes, inherited by whatever the thread starts. So instead of
running code in the forked child (`preexec_fn`, unsafe in a threaded server), a
new thread restricts itself once, starts the command with `subprocess.Popen`
(vfork + exec in C, no Python in the child), hands the `Popen` back and ends. The
restriction dies with it; the server's other threads are never touched.

A thread per command, not one per policy: the policy names this command's
private temp directory and this call's roots, and a Landlock rule binds to the
inode opened when it was added, so a long-lived thread would go stale when a
root is recreated. Creating a thread costs about 0.1 ms.

asyncio's `subprocess_exec` forks on the loop thread, so the child is wired to the
loop with public APIs instead: `connect_read_pipe` for stdout/stderr and a pidfd
watched with `add_reader` for its exit. (Not for bubblewrap: its
`--die-with-parent` fires when the *thread* that started it ends.)
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import threading
from collections.abc import Callable, Sequence

import anyio

from rootbound.execution.launch import Child, Launch

__all__ = ["ThreadChild", "spawn_restricted"]

_STREAM_LIMIT = 1 << 16


class ThreadChild:
    """A `Popen` started elsewhere, as the runner drives it: async stdout/stderr, an exit event."""

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
        assert self._proc.stdout is not None and self._proc.stderr is not None
        for pipe, reader in ((self._proc.stdout, self.stdout), (self._proc.stderr, self.stderr)):
            transport, _ = await self._loop.connect_read_pipe(
                lambda r=reader: asyncio.StreamReaderProtocol(r), pipe)  # type: ignore[misc]
            self._transports.append(transport)

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
        if self._proc.poll() is None:  # only on an abnormal path: kill and reap off the loop
            self._proc.kill()
            threading.Thread(target=self._proc.wait, daemon=True).start()


def _in_thread(body: Callable[[], subprocess.Popen[bytes]]) -> subprocess.Popen[bytes]:
    """Run `body` on a new thread that ends afterwards; return its result or raise its exception."""
    box: dict[str, object] = {}

    def target() -> None:
        try:
            box["result"] = body()
        except BaseException as exc:
            box["error"] = exc

    thread = threading.Thread(target=target, name="rootbound-spawn", daemon=True)
    thread.start()
    thread.join()
    if "error" in box:
        raise box["error"]  # type: ignore[misc]
    return box["result"]  # type: ignore[return-value]


async def spawn_restricted(launch: Launch, *, restrict: Callable[[], None], pass_fds: Sequence[int] = (),
                           after_start: Callable[[int], None] | None = None) -> Child:
    """Start `launch` from a thread that first calls `restrict()` on itself; raise OSError if either fails."""

    def body() -> subprocess.Popen[bytes]:
        restrict()
        return subprocess.Popen(
            list(launch.argv), executable=launch.executable, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, cwd=f"/proc/self/fd/{launch.cwd_fd}", env=dict(launch.env),
            start_new_session=True, close_fds=True, pass_fds=tuple(pass_fds))

    loop = asyncio.get_running_loop()
    # Blocking the loop for the spawn is what asyncio's own subprocess_exec does too (about a millisecond);
    # not cancellable, so a process is never started without someone to stop it.
    with anyio.CancelScope(shield=True):
        proc = _in_thread(body)
        if after_start is not None:
            after_start(proc.pid)
        child = ThreadChild(proc, loop)
        try:
            await child.connect()
        except BaseException:
            child.close()
            raise
    return child
