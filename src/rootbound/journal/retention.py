"""Keeping the journal bounded: oldest entries go first past `max_age` or `max_bytes`; linked blobs get compressed.

`prune(store, settings)` deletes entries (never pending ones) older than `max_age`, then the oldest
until the blobs still referenced take at most `max_bytes`, then the blobs nothing references, and
blob files the database does not know (left by a crash between storing a blob and writing its
entry). It runs under the root's exclusive lock (locks.py): no change in any process is between
finding a blob stored and recording that it needs it.

`compact(store)` replaces blobs that were stored as hard links (blobs.py) by zlib copies. It needs no
lock: a reader finds either name.

`Upkeep` runs both now and then in a background thread of the server (every `every` commits); the CLI
and start-up run them directly.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from typing import Any, Final

from rootbound.journal import locks
from rootbound.journal.blobs import TMP_PREFIX, Damaged
from rootbound.journal.settings import Settings
from rootbound.journal.store import Store
from rootbound.logs import log

__all__ = ["Upkeep", "compact", "maintain", "prune"]

_STALE_TMP: Final = 3600.0


def _total(store: Store) -> int:
    return int(store.query("SELECT COALESCE(SUM(stored), 0) FROM blobs")[0][0])


def _drop_entries(store: Store, where: str, args: tuple[Any, ...]) -> int:
    with store.transaction() as db:
        ids = [r[0] for r in db.execute(f"SELECT id FROM entries WHERE status != 'pending' AND ({where})", args)]
        db.executemany("DELETE FROM paths WHERE entry = ?", [(i,) for i in ids])
        db.executemany("DELETE FROM refs WHERE entry = ?", [(i,) for i in ids])
        db.executemany("DELETE FROM entries WHERE id = ?", [(i,) for i in ids])
    return len(ids)


def _drop_unreferenced_blobs(store: Store) -> int:
    with store.transaction() as db:
        gone = [r[0] for r in db.execute("SELECT hash FROM blobs WHERE hash NOT IN (SELECT hash FROM refs)")]
        db.executemany("DELETE FROM blobs WHERE hash = ?", [(h,) for h in gone])
    for digest in gone:
        store.blobs.remove(digest)
    return len(gone)


def _sweep_files(store: Store) -> None:
    known = {r[0] for r in store.query("SELECT hash FROM blobs")}
    now = time.time()
    for name in store.blobs.listing():
        if name.startswith(TMP_PREFIX):
            with contextlib.suppress(OSError):
                if now - os.stat(name, dir_fd=store.blobs.fd).st_mtime > _STALE_TMP:
                    os.unlink(name, dir_fd=store.blobs.fd)
            continue
        if name.removesuffix(".z") not in known:
            with contextlib.suppress(OSError):
                os.unlink(name, dir_fd=store.blobs.fd)


def prune(store: Store, settings: Settings, *, now: float | None = None, timeout: float = 2.0) -> int:
    """Apply `max_age` and `max_bytes`; returns how many entries were deleted (0 if the root stayed busy)."""
    now = time.time() if now is None else now
    try:
        with locks.exclusive([store.lock_path], timeout=timeout):
            dropped = _drop_entries(store, "time < ?", (now - settings.max_age,))
            _drop_unreferenced_blobs(store)
            while _total(store) > settings.max_bytes:
                count = int(store.query("SELECT COUNT(*) FROM entries WHERE status != 'pending'")[0][0])
                if count == 0:
                    break
                batch = max(1, count // 20)
                oldest = store.query("SELECT id FROM entries WHERE status != 'pending' ORDER BY id LIMIT 1 OFFSET ?",
                                     (batch - 1,))
                dropped += _drop_entries(store, "id <= ?", (oldest[0][0],))
                _drop_unreferenced_blobs(store)
            _sweep_files(store)
    except locks.Busy:
        return 0
    return dropped


def compact(store: Store, limit_bytes: int = 64 << 20) -> int:
    """Compress up to `limit_bytes` of linked blobs, oldest first; returns how many were compressed."""
    done = budget = 0
    for row in store.query("SELECT hash, size FROM blobs WHERE codec = 'link' ORDER BY time"):
        if budget > limit_bytes:
            break
        digest, size = row[0], int(row[1])
        budget += size
        try:
            stored = store.blobs.compact(digest)
        except Damaged:
            with store.transaction() as db:
                db.execute("UPDATE blobs SET codec = 'damaged' WHERE hash = ?", (digest,))
            log.warning("a journal blob was written to after it was stored: that before-state cannot be restored",
                        extra={"blob": digest})
            continue
        if stored is not None:
            with store.transaction() as db:
                db.execute("UPDATE blobs SET codec = 'zlib', stored = ? WHERE hash = ?", (stored, digest))
            done += 1
    return done


def maintain(store: Store, settings: Settings) -> None:
    compact(store)
    prune(store, settings)


class Upkeep:
    """A Journal.after_commit hook: every `every` commits of a store, maintain it in a background thread.
    `close` waits for the threads it started: none outlives the journal's stores."""

    def __init__(self, settings: Settings, every: int = 256) -> None:
        self.settings = settings
        self.every = every
        self._counts: dict[str, int] = {}
        self._running: set[str] = set()
        self._threads: list[threading.Thread] = []
        self._closed = False
        self._lock = threading.Lock()

    def __call__(self, change: Any) -> None:
        store: Store | None = change.store
        if store is None:
            return
        with self._lock:
            if self._closed:
                return  # the journal is closing: its stores are about to go
            n = self._counts[store.root_path] = self._counts.get(store.root_path, 0) + 1
            if n < self.every or store.root_path in self._running:
                return
            self._counts[store.root_path] = 0
            self._running.add(store.root_path)
            thread = threading.Thread(target=self._run, args=(store,), name="journal-upkeep", daemon=True)
            self._threads = [t for t in self._threads if t.is_alive()] + [thread]
            thread.start()

    def close(self) -> None:
        """Start no more upkeep, and wait for what runs (bounded work: one compaction and one pruning)."""
        with self._lock:
            self._closed = True
            threads, self._threads = self._threads, []
        for thread in threads:
            thread.join()

    def _run(self, store: Store) -> None:
        try:
            maintain(store, self.settings)
        except Exception as exc:
            log.warning("journal upkeep failed", extra={"error": str(exc)})
        finally:
            with self._lock:
                self._running.discard(store.root_path)
