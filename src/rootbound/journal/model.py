"""What the journal records: entry ids, the state of a path before and after a change, and entries.

A *state* is a small JSON object describing what stood at a path:

* `{"kind": "absent"}`
* `{"kind": "file", "sha256", "size", "mode", "mtime_ns", "kept"}` — `kept` is false for a file
  over `max_file_size` (recorded by hash only: not undoable);
* `{"kind": "symlink", "text"}` — the link's own text, never what it points to;
* `{"kind": "tree", "mode", "items": [...], "fingerprint", "kept"}` — a folder: every entry below it
  (`{"rel", "kind", "mode", ...}` with the same fields as above), for folder operations;
* `{"kind": "moved", "to": {"root", "root_path", "path"}, "digest"}` — the source of a move: what stood
  there is the entry now at `to` (its digest then), which an undo moves back;
* `{"kind": "special", "type"}` — a FIFO, socket or device: recorded, not undoable.

A *digest* is one string that says whether a path is still as a change left it: `absent`,
`file:<sha256>`, `link:<sha256 of the text>`, `tree:<fingerprint>`, `special`. Files are compared by
content; folders by a fingerprint of their listing (names, types, modes, sizes, mtimes and link
texts), which costs a walk but no reading.
"""

from __future__ import annotations

import hashlib
import json
import secrets
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Final, Literal

__all__ = [
    "APPLIED", "COMMAND", "NOT_APPLIED", "PENDING", "RAN", "Entry", "PathRecord", "State", "digest_of", "new_id",
    "paths_text",
]

State = dict[str, Any]
Status = Literal["pending", "applied", "not_applied", "ran"]

PENDING: Final = "pending"  # declared, the change may or may not have happened yet
APPLIED: Final = "applied"
NOT_APPLIED: Final = "not_applied"  # the change failed, or a crash stopped it before anything changed
RAN: Final = "ran"  # a command's audit record: its effects are not journaled
COMMAND: Final = "command"  # the `kind` of such records (changes have kind "change")
ABSENT: Final[State] = {"kind": "absent"}

# Crockford's base32, lower case: its characters sort in the same order as their values, so ids made
# of a time followed by random bits sort by time as plain strings.
_ALPHABET: Final = "0123456789abcdefghjkmnpqrstvwxyz"


_last_id = 0
_id_lock = threading.Lock()


def new_id(now: float | None = None) -> str:
    """A short id that sorts by time: 44 bits of milliseconds and 16 random bits, as 12 base32 characters.

    Within one process ids only grow (a second id in the same millisecond is the first plus one), so
    a process's entries sort in the order it made them; across processes, by the millisecond."""
    global _last_id
    ms = int((time.time() if now is None else now) * 1000) & ((1 << 44) - 1)
    with _id_lock:
        value = max((ms << 16) | secrets.randbits(15), _last_id + 1)
        _last_id = value
    return "".join(_ALPHABET[(value >> shift) & 31] for shift in range(55, -1, -5))


def link_digest(text: str) -> str:
    return "link:" + hashlib.sha256(text.encode("utf-8", "surrogateescape")).hexdigest()


def fingerprint(items: list[dict[str, Any]], mode: int) -> str:
    """A folder's fingerprint from its listing (see the module docstring)."""
    rows = [[i["rel"], i["kind"], i.get("mode"), i.get("size"), i.get("mtime_ns"), i.get("text"), i.get("type")]
            for i in items]
    blob = json.dumps([mode, rows], separators=(",", ":"), ensure_ascii=False).encode("utf-8", "surrogateescape")
    return hashlib.sha256(blob).hexdigest()


def digest_of(state: State) -> str:
    """The digest a path has when it is in `state`."""
    kind = state["kind"]
    if kind == "absent":
        return "absent"
    if kind == "file":
        return f"file:{state['sha256']}"
    if kind == "symlink":
        return link_digest(state["text"])
    if kind == "tree":
        return f"tree:{state['fingerprint']}"
    if kind == "moved":
        return str(state["digest"])  # what stood there, now at `to`
    return "special"


class PathRecord:
    """One path a change touched: where it is, what stood there before, and its digest after.

    `before` is parsed from its JSON when first used: a listing needs only `kind` and `kept`."""

    __slots__ = ("_before", "after", "kept", "kind", "path", "root", "root_path")

    def __init__(self, root: str, root_path: str, path: str, before: State | str, after: str | None = None, *,
                 kind: str | None = None, kept: bool = True) -> None:
        self.root = root  # the root's name when the change was made (for display)
        self.root_path = root_path  # the root's host path: what the journal is keyed by
        self.path = path  # root-relative, '/'-separated
        self._before = before
        self.after = after  # digest; None while the change is pending
        if isinstance(before, dict):
            kind, kept = before["kind"], bool(before.get("kept", True))
        self.kind: str = kind or "absent"
        self.kept = kept

    @property
    def before(self) -> State:
        if isinstance(self._before, str):
            self._before = json.loads(self._before)
        assert isinstance(self._before, dict)
        return self._before

    def __repr__(self) -> str:
        return f"PathRecord({self.root}:{self.path}, {self.kind}, after={self.after})"


@dataclass(slots=True)
class Entry:
    """One change (or one command's audit record) in a root's journal."""

    id: str
    time: float
    tool: str
    root: str
    root_path: str
    connection: str | None
    client: str | None
    status: str
    kind: str = "change"
    paths: list[PathRecord] = field(default_factory=list)
    undoes: list[str] = field(default_factory=list)  # for an undo: the entries it reverted
    undone_by: str | None = None
    note: dict[str, Any] = field(default_factory=dict)  # a command's record: command, cwd, exit_code, ...
    added: int | None = None  # lines, once known (see query.fill_stats); -1: cannot be known
    removed: int | None = None
    shown: str = ""  # the paths as a listing shows them (paths_text), kept with the entry
    whole: bool = True  # false when a before-state was too large to keep (not undoable)

    @property
    def undoable(self) -> bool:
        return self.kind == "change" and self.status == APPLIED and self.undone_by is None


def paths_text(entry: Entry) -> str:
    """`root:path`, a move as `root:src -> dst`, several paths as the first and a count; a command: its cwd."""
    if entry.kind == COMMAND:
        return f"{entry.root}:{entry.note.get('cwd', '.')}"
    if not entry.paths:
        return entry.shown or f"{entry.root}:"
    first = entry.paths[0]
    text = f"{first.root}:{first.path}"
    if first.kind == "moved" and len(entry.paths) == 2:
        dst = entry.paths[1]
        return text + " -> " + (dst.path if dst.root_path == first.root_path else f"{dst.root}:{dst.path}")
    if len(entry.paths) > 1:
        text += f" (+{len(entry.paths) - 1} more)"
    return text
