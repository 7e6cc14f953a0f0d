"""The seam the file tools call: `Journal.begin(...)` → declare before-states → `ready()` → change → `commit()`.

A tool that changes files (phase 2: the fs core's mutating doors) drives one `Change` per call:

    change = journal.begin(tool="write_file", root=root, connection=conn_id, client=client_name)
    try:
        change.before_file(loc.dirfd, loc.name, "notes/todo.txt")   # what stands there now, content stored
        atomic.write_file(..., before_commit=change.ready)           # ready(): entry written, blobs durable
        change.commit(after={"notes/todo.txt": sha256_of_new_content})
    except BaseException:
        change.abandon()
        raise

(`with journal.begin(...) as change:` does the abandon for you.) Rules:

* `begin` takes the root's lock shared (locks.py) until commit/abandon: call it before reading
  anything a read-modify-write depends on, so an undo from another process cannot slip in between.
* Declare every path before `ready()`, each through the directory handle the tool already holds:
  `before_file(dirfd, name, rel)` (whatever stands there: file, symlink, folder, nothing),
  `before_tree` (the same, for folder operations, says what is meant), `before_absent(rel)` (known not
  to exist: no system call), `before_move(...)` (a move: the source is moved back by an undo, the
  destination's old content is stored). A path in another root names it: `root=`.
  The handles must stay open until `commit` (it reads the after-states through them).
* `ready()` must run after the declarations and before the change becomes visible: it writes the
  pending entry and makes the before-state blobs durable. For an atomic write pass it as
  `fs.atomic.write_file(before_commit=...)`; before an unlink, rename or mkdir, call it just before.
* `commit(after=...)` once the change is made; `after` maps a path to the sha256 of its new content
  when the tool knows it (write_file does); other paths are read through the handles. `abandon()` if
  the change failed: the entry (if `ready` wrote it) is marked not applied.

A crash anywhere leaves no change (nothing written, or a pending entry whose paths still hold their
before-states, which the next start marks not applied: recovery.py) or a journaled change (a pending
entry with its blobs, which the next start marks applied).
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import os
import queue
import secrets
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Final, Protocol

from rootbound.fs.handles import lstat_or_none
from rootbound.journal import locks
from rootbound.journal.capture import Capturer, Idents, digest_now
from rootbound.journal.model import ABSENT, APPLIED, COMMAND, NOT_APPLIED, PENDING, RAN, Entry, PathRecord, new_id
from rootbound.journal.settings import Settings
from rootbound.journal.store import Store
from rootbound.logs import log

__all__ = ["Change", "Journal", "RootRef"]

_WRITERS: Final = "writers"
_NOTE_RETRY: Final = 0.25  # seconds between tries at a journal another process holds locked


class RootRef(Protocol):
    """What the journal needs of a root: its name (shown) and its real host path (the journal's key)."""

    @property
    def name(self) -> str: ...

    @property
    def real_path(self) -> str: ...


@dataclass(frozen=True)
class _Root:
    name: str
    real_path: str


@dataclass
class _Path:
    record: PathRecord
    store: Store
    dirfd: int | None = None  # borrowed from the caller, to read the after-state
    name: str | None = None


class Journal:
    """The journals of every root this process changes, under one journal directory."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.idents = Idents()
        self._stores: dict[str, Store] = {}
        self._lock = threading.Lock()
        self._writer: tuple[str, int] | None = None
        self.after_commit: list[Any] = []  # callables run after each commit (retention's trigger)
        # The note thread: writes the stores handed to it (note_command(later=True)); None ends it.
        self._notes: queue.SimpleQueue[Store | None] | None = None
        self._note_thread: threading.Thread | None = None
        self._closed = False

    def store(self, root_path: str) -> Store:
        with self._lock:
            store = self._stores.get(root_path)
            if store is None:
                store = self._stores[root_path] = Store(self.settings.dir, root_path)
            return store

    def stores(self) -> list[Store]:
        with self._lock:
            return list(self._stores.values())

    def writer(self) -> str:
        """This process's writer token; its lock file stays locked while the process lives (recovery.py)."""
        with self._lock:
            if self._writer is None:
                token = f"{os.getpid()}-{secrets.token_hex(4)}"
                folder = os.path.join(self.settings.dir, _WRITERS)
                with contextlib.suppress(FileExistsError):
                    os.mkdir(folder, 0o700)
                path = os.path.join(folder, token)
                fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
                fcntl.flock(fd, fcntl.LOCK_EX)
                self._writer = (token, fd)
                atexit.register(_drop_writer, path, fd)
            return self._writer[0]

    def begin(self, *, tool: str, root: RootRef, connection: str | None = None, client: str | None = None,
              locked: bool = False) -> Change:
        """A new change by `tool` in `root`; holds the root's lock shared until commit/abandon (not when the
        caller already holds it exclusively: `locked`, as undo does)."""
        return Change(self, tool, _Root(root.name, root.real_path), connection, client, locked=locked)

    def note_command(self, *, root: RootRef, tool: str, command: str, cwd: str, exit_code: int | None,
                     connection: str | None = None, client: str | None = None, duration: float | None = None,
                     started: float | None = None, later: bool = False) -> str:
        """Put a command's audit record in the timeline of `root` (its effects are not journaled). Returns the id.

        `cwd` is the working directory relative to the root ("." for the root itself). `later`: written by the
        journal's note thread, off the caller's path (an SQLite transaction, ~0.4 ms, after every command; up to
        30 s when another process holds the journal); it keeps its place in the timeline, any read of the journal
        in this process writes it first, and the id returned is redrawn in the rare clash with another process's
        entry of the same millisecond. Once the journal is closed, notes are written at once."""
        when = time.time() if started is None else started
        entry = Entry(id=new_id(when), time=when, tool=tool, root=root.name, root_path=root.real_path,
                      connection=connection, client=client, status=RAN, kind=COMMAND,
                      note={"command": command, "cwd": cwd, "exit_code": exit_code, "duration": duration})
        store = self.store(root.real_path)
        if later and not self._closed:
            store.insert_later(entry)
            self._note_queue().put(store)
        else:
            store.insert(entry, None)
        return entry.id

    def _note_queue(self) -> queue.SimpleQueue[Store | None]:
        with self._lock:
            if self._notes is None:  # (a thread of its own, not an executor: a put costs a microsecond, not 50)
                self._notes = queue.SimpleQueue()
                self._note_thread = threading.Thread(target=_write_notes, args=(self._notes,),
                                                     name="rootbound-journal-notes", daemon=True)
                self._note_thread.start()
            return self._notes

    def close(self) -> None:
        for hook in self.after_commit:  # upkeep threads finish before the stores they use are closed
            stop = getattr(hook, "close", None)
            if stop is not None:
                stop()
        with self._lock:
            self._closed = True
            notes, thread, self._notes, self._note_thread = self._notes, self._note_thread, None, None
        if notes is not None and thread is not None:
            notes.put(None)
            thread.join()
        with self._lock:
            for store in self._stores.values():
                store.close()
            self._stores.clear()


def _write_notes(stores: queue.SimpleQueue[Store | None]) -> None:
    while (store := stores.get()) is not None:
        if not store.write_later():  # another process holds the journal locked: again in a moment, after the rest
            time.sleep(_NOTE_RETRY)
            stores.put(store)


def _drop_writer(path: str, fd: int) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path)
    with contextlib.suppress(OSError):
        os.close(fd)


class Change:
    """One change in progress (see the module docstring)."""

    def __init__(self, journal: Journal, tool: str, root: _Root, connection: str | None, client: str | None,
                 *, locked: bool) -> None:
        self.journal = journal
        self.tool = tool
        self.root = root
        self.connection = connection
        self.client = client
        self.time = time.time()
        self.id = new_id(self.time)
        self.undoes: list[str] = []
        self._locked = locked
        self._locks: dict[str, int] = {}
        self._paths: list[_Path] = []
        self._capturers: dict[str, Capturer] = {}
        self._written: list[Store] = []  # the store holding this change's pending entry
        self.store: Store | None = None  # the same, once ready() wrote it
        self._done = False
        self._ready = False
        self._hold(root.real_path)

    # -- declaring ---------------------------------------------------------------------------

    def _hold(self, root_path: str) -> Store:
        store = self.journal.store(root_path)
        if not self._locked and root_path not in self._locks:
            self._locks[root_path] = locks.shared(store.lock_path)
        return store

    def _capturer(self, store: Store) -> Capturer:
        cap = self._capturers.get(store.root_path)
        if cap is None:
            s = self.journal.settings
            cap = self._capturers[store.root_path] = Capturer(store, s.max_file_size, s.max_bytes,
                                                              self.journal.idents)
        return cap

    def _add(self, root: RootRef | None, rel: str, before: dict[str, Any], dirfd: int | None,
             name: str | None) -> None:
        if self._ready:
            raise RuntimeError("declare every path before ready()")
        where = _Root(root.name, root.real_path) if root is not None else self.root
        store = self._hold(where.real_path)
        self._paths.append(_Path(PathRecord(where.name, where.real_path, rel, before), store, dirfd, name))

    def _state(self, root: RootRef | None, dirfd: int, name: str) -> dict[str, Any]:
        store = self._hold(root.real_path if root is not None else self.root.real_path)
        # Blobs go to the journal of the entry's first root: the one that records this change.
        return self._capturer(self._primary() if self._paths else store).at(dirfd, name)

    def _primary(self) -> Store:
        return self._paths[0].store if self._paths else self.journal.store(self.root.real_path)

    def before_file(self, dirfd: int, name: str, rel: str, *, root: RootRef | None = None) -> None:
        """What stands at `name` in `dirfd` (root-relative `rel`) now — file, symlink, folder or nothing."""
        if self._ready:
            raise RuntimeError("declare every path before ready()")
        self._add(root, rel, self._state(root, dirfd, name), dirfd, name)

    before_tree = before_file  # a folder operation: the folder is listed, each file's content stored

    def before_absent(self, rel: str, *, root: RootRef | None = None, dirfd: int | None = None,
                      name: str | None = None) -> None:
        """`rel` does not exist (the caller just saw so). Give the handle to let commit read what was made."""
        self._add(root, rel, dict(ABSENT), dirfd, name)

    def before_move(self, src_dirfd: int, src_name: str, src_rel: str, dst_dirfd: int, dst_name: str, dst_rel: str,
                    *, src_root: RootRef | None = None, dst_root: RootRef | None = None) -> None:
        """A move: what stands at the destination is stored (it is replaced); the source is recorded by its
        digest and where it goes, so an undo moves it back."""
        if self._ready:
            raise RuntimeError("declare every path before ready()")
        dst = dst_root if dst_root is not None else self.root
        self._hold(src_root.real_path if src_root is not None else self.root.real_path)
        self._hold(dst.real_path)
        moved = {"kind": "moved", "to": {"root": dst.name, "root_path": dst.real_path, "path": dst_rel},
                 "digest": digest_now(src_dirfd, src_name, self.journal.idents)}
        self._add(src_root, src_rel, moved, src_dirfd, src_name)
        self._add(dst_root, dst_rel, self._state(dst_root, dst_dirfd, dst_name), dst_dirfd, dst_name)

    def made_folders(self, rels: list[str]) -> None:
        """The folders made to hold the path declared last (root-relative, innermost first): kept with its
        before-state, so that an undo removes them again when it leaves them empty."""
        if self._ready or not self._paths:
            raise RuntimeError("declare the path before the folders made for it, and both before ready()")
        self._paths[-1].record.before["made_folders"] = list(rels)

    # -- acting ------------------------------------------------------------------------------

    def ready(self) -> None:
        """Write the pending entry and make the before-states durable; call just before the change is made."""
        if self._ready:
            return
        if not self._paths:
            raise RuntimeError("a change must declare at least one path before ready()")
        self._ready = True
        store = self._primary()
        entry = Entry(id=self.id, time=self.time, tool=self.tool, root=self.root.name, root_path=store.root_path,
                      connection=self.connection, client=self.client, status=PENDING,
                      paths=[p.record for p in self._paths], undoes=self.undoes)
        cap = self._capturers.get(store.root_path)  # the only one: blobs go to the entry's journal (_state)
        if cap is not None and cap.unsynced:
            store.blobs.sync()
        store.insert(entry, self.journal.writer(), cap.rows if cap else (), cap.refs if cap else ())
        self.id = entry.id
        self._written.append(store)
        self.store = store

    def commit(self, after: Mapping[str, str] | None = None) -> str:
        """The change was made: record each path's after-state; returns the entry's id."""
        if self._done:
            return self.id
        try:
            self.ready()  # a caller that forgot: late, but the entry exists
            given = dict(after or {})
            afters: list[str | None] = []
            for p in self._paths:
                rel = p.record.path
                if rel in given:
                    afters.append(f"file:{given[rel]}" if ":" not in given[rel] else given[rel])
                    if p.dirfd is not None and p.name is not None and ":" not in given[rel]:
                        self._remember(p.dirfd, p.name, given[rel])
                elif p.dirfd is not None and p.name is not None:
                    afters.append(digest_now(p.dirfd, p.name, self.journal.idents))
                else:
                    afters.append(None)
            for p, a in zip(self._paths, afters, strict=True):
                p.record.after = a
            self._written[0].finish(self.id, APPLIED, afters, self.undoes if self.undoes else None)
        finally:
            self._release()
        for hook in self.journal.after_commit:
            try:
                hook(self)
            except Exception as exc:  # retention must never fail a change that was made
                log.warning("journal upkeep failed", extra={"error": str(exc)})
        return self.id

    def _remember(self, dirfd: int, name: str, sha: str) -> None:
        """The file just written has content `sha` and was fsynced: the next change of it need not re-read it."""
        try:
            st = lstat_or_none(dirfd, name)
        except OSError:
            return
        if st is not None:
            self.journal.idents.put(st, sha, synced=True)

    def abandon(self) -> None:
        """The change failed (or was never made): nothing is recorded as done."""
        if self._done:
            return
        try:
            if self._written:
                self._written[0].finish(self.id, NOT_APPLIED, [None] * len(self._paths))
        except Exception as exc:
            log.warning("could not mark a failed change in the journal", extra={"error": str(exc)})
        finally:
            self._release()

    def _release(self) -> None:
        self._done = True
        for fd in self._locks.values():
            with contextlib.suppress(OSError):
                os.close(fd)
        self._locks.clear()

    def __enter__(self) -> Change:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if not self._done:
            self.abandon()

