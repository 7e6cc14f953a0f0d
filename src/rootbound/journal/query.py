"""Reading the journal: selecting entries, the line per change that `history` prints, and each change's diffs.

Selections span the journals of several roots, newest first. A change's "after" content is not kept
as such: it is the before-state blob of the next change of that path (content-addressed, the same
blob), or the file as it is now when it still has that content. When neither exists (a command
rewrote the file since), the diff says so.

+/- line counts are worked out when a change is first listed (for the newest `STATS_PER_LISTING`
changes that lack them) and kept in the entry, so a long history lists from the database alone.
"""

from __future__ import annotations

import datetime as dt
import fnmatch
import json
import os
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from rootbound.fs.beneath import open_beneath
from rootbound.journal.blobs import Damaged
from rootbound.journal.diffs import Diff, diff
from rootbound.journal.model import APPLIED, COMMAND, NOT_APPLIED, PENDING, Entry, PathRecord, paths_text
from rootbound.journal.settings import parse_duration
from rootbound.journal.store import Store

__all__ = ["STATS_PER_LISTING", "Found", "age", "describe", "entry_diffs", "find", "history_lines", "parse_since",
           "paths_text", "select"]

STATS_PER_LISTING: Final = 100
_READ: Final = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_DIR: Final = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
_UNKNOWN: Final = -1  # stats that cannot be worked out (kept, so they are not tried again)


@dataclass
class Found:
    store: Store
    entry: Entry


def parse_since(text: str, now: float | None = None) -> float:
    """A time from `30m`/`2h`/`14d` (that long ago) or an ISO date/time (local time unless it says)."""
    now = time.time() if now is None else now
    try:
        return now - parse_duration(text)
    except ValueError:
        pass
    try:
        when = dt.datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(f"--since {text!r}: give a duration (30m, 2h, 14d) or a date and time "
                         "(2026-11-26 or 2026-11-26T14:30)") from None
    return when.timestamp()


def _where(since: float | None = None, connection: str | None = None, client: str | None = None,
           ids: Iterable[str] | None = None, commands: bool = True) -> tuple[list[str], list[object]]:
    where: list[str] = []
    args: list[object] = []
    if since is not None:
        where.append("time >= ?")
        args.append(since)
    if connection is not None:
        where.append("connection = ?")
        args.append(connection)
    if client is not None:
        where.append("client = ?")
        args.append(client)
    if not commands:
        where.append("kind != ?")
        args.append(COMMAND)
    wanted = list(ids) if ids is not None else None
    if wanted is not None:
        where.append(f"id IN ({','.join('?' * len(wanted))})" if wanted else "0")
        args.extend(wanted)
    return where, args


def _for_store(store: Store, where: list[str], args: list[object], root_paths: set[str] | None
               ) -> tuple[str, list[object]]:
    """An entry lives in the journal of the root of its first path, so every entry of root R's journal
    touches R; entries of other journals must have a path in R."""
    conditions, values = list(where), list(args)
    if root_paths is not None and store.root_path not in root_paths:
        conditions.append("EXISTS (SELECT 1 FROM paths WHERE paths.entry = entries.id AND paths.root_path IN "
                          f"({','.join('?' * len(root_paths))}))")
        values.extend(sorted(root_paths))
    return " AND ".join(conditions), values


def _unique(stores: Iterable[Store]) -> list[Store]:
    seen: dict[str, Store] = {}
    for store in stores:
        seen.setdefault(store.dir, store)
    return list(seen.values())


def select(stores: Iterable[Store], *, root_paths: set[str] | None = None, path_glob: str | None = None,
           since: float | None = None, connection: str | None = None, client: str | None = None,
           ids: Iterable[str] | None = None, commands: bool = True, limit: int | None = None,
           paths: bool = True) -> list[Found]:
    """Entries of these journals that match every filter given, newest first (commands included unless not).
    `paths=False` leaves the entries' paths unread (`Entry.shown` says what a listing needs)."""
    where, args = _where(since, connection, client, ids, commands)
    found: list[Found] = []
    for store in _unique(stores):
        condition, values = _for_store(store, where, args, root_paths)
        for entry in store.entries(condition, values, None if path_glob else limit, paths=paths or bool(path_glob)):
            if path_glob and not any(_matches(p.path, path_glob) for p in entry.paths):
                continue
            found.append(Found(store, entry))
    found.sort(key=lambda f: f.entry.id, reverse=True)
    return found[:limit] if limit is not None else found


def _matches(path: str, pattern: str) -> bool:
    """A glob against a root-relative path; a pattern without '/' also matches the last component."""
    return fnmatch.fnmatchcase(path, pattern) or ("/" not in pattern and
                                                  fnmatch.fnmatchcase(path.rsplit("/", 1)[-1], pattern))


def find(stores: Iterable[Store], ident: str) -> list[Found]:
    """The entries an id names (a change that touched two roots' journals... has one id); a unique prefix of
    at least 4 characters also names one."""
    ident = ident.strip().lower()
    hits: list[Found] = []
    for store in stores:
        if len(ident) >= 12:
            entry = store.get(ident)
            if entry is not None:
                hits.append(Found(store, entry))
        elif len(ident) >= 4:
            for entry in store.entries("id LIKE ?", (ident + "%",), limit=3):
                hits.append(Found(store, entry))
    return hits


# -- contents -----------------------------------------------------------------------------------


def _current(root_fd: int | None, rel: str, digest: str) -> bytes | None:
    """The file at `rel` now, if it still has content `digest` (file:<sha256>)."""
    if root_fd is None or not digest.startswith("file:"):
        return None
    import hashlib

    parts = [p for p in rel.split("/") if p]
    try:
        dirfd = open_beneath(root_fd, parts[:-1], _DIR)
    except OSError:
        return None
    try:
        fd = os.open(parts[-1], _READ, dir_fd=dirfd)
    except OSError:
        return None
    finally:
        os.close(dirfd)
    try:
        chunks = []
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
    finally:
        os.close(fd)
    data = b"".join(chunks)
    return data if hashlib.sha256(data).hexdigest() == digest[5:] else None


def _blob(store: Store, sha: str | None) -> bytes | None:
    if not sha or not store.blobs.has(sha):
        return None
    try:
        return store.blobs.read(sha)
    except Damaged:
        return None


def path_diff(store: Store, record: PathRecord, root_fds: Mapping[str, int]) -> Diff:
    """What a change did to one path."""
    before, after = record.before, record.after
    kind = before["kind"]
    if kind == "tree":
        files = sum(1 for i in before["items"] if i["kind"] == "file")
        gone = "removed" if after == "absent" else "replaced"
        return Diff(record.path, note=f"folder {gone}: {len(before['items'])} entries ({files} files)"
                    + ("" if before.get("kept", True) else "; too large to keep, not undoable"), removed=0, added=0)
    if kind == "moved":
        to = before["to"]
        where = to["path"] if to["root_path"] == record.root_path else f"{to['root']}:{to['path']}"
        return Diff(record.path, note=f"moved to {where}", added=0, removed=0)
    if kind == "symlink":
        return Diff(record.path, note=f"symlink ({before['text']}) " +
                    ("removed" if after == "absent" else "replaced"), added=0, removed=0)
    if kind == "special":
        return Diff(record.path, note=f"{before['type']} removed", added=0, removed=0)
    old: bytes | None = None
    if kind == "file":
        if not before.get("kept", True):
            return Diff(record.path, note=f"file of {before['size']} bytes: larger than max_file_size, recorded by "
                        "hash only (not undoable)")
        old = _blob(store, before["sha256"])
        if old is None:
            return Diff(record.path, note="the journal's copy of the old content is missing or damaged")
    if after is None:
        return Diff(record.path, note="the change did not complete")
    if after == "absent":
        return diff(record.path, old, None)
    if after.startswith("tree:"):
        return Diff(record.path, note="now a folder", added=0, removed=0)
    if not after.startswith("file:"):
        return Diff(record.path, note=f"now a {after.split(':')[0]}", added=0, removed=0)
    new = _blob(store, after[5:]) or _current(root_fds.get(record.root_path), record.path, after)
    if new is None:
        return Diff(record.path, note="its content after this change is gone (changed since outside the file "
                    "tools); the old content is kept")
    return diff(record.path, old, new)


def entry_diffs(found: Found, root_fds: Mapping[str, int]) -> list[Diff]:
    return [path_diff(found.store, p, root_fds) for p in found.entry.paths]


def fill_stats(found: list[Found], root_fds: Mapping[str, int], most: int = STATS_PER_LISTING) -> None:
    """Work out and keep the +/- counts of up to `most` of these entries that lack them, newest first."""
    todo = [f for f in found if f.entry.added is None and f.entry.kind != COMMAND
            and f.entry.status not in (PENDING, NOT_APPLIED)][:most]
    for f in todo:
        full = f.store.get(f.entry.id) if not f.entry.paths else f.entry  # a listing reads no paths
        if full is None:
            continue
        added = removed = 0
        for d in entry_diffs(Found(f.store, full), root_fds):
            if d.added is None or d.removed is None:
                added = removed = _UNKNOWN
                break
            added, removed = added + d.added, removed + d.removed
        f.entry.added, f.entry.removed = added, removed
        f.store.set_stats(f.entry.id, added, removed)


# -- the history line ---------------------------------------------------------------------------


def age(seconds: float) -> str:
    seconds = max(0.0, seconds)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{int(seconds // size)}{unit} ago"
    return f"{int(seconds)}s ago"


def describe(entry: Entry, *, stats: bool = True) -> str:
    """The last column: +/- lines (unless not `stats`), or what a command was, and the status when it is not
    plain applied."""
    if entry.kind == COMMAND:
        code = entry.note.get("exit_code")
        return f"$ {entry.note.get('command', '')}" + (f"  (exit {code})" if code is not None else "") + \
            "  [its changes are not journaled]"
    parts = []
    if stats and entry.added is not None and entry.added >= 0 and entry.removed is not None:
        parts.append(f"+{entry.added} -{entry.removed}")
    if entry.undoes:
        parts.append(f"undoes {', '.join(entry.undoes)}")
    if entry.status == PENDING:
        parts.append("[in progress]")
    elif entry.status == NOT_APPLIED:
        parts.append("[not applied]")
    elif entry.undone_by:
        parts.append(f"[undone by {entry.undone_by}]")
    elif entry.status == APPLIED and not entry.whole:
        parts.append("[not undoable: over max_file_size]")
    return "  ".join(parts)


def history_lines(stores: Iterable[Store], *, now: float | None = None, root_fds: Mapping[str, int] | None = None,
                  root_paths: set[str] | None = None, path_glob: str | None = None, since: float | None = None,
                  connection: str | None = None, client: str | None = None, limit: int | None = None) -> list[str]:
    """One line per entry: id, age, client, tool, root:path, +/- lines (newest first).

    The common listing reads one flat query per journal and formats its rows as they come (10,000
    entries in a few tens of milliseconds); a path filter needs the paths, and goes through `select`."""
    now = time.time() if now is None else now
    if path_glob:
        found = select(stores, root_paths=root_paths, path_glob=path_glob, since=since, connection=connection,
                       client=client, limit=limit)
        fill_stats(found, root_fds or {})
        return [line(f.entry, now) for f in found]
    where, args = _where(since, connection, client)
    rows: list[tuple[Store, tuple[Any, ...]]] = []
    for store in _unique(stores):
        condition, values = _for_store(store, where, args, root_paths)
        rows.extend((store, r) for r in store.listing(condition, values, limit))
    rows.sort(key=lambda sr: sr[1][0], reverse=True)
    if limit is not None:
        rows = rows[:limit]
    _fill_row_stats(rows, root_fds or {})
    return [_row_line(r, now) for _, r in rows]


def _fill_row_stats(rows: list[tuple[Store, tuple[Any, ...]]], root_fds: Mapping[str, int]) -> None:
    todo = [i for i, (_, r) in enumerate(rows) if r[_ADDED] is None and r[_KIND] != COMMAND
            and r[_STATUS] not in (PENDING, NOT_APPLIED)][:STATS_PER_LISTING]
    if not todo:
        return
    found = []
    for i in todo:
        store, r = rows[i]
        entry = store.get(r[0])
        if entry is not None:
            found.append((i, Found(store, entry)))
    fill_stats([f for _, f in found], root_fds)
    for i, f in found:
        store, r = rows[i]
        rows[i] = (store, (*r[:_ADDED], f.entry.added, f.entry.removed, *r[_ADDED + 2:]))


# Columns of Store.listing rows.
_ID, _TIME, _TOOL, _ROOT, _CLIENT, _STATUS, _KIND, _UNDOES, _UNDONE_BY, _NOTE, _ADDED, _REMOVED, _SHOWN, _WHOLE = \
    range(14)


def _row_line(r: tuple[Any, ...], now: float) -> str:
    if r[_KIND] == COMMAND or r[_UNDOES] or r[_STATUS] != APPLIED or not r[_WHOLE]:
        entry = Entry(r[_ID], r[_TIME], r[_TOOL], r[_ROOT], "", None, r[_CLIENT], r[_STATUS], r[_KIND], [],
                      json.loads(r[_UNDOES]) if r[_UNDOES] else [], r[_UNDONE_BY],
                      json.loads(r[_NOTE]) if r[_NOTE] else {}, r[_ADDED], r[_REMOVED], r[_SHOWN], bool(r[_WHOLE]))
        return line(entry, now)
    added = r[_ADDED]
    stats = f"  +{added} -{r[_REMOVED]}" if added is not None and added >= 0 else ""
    undone = f"  [undone by {r[_UNDONE_BY]}]" if r[_UNDONE_BY] else ""
    client = (r[_CLIENT] or "-")[:20]
    return f"{r[_ID]}  {age(now - r[_TIME]):>8}  {client:20}  {r[_TOOL]:14}  {r[_SHOWN]}{stats}{undone}"


def line(entry: Entry, now: float) -> str:
    return (f"{entry.id}  {age(now - entry.time):>8}  {(entry.client or '-')[:20]:20}  {entry.tool:14}  "
            f"{entry.shown or paths_text(entry)}  {describe(entry)}").rstrip()
