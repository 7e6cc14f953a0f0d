"""The private directories of finished commands, removed after the answer.

Removing even an empty directory took 0.25 ms per command on a quiet machine and
2-3 ms under load, on the answer's path; a big build tree far more. The command
has ended when its directory is handed over (Landlock alone: nothing of it can
write there any more but strays, which are killed before), so nothing waits for
the removal. On the event loop an empty directory is removed a moment later, once
the answer has gone out (a thread woken at once would take the interpreter's lock
from the answer, about 0.4 ms); what is not empty goes to one background thread.
What is still pending when the interpreter exits is removed then.

A server killed outright (SIGKILL, a crash) removes nothing: the directories it left are
swept by the next server that runs a command there (`sweep_stale`, once, in a thread of
its own; `rootbound.leftovers` says which are a gone server's).
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import errno
import os
import queue
import secrets
import threading

from rootbound import leftovers
from rootbound.fs.removal import remove_tree

__all__ = ["drain", "private_name", "remove_later", "sweep_stale"]

LATER = 0.05  # seconds: after the answer of the call that ran the command

_pending: set[str] = set()  # handed over, not yet removed (for `drain`)
_queue: queue.SimpleQueue[str | None] = queue.SimpleQueue()
_lock = threading.Lock()
_worker: list[threading.Thread] = []


PREFIX = "rootbound-cmd-"


def private_name() -> str:
    """A fresh name for a command's private directory, saying which server made it (`rootbound.leftovers`)."""
    return f"{leftovers.name(PREFIX)}{secrets.token_hex(8)}"


_swept: set[str] = set()


def sweep_stale(parent: str) -> None:
    """Remove, in the background, the private directories in `parent` that killed servers left (once per folder)."""
    with _lock:
        if parent in _swept:
            return
        _swept.add(parent)
    threading.Thread(target=leftovers.sweep, args=(parent, PREFIX), name="rootbound-sweep", daemon=True).start()


def remove_later(path: str) -> None:
    """Remove the directory `path` and everything in it, soon, off the answer's path."""
    with _lock:
        _pending.add(path)
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        _to_thread(path)
        return
    loop.call_later(LATER, _remove_empty, path)


def _remove_empty(path: str) -> None:
    """Remove `path` if it is empty but for an empty `.home` (the usual case); else leave it to the thread."""
    try:
        with contextlib.suppress(FileNotFoundError):
            os.rmdir(os.path.join(path, ".home"))
        os.rmdir(path)
    except OSError as exc:
        if exc.errno != errno.ENOENT:
            _to_thread(path)
            return
    with _lock:
        _pending.discard(path)


def _to_thread(path: str) -> None:
    _queue.put(path)
    with _lock:
        if not _worker or not _worker[0].is_alive():
            thread = threading.Thread(target=_work, name="rootbound-janitor", daemon=True)
            _worker[:] = [thread]
            thread.start()


def _remove_quietly(path: str) -> None:
    with contextlib.suppress(OSError):  # gone already, or moved meanwhile: nothing more to do here
        remove_tree(None, path)


def _work() -> None:
    while (path := _queue.get()) is not None:
        _remove_quietly(path)
        with _lock:
            _pending.discard(path)


@atexit.register
def drain() -> None:
    """Remove what is still pending, now (interpreter exit: the loop's timers and the daemon thread are cut)."""
    with _lock:
        worker = _worker[0] if _worker else None
        _worker.clear()
    if worker is not None and worker.is_alive():
        _queue.put(None)
        worker.join(10)
    with _lock:
        left = list(_pending)
        _pending.clear()
    for path in left:
        _remove_quietly(path)
