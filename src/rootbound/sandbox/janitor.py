"""The private directories of finished commands, removed after the answer by one background thread.

Removing even an empty directory took 0.25 ms per command on a quiet machine and
2-3 ms under load, on the answer's path; a big build tree far more. The command
has ended when its directory is handed over (Landlock alone: nothing of it can
write there any more but strays, which are killed before), so nothing waits for
the removal. What is still queued when the interpreter exits is removed then.
"""

from __future__ import annotations

import atexit
import queue
import shutil
import threading

__all__ = ["drain", "remove_later"]

_queue: queue.SimpleQueue[str | None] = queue.SimpleQueue()
_lock = threading.Lock()
_worker: list[threading.Thread] = []


def remove_later(path: str) -> None:
    """Remove the directory `path` and everything in it, soon, off the caller's thread."""
    _queue.put(path)
    with _lock:
        if not _worker or not _worker[0].is_alive():
            thread = threading.Thread(target=_work, name="rootbound-janitor", daemon=True)
            _worker[:] = [thread]
            thread.start()


def _work() -> None:
    while (path := _queue.get()) is not None:
        shutil.rmtree(path, ignore_errors=True)


@atexit.register
def drain() -> None:
    """Remove what is still queued, now (interpreter exit: the daemon thread would be cut short)."""
    with _lock:
        worker = _worker[0] if _worker else None
        if worker is not None and worker.is_alive():
            _queue.put(None)
            worker.join(10)
        _worker.clear()
    while True:
        try:
            path = _queue.get_nowait()
        except queue.Empty:
            return
        if path is not None:
            shutil.rmtree(path, ignore_errors=True)
