"""Where a command's setup runs: on the event loop while it can only wait on a local disk, else in a worker thread.

Before a command is spawned, and after it has ended, the server looks at the roots' filesystems: the working
directory is resolved beneath its root, every root is checked to be still there (fstat of its handle, stat of
its path), the sandbox walks the top of each writable root for its guards, and afterwards sweeps what a command
left in them. On a filesystem that stops answering (an NFS server gone, a stuck FUSE daemon) any of these waits
for good; on the event loop that froze every call of every client. So:

* when a root is not on a filesystem known to be local (fs/onloop.py), or the working directory is a host path
  outside every root, the setup runs in a worker thread: only this command waits;
* otherwise it runs on the loop, within `onloop.on_loop()`, so that a working directory across a mount point
  beneath a root (where NFS or FUSE could be mounted) raises `Offload` before it is entered, and the setup
  starts again in a thread.

A thread left waiting is abandoned when the call is cancelled (the client gave up, the server stops): what it
opens once it returns is released then (`release`), never leaked. The clean-up after a command always runs, and
is waited for a bounded time (`finish`).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Mapping
from typing import Final, TypeVar, cast

import anyio
import anyio.to_thread

from rootbound.fs import Root, onloop

__all__ = ["FINISH_WAIT", "finish", "in_thread", "leaves_loop", "setup"]

T = TypeVar("T")
FINISH_WAIT: Final = 2.0  # seconds a call waits for its clean-up in a thread (a stopping server too); it goes on


def leaves_loop(roots: Mapping[str, Root], root: str | None, cwd: str | None, project_dir: str) -> bool:
    """Whether this command's setup must run in a worker thread (see the module's docstring)."""
    if not all(r.local for r in roots.values()):
        return True
    if root is not None:
        return False
    where = os.path.abspath(os.path.join(project_dir, cwd or ""))
    return not any(os.path.commonpath([r.real_path, where]) == r.real_path for r in roots.values())


async def setup(work: Callable[[], T], *, off_loop: bool, release: Callable[[T], object] | None = None) -> T:
    """`work()` on the loop (within `on_loop`), or in a worker thread when `off_loop` or when it raised `Offload`
    there; it must have released what it opened before it raises."""
    if not off_loop:
        try:
            with onloop.on_loop():
                return work()
        except onloop.Offload:
            pass
    return await in_thread(work, release)


async def in_thread(work: Callable[[], T], release: Callable[[T], object] | None = None) -> T:
    """`work()` in a worker thread, abandoned on cancellation; what it returns after that is `release`d."""
    lock = threading.Lock()
    state: dict[str, object] = {}  # "abandoned" (by the caller), or "result" (delivered)

    def run() -> T:
        result = work()
        with lock:
            if "abandoned" in state:
                if release is not None:
                    release(result)
            else:
                state["result"] = result
        return result

    try:
        return await anyio.to_thread.run_sync(run, abandon_on_cancel=True)
    except anyio.get_cancelled_exc_class():
        with lock:
            state["abandoned"] = True
            delivered = "result" in state
        if delivered and release is not None:  # it returned as the cancellation came: ours to release
            release(cast(T, state["result"]))
        raise


async def finish(work: Callable[[], T], *, off_loop: bool) -> T | None:
    """`work()` once a command has ended (its clean-up: it must run, even when the call is being cancelled): on the
    loop, or in a worker thread waited for at most FINISH_WAIT; None when it was left to end there on its own."""
    if not off_loop:
        return work()
    with anyio.CancelScope(shield=True), anyio.move_on_after(FINISH_WAIT):
        return await anyio.to_thread.run_sync(work, abandon_on_cancel=True)
    return None
