"""The search tools: grep (file contents) and glob (file names), thin over their engine (`rootbound.grep`).

Each handler checks its arguments, opens the starting path beneath the root's handle
(in-root symlinks followed, outside ones refused) and hands the open handle to the
engine, which walks and searches beneath it and stops at `max_results`
(`truncated: true`) or `timeout_seconds` (`timed_out: true`), returning what it found
so far. The work runs in a worker thread that also stops when the client cancels the call.

Patterns (glob `pattern`/`regex`, grep `glob_filter` with a "/") are matched
against paths relative to `path`; results are relative to the root.
"""

from __future__ import annotations

import operator
import os
import stat
from typing import Annotated, Literal

from pydantic import BaseModel, Field
from typing_extensions import TypedDict

from rootbound.errors import ToolError
from rootbound.fs import Kinds, Root, bounds, display_path, file_type, split_path
from rootbound.fs.ignores import Ignores
from rootbound.fs.trees import OTHER
from rootbound.grep.clock import Clock
from rootbound.grep.contents import FilterError, Grep, Match, Query
from rootbound.grep.names import Glob
from rootbound.grep.scanner import PatternError
from rootbound.tools import render
from rootbound.tools.base import (
    Args,
    CallContext,
    PlainResult,
    RootName,
    ToolSpec,
    iso_time,
    loose_list,
    read_only,
)
from rootbound.tools.reading import printable

__all__ = ["TOOLS"]

MAX_RESULTS_LIMIT = 100_000

SearchPath = str  # the folder to search
MaxResults = Annotated[int, Field(ge=1, le=MAX_RESULTS_LIMIT)]
TimeoutSeconds = Annotated[float, Field(gt=0, le=3600)]
IncludeIgnored = Annotated[bool, Field(description="Also search .git/ and what .gitignore/.ignore leave out.")]
MaxDepth = Annotated[int | None, Field(ge=0, description="1: only entries directly in path.")]


def _clock(seconds: float) -> Clock:
    """The call's own timeout_seconds, and the client's cancellation (the worker thread running the
    call is never abandoned: it stops here, and only then frees its worker)."""
    bound = bounds.current()
    return Clock(seconds, bound.cancelled) if bound is not None else Clock(seconds)


def _start_dir(root: Root, path: str) -> tuple[int, os.stat_result, str]:
    """Open `path` (in-root symlinks followed, outside ones refused); return it with its display prefix.

    Opened for reading only if it is a directory or a regular file (`Root.open`): opening a device
    can have effects of its own, and opening a FIFO wakes a writer waiting on it. Anything else comes
    back as an O_PATH handle, for the caller to refuse by its `st`.
    """
    opened = root.open(path, Kinds.FILE | Kinds.DIRECTORY | Kinds.OTHER)
    parts = split_path(path)
    return opened.fd, opened.st, "/".join(parts) + "/" if parts else ""


def _ignores(root: Root, top: int, include_ignored: bool) -> Ignores | None:
    """The ignore rules a search from `top` honours (those of the directories above it, within the root, too)."""
    return None if include_ignored else Ignores.above(root, top)


# -- grep -----------------------------------------------------------------------------------------


class GrepArgs(Args):
    root: RootName = None
    pattern: Annotated[str, Field(description="RE2 regex (no lookaround or backreferences).")]
    path: Annotated[str, Field(description="Folder or file to search.")] = "."
    glob_filter: Annotated[str | None, Field(description='Only files matching this glob, e.g. "*.py".')] = None
    case_insensitive: bool = False
    context_lines: Annotated[int, Field(ge=0, le=20)] = 0
    max_results: MaxResults = 100
    timeout_seconds: TimeoutSeconds = 300
    max_depth: MaxDepth = None
    include_ignored: IncludeIgnored = False


class GrepResult(PlainResult):
    matches: Annotated[list[Match], loose_list(
        "Each match: file (path relative to the root), line_number (1-based), line_content, context_before "
        "and context_after (lists of lines, nearest last / first; left out when empty).")]
    total_matches: int = Field(description="Number of matches returned.")
    truncated: bool = Field(description="True when max_results was reached and more matches exist.")
    timed_out: bool = Field(description="True when timeout_seconds ran out; matches are those found before.")


def grep(ctx: CallContext, args: GrepArgs) -> BaseModel:
    root = ctx.roots.get_for(args.root, "grep")
    query = Query(args.pattern, args.case_insensitive, args.context_lines, args.max_results, args.max_depth,
                  args.glob_filter)
    try:
        search = Grep(query, _clock(args.timeout_seconds), shown=printable)
    except FilterError as exc:
        raise ToolError(f"invalid glob_filter: {exc}") from None
    except PatternError as exc:
        raise ToolError(f"invalid pattern: {exc}") from None
    top, st, prefix = _start_dir(root, args.path)
    try:
        if stat.S_ISREG(st.st_mode):
            found = search.file(top, st.st_size, display_path(split_path(args.path)))
        elif stat.S_ISDIR(st.st_mode):
            found = search.tree(top, prefix, ctx.grep_helper, _ignores(root, top, args.include_ignored))
        else:
            raise ToolError(f"not a regular file or directory: {args.path}")
    finally:
        os.close(top)
    # Built from plain dicts, JSON already (a PlainResult is taken as it is): per-match validation or a model_dump
    # copy would cost more than the search on big answers.
    return GrepResult.model_construct(matches=found.matches, total_matches=len(found.matches),
                                      truncated=found.truncated, timed_out=found.timed_out)


# -- glob -----------------------------------------------------------------------------------------


class GlobArgs(Args):
    root: RootName = None
    pattern: Annotated[str | None, Field(description='Glob, e.g. "**/*.py" ("**" spans folders).')] = None
    regex: Annotated[str | None, Field(description="RE2 regex instead of pattern.")] = None
    path: SearchPath = "."
    max_results: MaxResults = 100
    timeout_seconds: TimeoutSeconds = 300
    max_depth: MaxDepth = None
    type_filter: Literal["file", "directory", "symlink", "all"] = "all"
    include_ignored: IncludeIgnored = False


class GlobMatch(TypedDict):
    path: str
    type: str
    size: int
    modified_at: str


class GlobResult(PlainResult):
    matches: Annotated[list[GlobMatch], loose_list(
        "Sorted by path. Each: path (relative to the root), type (file, directory, symlink, ...), size "
        "(bytes; a symlink's own) and modified_at (ISO 8601).")]
    total_matches: int = Field(description="Number of matches returned.")
    truncated: bool = Field(description="True when max_results was reached and more entries match.")
    timed_out: bool = Field(description="True when timeout_seconds ran out; matches are those found before.")


_BY_PATH = operator.itemgetter("path")


def glob(ctx: CallContext, args: GlobArgs) -> BaseModel:
    root = ctx.roots.get_for(args.root, "glob")
    if (args.pattern is None) == (args.regex is None):
        raise ToolError("exactly one of pattern or regex must be provided")
    clock = _clock(args.timeout_seconds)
    try:
        search = Glob(args.pattern, args.regex, max_depth=args.max_depth, max_results=args.max_results,
                      kind=None if args.type_filter == "all" else args.type_filter, clock=clock)
    except PatternError as exc:
        which = "invalid regex" if args.regex is not None else "invalid pattern"
        raise ToolError(f"{which}: {exc}") from None
    top, st, prefix = _start_dir(root, args.path)
    try:
        if not stat.S_ISDIR(st.st_mode):
            raise ToolError(f"not a directory: {args.path}")
        named, truncated = search.find(top, _ignores(root, top, args.include_ignored))
    finally:
        os.close(top)
    # One pass over what may be 100,000 rows: printable() only for a name that is not ASCII, a C sort key.
    found: list[GlobMatch] = [
        {"path": (prefix + path) if path.isascii() else printable(prefix + path),
         "type": file_type(est.st_mode) if kind == OTHER else kind,
         "size": est.st_size, "modified_at": iso_time(est.st_mtime)} for path, kind, est in named]
    found.sort(key=_BY_PATH)
    return GlobResult.model_construct(matches=found, total_matches=len(found), truncated=truncated,
                                      timed_out=clock.fired and not truncated)


TOOLS = [
    ToolSpec(
        "grep", "Search file contents",
        "Search files for lines matching a regex: each match's file, line_number, line_content and context. "
        "Binary files and what .gitignore leaves out are skipped.",
        GrepArgs, GrepResult, read_only("Search file contents"), grep, file_timeout=False,
        text=lambda args, data: render.grep_matches(data, max_results=args.max_results,
                                                    context=args.context_lines > 0)),
    ToolSpec(
        "glob", "Find files by name",
        "Find files, folders and symlinks whose path below path matches a glob pattern or a regex: paths "
        "relative to the root, sorted, with type, size and modified_at.",
        GlobArgs, GlobResult, read_only("Find files by name"), glob, file_timeout=False,
        text=lambda args, data: render.glob_paths(data, max_results=args.max_results)),
]
