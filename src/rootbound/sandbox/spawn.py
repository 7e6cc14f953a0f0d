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

The `Popen` is driven from the event loop like every command (`PopenChild`:
`connect_read_pipe` for stdout/stderr, a pidfd for its exit). (Not for bubblewrap:
its `--die-with-parent` fires when the *thread* that started it ends.)
"""

from __future__ import annotations

import asyncio
import subprocess
import threading
from collections.abc import Callable, Sequence

import anyio

from rootbound.execution.launch import Child, Launch, PopenChild, popen

__all__ = ["spawn_restricted"]


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
        return popen(launch, pass_fds=tuple(pass_fds))

    loop = asyncio.get_running_loop()
    # Blocking the loop for the spawn is what asyncio's own subprocess_exec does too (about a millisecond);
    # not cancellable, so a process is never started without someone to stop it.
    with anyio.CancelScope(shield=True):
        proc = _in_thread(body)
        if after_start is not None:
            after_start(proc.pid)
        child = PopenChild(proc, loop)
        await child.connect()
    return child
