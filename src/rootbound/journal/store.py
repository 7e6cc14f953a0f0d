"""One root path's journal on disk: `<journal dir>/<name>-<hash>/` with `journal.db`, `blobs/` and `lock`.

Why SQLite (standard library) in WAL mode for the entries, and a directory for the blobs:

* **Two processes at once.** A running server appends while `rootbound history` or `undo` reads and
  writes from another process. SQLite's WAL lets readers run beside the one writer without blocking,
  and serialises writers with its own file locks (`busy_timeout` waits them out); nothing of ours has
  to coordinate appends.
* **Safety.** A transaction is all or nothing, also when a process is SIGKILLed in the middle; an entry
  never exists in half. `synchronous=NORMAL`: a commit is not fsynced (the kernel holds it, so a
  SIGKILL cannot lose it) and checkpoints are, so a power loss can lose the newest entries but never
  corrupts the database. What must survive a power loss before a change is visible is the content it
  destroys, and that is the blob's job (blobs.py), not the entry's: the start-up recovery settles
  entries from what it finds on disk.
* **Speed.** An append is two small INSERTs in one transaction (~50 µs, no fsync); listing 10,000
  entries is one indexed query. Blob contents stay out of the database: a before-state is usually a
  hard link (no bytes copied, see blobs.py), and file contents up to `max_file_size` (64 MiB) would
  bloat the WAL and be written twice by checkpoints.

Each process has one connection per store, shared by its threads under a lock.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import sqlite3
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, Final

from rootbound.journal.blobs import Blobs
from rootbound.journal.model import Entry, PathRecord, new_id, paths_text
from rootbound.logs import log

__all__ = ["Store", "store_dir_name"]

_SCHEMA: Final = """
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS entries(
    id TEXT PRIMARY KEY,
    time REAL NOT NULL,
    kind TEXT NOT NULL,
    tool TEXT NOT NULL,
    root TEXT NOT NULL,
    connection TEXT,
    client TEXT,
    status TEXT NOT NULL,
    writer TEXT,
    undoes TEXT,
    undone_by TEXT,
    note TEXT,
    added INTEGER,
    removed INTEGER,
    shown TEXT NOT NULL DEFAULT '',
    whole INTEGER NOT NULL DEFAULT 1
);
CREATE INDEX IF NOT EXISTS entries_time ON entries(time);
CREATE INDEX IF NOT EXISTS entries_status ON entries(status) WHERE status = 'pending';
CREATE TABLE IF NOT EXISTS paths(
    entry TEXT NOT NULL,
    seq INTEGER NOT NULL,
    root TEXT NOT NULL,
    root_path TEXT NOT NULL,
    path TEXT NOT NULL,
    kind TEXT NOT NULL,
    kept INTEGER NOT NULL,
    before TEXT NOT NULL,
    after TEXT,
    PRIMARY KEY(entry, seq)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS blobs(hash TEXT PRIMARY KEY, size INTEGER NOT NULL, stored INTEGER NOT NULL,
                                 codec TEXT NOT NULL, time REAL NOT NULL) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS refs(entry TEXT NOT NULL, hash TEXT NOT NULL, PRIMARY KEY(entry, hash)) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS refs_hash ON refs(hash);
"""
_VERSION: Final = "1"
BUSY_TIMEOUT_MS: Final = 30_000  # how long a write waits for another process's transaction (SQLite's busy timeout)
NOTE_WAIT_MS: Final = 100  # the same for a command's note, written later (see Store._write_later)


def store_dir_name(root_path: str) -> str:
    """`<folder name>-<12 hex of the path's sha256>`: readable, and one per root path."""
    base = re.sub(r"[^A-Za-z0-9_.-]", "_", os.path.basename(root_path.rstrip("/")) or "root")[:40]
    return f"{base}-{hashlib.sha256(root_path.encode('utf-8', 'surrogateescape')).hexdigest()[:12]}"


class Store:
    """The journal of the root at `root_path`, under `base` (the journal directory)."""

    def __init__(self, base: str, root_path: str) -> None:
        self.root_path = root_path
        self.dir = os.path.join(base, store_dir_name(root_path))
        with contextlib.suppress(FileExistsError):
            os.mkdir(self.dir, 0o700)
        self.lock_path = os.path.join(self.dir, "lock")
        self.blobs = Blobs(os.path.join(self.dir, "blobs"))
        self.db = sqlite3.connect(os.path.join(self.dir, "journal.db"), isolation_level=None,
                                  check_same_thread=False, timeout=BUSY_TIMEOUT_MS / 1000)
        self.db.row_factory = sqlite3.Row
        self.mutex = threading.RLock()
        # Entries that may wait (a command's note, off the answer's path): written by the journal's note thread
        # (`write_later`), or first thing by any transaction or read of entries, so that no reader misses one.
        self._later: list[Entry] = []
        self._later_lock = threading.Lock()
        self._flushing = False
        self._closed = False
        with self.mutex:
            self.db.execute("PRAGMA journal_mode=WAL")
            self.db.execute("PRAGMA synchronous=NORMAL")
            self.db.executescript(_SCHEMA)  # idempotent; each statement commits on its own
        self._meta()

    def _meta(self) -> None:
        with self.transaction() as db:
            db.execute("INSERT OR IGNORE INTO meta VALUES ('version', ?)", (_VERSION,))
            db.execute("INSERT OR IGNORE INTO meta VALUES ('root_path', ?)", (self.root_path,))

    def close(self) -> None:
        with self.mutex:
            self._write_later()
            with self._later_lock:
                self._closed = True
                lost, self._later = len(self._later), []
            if lost:
                log.warning("journal closed while another process held it locked: commands were not recorded",
                            extra={"count": lost})
            self.db.close()
        self.blobs.close()

    @contextlib.contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """One write transaction (BEGIN IMMEDIATE: the write lock up front, so it never has to upgrade)."""
        with self.mutex:
            if self.db.in_transaction:  # nested: part of the enclosing transaction
                yield self.db
                return
            self._write_later()
            self.db.execute("BEGIN IMMEDIATE")
            try:
                yield self.db
            except BaseException:
                self.db.execute("ROLLBACK")
                raise
            self.db.execute("COMMIT")

    def query(self, sql: str, args: Sequence[Any] = ()) -> list[sqlite3.Row]:
        with self.mutex:
            self._write_later()
            return self.db.execute(sql, args).fetchall()

    # -- writing -------------------------------------------------------------------------------

    def has_blob(self, digest: str) -> bool:
        with self.mutex:  # (no queued note first: a note has no blob, and a change's capture is no place for it)
            return self.db.execute("SELECT 1 FROM blobs WHERE hash = ?", (digest,)).fetchone() is not None

    def insert(self, entry: Entry, writer: str | None, blobs: Iterable[tuple[str, int, int, str]] = (),
               refs: Iterable[str] = ()) -> None:
        """Add an entry with its paths, the blobs it stored (hash, size, stored, codec) and the blobs it needs,
        drawing a new id for it if another process took this one in the same millisecond."""
        blobs, refs = list(blobs), set(refs)
        for _ in range(8):
            try:
                self._insert(entry, writer, blobs, refs)
                return
            except sqlite3.IntegrityError:
                entry.id = new_id(entry.time)
        raise RuntimeError("could not draw a unique journal id")

    def _insert(self, entry: Entry, writer: str | None, blobs: list[tuple[str, int, int, str]], refs: set[str]
                ) -> None:
        now = time.time()
        with self.transaction() as db:
            db.executemany("INSERT OR IGNORE INTO blobs VALUES (?, ?, ?, ?, ?)",
                           [(h, size, stored, codec, now) for h, size, stored, codec in blobs])
            db.execute("INSERT INTO entries (id, time, kind, tool, root, connection, client, status, writer, undoes, "
                       "note, shown, whole) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                       (entry.id, entry.time, entry.kind, entry.tool, entry.root, entry.connection, entry.client,
                        entry.status, writer, json.dumps(entry.undoes) if entry.undoes else None,
                        json.dumps(entry.note) if entry.note else None, paths_text(entry),
                        int(all(p.kept for p in entry.paths))))
            db.executemany("INSERT INTO paths VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                           [(entry.id, seq, p.root, p.root_path, p.path, p.kind, int(p.kept),
                             json.dumps(p.before, ensure_ascii=False), p.after) for seq, p in enumerate(entry.paths)])
            db.executemany("INSERT OR IGNORE INTO refs VALUES (?, ?)", [(entry.id, h) for h in refs])

    def insert_later(self, entry: Entry) -> None:
        """Queue an entry with no paths, blobs or writer (a command's note) for `write_later`; its id, drawn
        already, keeps its place in the timeline."""
        with self._later_lock:
            if self._closed:
                log.warning("journal closed: a command was not recorded", extra={"entry": entry.id})
                return
            self._later.append(entry)

    def write_later(self) -> bool:
        """Write the entries `insert_later` queued; False when some must wait (another process holds the journal
        locked: try again later)."""
        with self.mutex:
            return self._write_later()

    def _write_later(self) -> bool:
        # (The mutex is held.) Each in a transaction of its own, never inside another's (whose rollback would take
        # it along) nor from within one of these inserts (`_flushing`). A journal another process holds locked is
        # waited for NOTE_WAIT_MS, not the 30 s busy timeout: every reader of this store writes the queue first, and
        # must not wait that long; what could not be written goes back, in order, for the next try.
        if self._closed or self._flushing or self.db.in_transaction:
            return True
        with self._later_lock:
            waiting, self._later = self._later, []
        if not waiting:
            return True
        self._flushing = True
        self.db.execute(f"PRAGMA busy_timeout = {NOTE_WAIT_MS}")
        try:
            for k, entry in enumerate(waiting):
                try:
                    self.insert(entry, None)
                except sqlite3.OperationalError as exc:
                    if exc.sqlite_errorcode in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED):
                        with self._later_lock:
                            self._later[:0] = waiting[k:]
                        return False
                    log.warning("journal could not record a command", extra={"error": str(exc)[:200]})
                except Exception as exc:  # a note never fails what comes after it (as it never failed its command)
                    log.warning("journal could not record a command", extra={"error": str(exc)[:200]})
        finally:
            self.db.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            self._flushing = False
        return True

    def exists(self, entry_id: str) -> bool:
        return bool(self.query("SELECT 1 FROM entries WHERE id = ?", (entry_id,)))

    def finish(self, entry_id: str, status: str, afters: Sequence[str | None], undoes: Sequence[str] | None = None
               ) -> None:
        """Settle a pending entry: its status and the digest of each path after it (and, for an undo, what it
        reverted in the end)."""
        with self.transaction() as db:
            db.execute("UPDATE entries SET status = ? WHERE id = ?", (status, entry_id))
            if undoes is not None:
                db.execute("UPDATE entries SET undoes = ? WHERE id = ?", (json.dumps(list(undoes)) or None, entry_id))
            db.executemany("UPDATE paths SET after = ? WHERE entry = ? AND seq = ?",
                           [(a, entry_id, seq) for seq, a in enumerate(afters)])

    def mark_undone(self, ids: Iterable[str], by: str | None, previous: str | None = None) -> None:
        """Record that `by` reverted `ids` (by=None: they are in force again, if `previous` had reverted them)."""
        with self.transaction() as db:
            if by is not None:
                db.executemany("UPDATE entries SET undone_by = ? WHERE id = ?", [(by, i) for i in ids])
            else:
                db.executemany("UPDATE entries SET undone_by = NULL WHERE id = ? AND undone_by = ?",
                               [(i, previous) for i in ids])

    def set_stats(self, entry_id: str, added: int, removed: int) -> None:
        with self.transaction() as db:
            db.execute("UPDATE entries SET added = ?, removed = ? WHERE id = ?", (added, removed, entry_id))

    # -- reading -------------------------------------------------------------------------------

    def entries(self, where: str = "", args: Sequence[Any] = (), limit: int | None = None, *,
                paths: bool = True) -> list[Entry]:
        """Entries matching an SQL condition on `entries` (newest first), with their paths unless `paths` is
        false (a listing: `Entry.shown` and `Entry.whole` say what it needs, from one flat query)."""
        chosen = ("SELECT id, time, tool, root, connection, client, status, kind, undoes, undone_by, note, added, "
                  "removed, shown, whole FROM entries" + (f" WHERE {where}" if where else "") + " ORDER BY id DESC")
        if limit is not None:
            chosen += f" LIMIT {int(limit)}"
        with self.mutex:  # one snapshot for both queries
            self._write_later()
            self.db.execute("BEGIN")
            try:
                cursor = self.db.execute(chosen, args)
                cursor.row_factory = None  # plain tuples: much faster than sqlite3.Row for a long listing
                rows = cursor.fetchall()
                found = []
                if paths and rows:
                    cursor = self.db.execute(
                        "SELECT entry, root, root_path, path, kind, kept, before, after FROM paths WHERE entry IN "
                        f"(SELECT id FROM ({chosen})) ORDER BY entry, seq", args)
                    cursor.row_factory = None
                    found = cursor.fetchall()
            finally:
                self.db.execute("COMMIT")
        root_path = self.root_path
        entries = [Entry(r[0], r[1], r[2], r[3], root_path, r[4], r[5], r[6], r[7], [],
                         json.loads(r[8]) if r[8] else [], r[9], json.loads(r[10]) if r[10] else {}, r[11], r[12],
                         r[13], bool(r[14])) for r in rows]
        if found:
            by_id = {e.id: e for e in entries}
            for p in found:
                by_id[p[0]].paths.append(PathRecord(p[1], p[2], p[3], p[6], p[7], kind=p[4], kept=bool(p[5])))
        return entries

    def listing(self, where: str = "", args: Sequence[Any] = (), limit: int | None = None) -> list[tuple[Any, ...]]:
        """Rows for a listing, newest first: id, time, tool, root, client, status, kind, undoes, undone_by, note,
        added, removed, shown, whole (query.history_lines formats them)."""
        sql = ("SELECT id, time, tool, root, client, status, kind, undoes, undone_by, note, added, removed, shown, "
               "whole FROM entries" + (f" WHERE {where}" if where else "") + " ORDER BY id DESC")
        if limit is not None:
            sql += f" LIMIT {int(limit)}"
        with self.mutex:
            self._write_later()
            cursor = self.db.execute(sql, args)
            cursor.row_factory = None
            return cursor.fetchall()

    def get(self, entry_id: str) -> Entry | None:
        got = self.entries("id = ?", (entry_id,))
        return got[0] if got else None

