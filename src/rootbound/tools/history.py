"""history and undo: an agent lists and reverts its own connection's changes (the change journal, issue 17).

Thin: the journal does the work (`journal.query`, `journal.undo`). Both see only the calling connection's entries
(`Caller.connection`): another connection's change is never listed, and naming one is refused.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

from pydantic import BaseModel, Field

from rootbound.errors import ToolError
from rootbound.logs import caller_fields
from rootbound.tools.base import Args, CallContext, RootName, ToolSpec, read_only, writes

if TYPE_CHECKING:  # the journal (and SQLite) load when a journal is opened, not at start
    from rootbound.journal import query
    from rootbound.journal.change import Journal

__all__ = ["TOOLS"]

_OFF = "the change journal is off on this server (journal: off), so there is no history to list or undo"


def _journal(ctx: CallContext) -> tuple[Journal, str]:
    from rootbound.journal.change import Journal

    journal, connection = ctx.journal, ctx.caller.connection
    if not isinstance(journal, Journal):
        raise ToolError(_OFF)
    if not connection:
        raise ToolError("this call has no connection to name its changes by; nothing to list or undo")
    return journal, connection


class HistoryArgs(Args):
    root: RootName
    path: Annotated[str | None, Field(description='Only changes of paths matching this glob, e.g. "src/*.py".')] = None
    since: Annotated[str | None, Field(description="Only changes this recent: 90s, 30m, 2h, 1d.")] = None
    limit: Annotated[int, Field(ge=1, le=1000, description="At most this many, newest first.")] = 50


class HistoryResult(BaseModel):
    changes: list[str] = Field(description="One line per change, newest first: id, age, client, tool, path, "
                                           "+/- lines. Commands run are listed too (their effects are not undoable).")


def history(ctx: CallContext, args: HistoryArgs) -> HistoryResult:
    from rootbound.journal import query

    root = ctx.roots.get_for(args.root, "history")
    journal, connection = _journal(ctx)
    try:
        since = query.parse_since(args.since) if args.since else None
    except ValueError as exc:
        raise ToolError(f"since: {exc}") from None
    lines = query.history_lines([journal.store(root.real_path)], root_fds={root.real_path: root.handle()},
                                path_glob=args.path, since=since, connection=connection, limit=args.limit)
    return HistoryResult(changes=lines)


class UndoArgs(Args):
    root: RootName
    ids: Annotated[list[str], Field(min_length=1, max_length=100,
                                    description="Ids of your changes to revert (from history); newest undone first.")]
    dry_run: Annotated[bool, Field(description="Say what would be done, change nothing.")] = False


class UndoResult(BaseModel):
    outcomes: list[str] = Field(description="Per path: restored, removed, moved back, unchanged or refused (why).")
    undone: list[str] = Field(description="Ids fully reverted.")
    undo_id: str | None = Field(default=None, description="This undo's own id: undo it to redo.")


def undo_changes(ctx: CallContext, args: UndoArgs) -> UndoResult:
    from rootbound.journal import query, undo

    root = ctx.roots.get_for(args.root, "undo")
    journal, connection = _journal(ctx)
    store = journal.store(root.real_path)
    found: list[query.Found] = []
    for ident in dict.fromkeys(args.ids):
        hits = query.find([store], ident)
        if len(hits) != 1 or hits[0].entry.kind == "command":
            raise ToolError(f"no change {ident[:40]!r} in root {root.name!r}'s history; nothing was undone"
                            if not hits or hits[0].entry.kind == "command" else
                            f"{ident[:40]!r} names several changes; give more of the id; nothing was undone")
        if hits[0].entry.connection != connection:
            raise ToolError(f"{ident[:40]!r} is not your change (another connection made it): you may undo only "
                            "your own; nothing was undone")
        found.extend(hits)
    fds = {r.real_path: r.handle() for r in ctx.roots.values()}
    report = undo.undo(journal, found, fds, dry_run=args.dry_run, connection=connection,
                       client=caller_fields().get("client"))
    return UndoResult(outcomes=[o.text() for o in report.outcomes], undone=report.undone, undo_id=report.undo_id)


TOOLS = [
    ToolSpec(
        "history", "Your changes",
        "List the changes this connection made in a root (write, edit, patch, remove, copy, move...), newest first, "
        "with ids for undo. Commands run are listed too; their effects are not recorded.",
        HistoryArgs, HistoryResult, read_only("Your changes"), history),
    ToolSpec(
        "undo", "Undo your changes",
        "Revert changes this connection made (ids from history), newest first. A file changed since by someone "
        "else is refused, not overwritten. The undo is recorded too: undo its id to redo.",
        UndoArgs, UndoResult, writes("Undo your changes", destructive=True, idempotent=False), undo_changes),
]
