"""The change journal's hook in the fs core: who is changing files, and the change each mutating door records.

`tools.base.call_tool` sets, per call, which journal records changes and for whom (tool, connection,
client) — a context variable, as `bounds` carries the deadline, since the doors sit below the handlers
and copy it into the worker thread. Each mutating door of `Root`/`Target`/`transfer` then opens a
`Recording` (`recording(root)`) and drives the journal's seam through it (`journal/change.py`):
declare the before-states through its handles, `ready()` just before the change becomes visible,
`commit()` after. Outside a call, or with `journal: off`, `recording` gives `NOTHING`, which costs
nothing. The fs core does not import the journal: it knows it only by the `Recorder` protocol.

A journal failure before the change refuses the change (`Kind.JOURNAL_FAILED`): a change that could not be
recorded is not made. A failure after it (commit) is logged: the change was made, and the next start
settles the entry it left pending.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator, Mapping
from typing import Any, NamedTuple, Protocol

from rootbound.errors import Failure, Kind, ToolError
from rootbound.logs import log
from rootbound.scopes import scoped

__all__ = ["NOTHING", "Recorder", "Recording", "attributed", "note_command", "recording"]


class RootRef(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def real_path(self) -> str: ...


class Recorder(Protocol):
    """What the fs core needs of the journal (`journal.change.Journal`)."""

    def begin(self, *, tool: str, root: RootRef, connection: str | None = None,
              client: str | None = None) -> Any: ...

    def note_command(self, *, root: RootRef, tool: str, command: str, cwd: str, exit_code: int | None,
                     connection: str | None = None, client: str | None = None, duration: float | None = None,
                     started: float | None = None, later: bool = False) -> str: ...


class _Who(NamedTuple):  # made on every call's path: a tuple is cheaper to make than a frozen dataclass
    journal: Recorder
    tool: str
    connection: str | None
    client: str | None


_current: contextvars.ContextVar[_Who | None] = contextvars.ContextVar("rootbound_journal", default=None)


def attributed(journal: Recorder | None, tool: str, connection: str | None, client: str | None
               ) -> scoped[_Who | None]:
    """Within this block (one tool call), the changes the doors make are recorded in `journal` (None: not at all)."""
    return scoped(_current, None if journal is None else _Who(journal, tool, connection, client))


def note_command(root: RootRef, cwd: str, command: str, exit_code: int | None, duration: float, started: float
                 ) -> None:
    """Put the audit record of a command that ran in `root` (cwd: root-relative) in the journal's timeline, for the
    current call; its effects are not journaled. Never fails the command: a failure is logged. Written off the
    answer's path (`later`): the caller waits for no SQLite transaction."""
    who = _current.get()
    if who is None:
        return
    try:
        who.journal.note_command(root=root, tool=who.tool, command=command, cwd=cwd, exit_code=exit_code,
                                 connection=who.connection, client=who.client, duration=duration, started=started,
                                 later=True)
    except Exception as exc:
        log.warning("journal could not record a command", extra={"error": str(exc)[:200]})


def _refused(exc: Exception) -> Failure:
    log.warning("journal failed; the change was refused", extra={"error": str(exc)[:200]})
    return Failure(Kind.JOURNAL_FAILED)


class Recording:
    """One change being recorded: the seam's calls, with a journal failure before the change refusing it."""

    def __init__(self, change: Any) -> None:
        self._change = change

    @property
    def on(self) -> bool:
        return self._change is not None

    def _call(self, method: str, *args: Any, **kwargs: Any) -> None:
        if self._change is None:
            return
        try:
            getattr(self._change, method)(*args, **kwargs)
        except ToolError:
            raise
        except Exception as exc:
            raise _refused(exc) from None

    def before_file(self, dirfd: int, name: str, rel: str, *, root: RootRef | None = None) -> None:
        self._call("before_file", dirfd, name, rel, root=root)

    def before_tree(self, dirfd: int, name: str, rel: str, *, root: RootRef | None = None) -> None:
        self._call("before_tree", dirfd, name, rel, root=root)

    def before_absent(self, rel: str, *, dirfd: int | None = None, name: str | None = None,
                      root: RootRef | None = None) -> None:
        self._call("before_absent", rel, dirfd=dirfd, name=name, root=root)

    def before_move(self, src_dirfd: int, src_name: str, src_rel: str, dst_dirfd: int, dst_name: str, dst_rel: str,
                    *, src_root: RootRef | None = None, dst_root: RootRef | None = None) -> None:
        self._call("before_move", src_dirfd, src_name, src_rel, dst_dirfd, dst_name, dst_rel,
                   src_root=src_root, dst_root=dst_root)

    def made_folders(self, rels: tuple[str, ...]) -> None:
        """The parent folders made for the path declared last (innermost first): an undo removes them when empty."""
        if rels:
            self._call("made_folders", list(rels))

    def ready(self) -> None:
        """Just before the change becomes visible: the entry and the before-states are durable."""
        self._call("ready")

    def commit(self, after: Mapping[str, str] | None = None) -> None:
        if self._change is None:
            return
        try:
            self._change.commit(after)
        except Exception as exc:  # the change was made: say so in the log; the next start settles the entry
            log.warning("journal could not record a change that was made", extra={"error": str(exc)[:200]})

    def abandon(self) -> None:
        if self._change is not None:
            self._change.abandon()  # never raises: it logs


NOTHING = Recording(None)


@contextlib.contextmanager
def recording(root: RootRef) -> Iterator[Recording]:
    """The change a door is about to make in `root`, recorded for the current call (NOTHING outside one).

    Abandoned when the block fails before `commit` (an entry written by `ready` is marked not applied)."""
    who = _current.get()
    if who is None:
        yield NOTHING
        return
    try:
        change = who.journal.begin(tool=who.tool, root=root, connection=who.connection, client=who.client)
    except Exception as exc:
        raise _refused(exc) from None
    rec = Recording(change)
    try:
        yield rec
    finally:
        rec.abandon()  # a no-op after commit
