"""Undo: put back the before-states of a set of changes, newest first, refusing per file what changed since.

    report = undo(journal, query.select(...), root_fds, force=False, dry_run=False, connection=..., client=...)

1. The roots involved are locked exclusively (locks.py): no change of a running server is half made
   under the undo, and none starts until it is over. Entries a dead server left pending are settled
   first (recovery.py); the entries are then read again, so what is decided is current.
2. A plan is made newest first on digests alone: each path must still be what its change left (its
   after-digest), as the undo of the newer changes in the same run will have left it; otherwise that
   path is refused ("changed since"), naming the newer change that did it if the journal has one,
   unless `force`. A move is one unit: the destination must still hold what was moved there and the
   source be free, then it is moved back. Before-states that cannot be restored (over
   `max_file_size`, a FIFO or device, a damaged blob) are refused with the reason.
3. `dry_run` stops there. Otherwise the undo is itself a journaled change (tool `undo`, with the ids
   it reverts): the current state of every path it touches is captured first, so the undo can be
   undone. Each action re-checks its path just before acting, then restores through handles
   (restore.py). A change is marked undone only when every one of its paths was restored; undoing an
   undo puts the changes it had reverted back in force.

Works from any process: the CLI while the server runs or not, or the server itself (the page).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from rootbound.fs.beneath import EscapeError, Located
from rootbound.journal import locks
from rootbound.journal.blobs import Damaged
from rootbound.journal.change import Change, Journal, _Root
from rootbound.journal.model import APPLIED, COMMAND, NOT_APPLIED, PENDING, Entry, PathRecord, digest_of
from rootbound.journal.query import Found
from rootbound.journal.recovery import current_digest, settle
from rootbound.journal.restore import located, move_back, put, remove_made_folders
from rootbound.journal.store import Store

__all__ = ["Outcome", "Report", "undo"]


@dataclass
class Outcome:
    entry: str
    path: str  # root:path
    action: str  # restored | removed | moved back | unchanged | refused | skipped  ("would ..." in a dry run)
    reason: str = ""

    def text(self) -> str:
        return f"{self.entry}  {self.action:12}  {self.path}" + (f"  ({self.reason})" if self.reason else "")


@dataclass
class Report:
    outcomes: list[Outcome] = field(default_factory=list)
    undone: list[str] = field(default_factory=list)  # entries fully reverted
    undo_id: str | None = None  # the journal entry of this undo
    dry_run: bool = False

    @property
    def refused(self) -> list[Outcome]:
        return [o for o in self.outcomes if o.action == "refused"]

    def lines(self) -> list[str]:
        lines = [o.text() for o in self.outcomes]
        if self.dry_run:
            lines.append("dry run: nothing was changed")
        elif self.undo_id:
            lines.append(f"undone as {self.undo_id} (undo that to redo)")
        elif not self.outcomes:
            lines.append("nothing to undo")
        return lines


@dataclass
class _Step:
    entry: Entry
    store: Store
    paths: list[PathRecord]  # one path, or a move's (source, destination)
    expect: list[str]  # digests each path must have just before acting


def _shown(p: PathRecord) -> str:
    return f"{p.root}:{p.path}"


def _groups(paths: list[PathRecord]) -> list[list[PathRecord]]:
    out, i = [], 0
    while i < len(paths):
        if paths[i].before.get("kind") == "moved" and i + 1 < len(paths):
            out.append([paths[i], paths[i + 1]])
            i += 2
        else:
            out.append([paths[i]])
            i += 1
    return out


def _skip_reason(entry: Entry) -> str | None:
    if entry.kind == COMMAND:
        return "a command: its changes are not journaled"
    if entry.undone_by:
        return f"already undone by {entry.undone_by}"
    if entry.status == NOT_APPLIED:
        return "this change was never applied"
    if entry.status == PENDING:
        return "still in progress"
    return None if entry.status == APPLIED else f"status {entry.status}"


def _unrestorable(state: dict[str, object], store: Store) -> str | None:
    kind = state.get("kind")
    if kind == "special":
        return f"it was a {state.get('type')}, which cannot be recreated"
    if kind in ("file", "tree") and not state.get("kept", True):
        return "not undoable: larger than journal.max_file_size (recorded by hash only)" if kind == "file" else \
            "not undoable: the folder was too large to keep"
    if kind == "file" and not store.blobs.has(str(state["sha256"])):
        return "the journal's copy of the old content is missing"
    if kind == "tree":
        items = state.get("items")
        for item in items if isinstance(items, list) else []:
            if item.get("kind") == "file" and not store.blobs.has(item.get("sha256", "")):
                return f"the journal's copy of {item.get('rel')} is missing"
    return None


class _Planner:
    def __init__(self, root_fds: Mapping[str, int], force: bool) -> None:
        self.root_fds = root_fds
        self.force = force
        self.sim: dict[tuple[str, str], str] = {}

    def now(self, p: PathRecord) -> str:
        key = (p.root_path, p.path)
        if key not in self.sim:
            self.sim[key] = current_digest(self.root_fds[p.root_path], p.path)
        return self.sim[key]

    def set(self, p: PathRecord, digest: str) -> None:
        self.sim[(p.root_path, p.path)] = digest


def _changed_by(store: Store, entry: Entry, p: PathRecord) -> str:
    rows = store.query("SELECT entries.id FROM paths JOIN entries ON entries.id = paths.entry "
                       "WHERE paths.root_path = ? AND paths.path = ? AND entries.id > ? AND entries.status = ? "
                       "AND entries.undone_by IS NULL ORDER BY entries.id DESC LIMIT 1",
                       (p.root_path, p.path, entry.id, APPLIED))
    if rows:
        return f"changed since by {rows[0][0]}: undo that too, or use force"
    return "changed since, outside the journaled file tools: not restored; use force to restore it anyway"


def _plan(found: list[Found], planner: _Planner) -> tuple[list[_Step], list[Outcome], set[str]]:
    steps: list[_Step] = []
    outcomes: list[Outcome] = []
    partial: set[str] = set()
    for f in sorted(found, key=lambda f: f.entry.id, reverse=True):
        entry = f.entry
        reason = _skip_reason(entry)
        if reason:
            outcomes.append(Outcome(entry.id, ", ".join(_shown(p) for p in entry.paths) or entry.root, "skipped",
                                    reason))
            continue
        for group in _groups(entry.paths):
            shown = " -> ".join(_shown(p) for p in group)
            missing = [p.root for p in group if p.root_path not in planner.root_fds]
            if missing:
                outcomes.append(Outcome(entry.id, shown, "refused", f"root {missing[0]} is not served here"))
                partial.add(entry.id)
                continue
            why = _unrestorable(group[-1].before, f.store)
            nows = [planner.now(p) for p in group]
            if why is None and not planner.force:
                for p, now in zip(group, nows, strict=True):
                    if now != p.after:
                        why = _changed_by(f.store, entry, p)
                        break
            if why is None and len(group) == 2 and nows[1] == "absent":
                why = "nothing stands at the destination to move back"
            if why is not None:
                outcomes.append(Outcome(entry.id, shown, "refused", why))
                partial.add(entry.id)
                continue
            steps.append(_Step(entry, f.store, group, nows))
            if len(group) == 2:
                planner.set(group[0], nows[1])
                planner.set(group[1], digest_of(group[1].before))
            else:
                planner.set(group[0], digest_of(group[0].before))
    return steps, outcomes, partial


def _action(step: _Step) -> str:
    if len(step.paths) == 2:
        return "moved back"
    p = step.paths[0]
    if step.expect[0] == digest_of(p.before):
        return "unchanged"
    return "removed" if p.before["kind"] == "absent" else "restored"


_WOULD = {"restored": "would restore", "removed": "would remove", "moved back": "would move back"}


def _stores_of(journal: Journal, found: Iterable[Found]) -> list[Store]:
    stores: dict[str, Store] = {}
    for f in found:
        stores[f.store.dir] = f.store
        for p in f.entry.paths:
            s = journal.store(p.root_path)
            stores[s.dir] = s
    return list(stores.values())


def undo(journal: Journal, found: list[Found], root_fds: Mapping[str, int], *, force: bool = False,
         dry_run: bool = False, connection: str | None = None, client: str | None = None,
         timeout: float = 30.0) -> Report:
    """Revert the changes in `found` (see the module docstring). `root_fds`: root host path -> open handle."""
    report = Report(dry_run=dry_run)
    if not found:
        return report
    stores = _stores_of(journal, found)
    with locks.exclusive([s.lock_path for s in stores], timeout=timeout):
        for s in stores:
            settle(s, journal.settings.dir, dict(root_fds))
        fresh = []
        for f in found:
            entry = f.store.get(f.entry.id)
            if entry is not None:
                fresh.append(Found(f.store, entry))
        steps, refusals, partial = _plan(fresh, _Planner(root_fds, force))
        report.outcomes.extend(refusals)
        if dry_run or not steps:
            report.outcomes.extend(Outcome(s.entry.id, " -> ".join(_shown(p) for p in s.paths),
                                           _WOULD.get(_action(s), _action(s)) if dry_run else _action(s))
                                   for s in steps)
            _order(report)
            return report
        _perform(journal, steps, partial, root_fds, report, connection, client)
    _order(report)
    return report


def _order(report: Report) -> None:
    report.outcomes.sort(key=lambda o: o.entry, reverse=True)


def _perform(journal: Journal, steps: list[_Step], partial: set[str], root_fds: Mapping[str, int], report: Report,
             connection: str | None, client: str | None) -> None:
    first = steps[0].paths[0]
    change = journal.begin(tool="undo", root=_Root(first.root, first.root_path), connection=connection,
                           client=client, locked=True)
    locs: dict[tuple[str, str], Located] = {}
    try:
        usable = []
        for step in steps:
            why = _locate_all(step, locs, root_fds, change)
            if why is None:
                usable.append(step)
            else:
                report.outcomes.append(Outcome(step.entry.id, " -> ".join(_shown(p) for p in step.paths), "refused",
                                               why))
                partial.add(step.entry.id)
        steps = usable
        if not steps:
            change.abandon()
            return
        candidates = sorted({s.entry.id for s in steps} - partial, reverse=True)
        change.undoes = candidates
        change.ready()
        failed: set[str] = set()
        for step in steps:
            outcome = _act(step, locs, root_fds)
            report.outcomes.append(outcome)
            if outcome.action == "refused":
                failed.add(step.entry.id)
        undone = [i for i in candidates if i not in failed]
        change.undoes[:] = undone
        report.undo_id = change.commit()
        _mark(journal, steps, undone, report.undo_id)
        report.undone = undone
    except BaseException:
        change.abandon()
        raise
    finally:
        for loc in locs.values():
            loc.close()


def _locate_all(step: _Step, locs: dict[tuple[str, str], Located], root_fds: Mapping[str, int],
                change: Change) -> str | None:
    """Open the parent of each path of a step beneath its root, and capture its current state into the undo's
    own entry; the reason if a path cannot be reached."""
    for i, p in enumerate(step.paths):
        key = (p.root_path, p.path)
        if key in locs:
            continue
        # A folder to hold what comes back is made beneath the root; nothing is made just to remove a file.
        needed = p.before["kind"] != "absent" or (len(step.paths) == 2 and i == 0)
        try:
            loc = located(root_fds[p.root_path], p.path, make_parents=needed)
        except FileNotFoundError:
            continue  # nothing there, nor a folder for it: nothing to remove either
        except EscapeError:
            return "a symlink on its way now leads outside the root: not followed"
        except OSError as exc:
            return f"cannot reach it: {exc.strerror}"
        locs[key] = loc
        change.before_file(loc.dirfd, loc.name, p.path, root=_Root(p.root, p.root_path))
    return None


def _act(step: _Step, locs: dict[tuple[str, str], Located], root_fds: Mapping[str, int]) -> Outcome:
    shown = " -> ".join(_shown(p) for p in step.paths)
    action = _action(step)
    for p, expected in zip(step.paths, step.expect, strict=True):
        if current_digest(root_fds[p.root_path], p.path) != expected:
            return Outcome(step.entry.id, shown, "refused", "changed while the undo ran; not restored")
    try:
        if len(step.paths) == 2:
            src, dst = step.paths
            move_back(locs[(src.root_path, src.path)], locs[(dst.root_path, dst.path)])
            if dst.before["kind"] != "absent":
                back = locs[(dst.root_path, dst.path)]
                put(back.dirfd, back.name, step.store.blobs, dst.before)
        elif action != "unchanged":
            p = step.paths[0]
            loc = locs.get((p.root_path, p.path))
            if loc is not None:
                put(loc.dirfd, loc.name, step.store.blobs, p.before)
    except Damaged:
        return Outcome(step.entry.id, shown, "refused", "the journal's copy of the old content is damaged "
                       "(written to after it was stored); nothing was changed")
    except OSError as exc:
        return Outcome(step.entry.id, shown, "refused", f"could not restore it: {exc.strerror}")
    for p in step.paths:
        remove_made_folders(root_fds[p.root_path], p.before.get("made_folders", []))
    return Outcome(step.entry.id, shown, action)



def _mark(journal: Journal, steps: list[_Step], undone: list[str], undo_id: str) -> None:
    by_store: dict[str, tuple[Store, list[Entry]]] = {}
    for step in steps:
        if step.entry.id in undone:
            by_store.setdefault(step.store.dir, (step.store, []))[1].append(step.entry)
    for store, entries in by_store.values():
        store.mark_undone({e.id for e in entries}, undo_id)
        for e in entries:
            if e.undoes:  # an undo undone: what it had reverted is in force again
                for other in journal.stores():
                    with contextlib.suppress(Exception):
                        other.mark_undone(e.undoes, None, previous=e.id)
