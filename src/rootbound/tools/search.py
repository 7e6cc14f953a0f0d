"""The search tools: grep (file contents) and glob (file names).

Both walk the subtree beneath the root's handle (`walking.walk`) and stop at
`max_results` (`truncated: true`) or `timeout_seconds` (`timed_out: true`),
returning what they found so far. The work runs in a worker thread that also
stops when the client cancels the call. grep hands batches of files to a helper
process (`fanout`) when one is free, and folds all batches into the answer in
walk order, so the answer does not depend on who searched what.

Patterns (glob `pattern`/`regex`, grep `glob_filter` with a "/") are matched
against paths relative to `path`; results are relative to the root.
"""

from __future__ import annotations

import os
import re
import stat
import time
from collections.abc import Callable, Iterator
from typing import Annotated, Literal

from pydantic import BaseModel, Field, WithJsonSchema
from typing_extensions import TypedDict
from wcmatch import fnmatch as wc_fnmatch
from wcmatch import glob as wc_glob

from rootbound.errors import ToolError
from rootbound.fanout import BATCH, FileRows, Helper, HelperGone, HitRow, Job, found_rows, make_scanner, search_batch
from rootbound.fs import Kinds, Root, bounds, display_path, file_type, split_path
from rootbound.fs.trees import FILE, OTHER, Entry, walk
from rootbound.searching import CUT, LINE_CAP, LineSearch, PatternError, compile_regex, finder
from rootbound.tools.base import Args, CallContext, RootName, ToolSpec, iso_time, read_only
from rootbound.tools.reading import printable

__all__ = ["TOOLS"]

MAX_RESULTS_LIMIT = 100_000
# Text kept for one grep answer (lines and context); past it the answer is truncated.
OUTPUT_BUDGET = 16 * 1024 * 1024

# Globs: `**` crosses directories, `{a,b}` alternates, and `*` matches names starting with a dot
# (doublestar semantics, as the seed's Go library has them).
_GLOB_FLAGS = wc_glob.GLOBSTAR | wc_glob.BRACE | wc_glob.DOTGLOB
_NAME_FLAGS = wc_fnmatch.BRACE | wc_fnmatch.DOTMATCH

SearchPath = Annotated[str, Field(description='Directory (or, for grep, a single file) to search, relative to '
                                              'the root; "." (default) is the whole root.')]
MaxResults = Annotated[int, Field(ge=1, le=MAX_RESULTS_LIMIT,
                                  description="Stop after this many results; truncated is then true.")]
TimeoutSeconds = Annotated[float, Field(gt=0, le=3600, description="Stop after this many seconds and return what "
                                                                   "was found so far, with timed_out true.")]
MaxDepth = Annotated[int | None, Field(ge=0, description="How deep to descend below path: 1 = only entries directly "
                                                         "in path, 2 = one level of subdirectories more, ... "
                                                         "Default: no limit.")]


def _not_cancelled() -> bool:
    return False


class _Clock:
    """The stop condition polled by the walk and the scanner: deadline passed, or call cancelled."""

    def __init__(self, seconds: float, cancelled: Callable[[], bool] = _not_cancelled) -> None:
        self.deadline = time.monotonic() + seconds
        self.cancelled = cancelled
        self.fired = False

    def expired(self) -> bool:
        if time.monotonic() >= self.deadline or self.cancelled():
            self.fired = True
        return self.fired


def _clock(seconds: float) -> _Clock:
    """The call's own timeout_seconds, and the client's cancellation (the worker thread running the
    call is never abandoned: it stops here, and only then frees its worker)."""
    bound = bounds.current()
    return _Clock(seconds, bound.cancelled if bound is not None else _not_cancelled)


def _start_dir(root: Root, path: str) -> tuple[int, os.stat_result, str]:
    """Open `path` (in-root symlinks followed, outside ones refused); return it with its display prefix.

    Opened for reading only if it is a directory or a regular file (`Root.open`): opening a device
    can have effects of its own, and opening a FIFO wakes a writer waiting on it. Anything else comes
    back as an O_PATH handle, for the caller to refuse by its `st`.
    """
    opened = root.open(path, Kinds.FILE | Kinds.DIRECTORY | Kinds.OTHER)
    parts = split_path(path)
    return opened.fd, opened.st, "/".join(parts) + "/" if parts else ""


# -- grep -----------------------------------------------------------------------------------------


class GrepArgs(Args):
    root: RootName
    pattern: Annotated[str, Field(description="Regular expression in Go/RE2 syntax (no backreferences or "
                                              "lookaround), matched against each line; a literal string works "
                                              "as is once regex metacharacters are escaped.")]
    path: SearchPath = "."
    glob_filter: Annotated[str | None, Field(
        description='Only search files matching this glob, e.g. "*.go" or "*.{ts,tsx}". Matched against the '
                    'file name; a glob containing "/" is matched against the path relative to path instead '
                    '(e.g. "src/**/*.go").')] = None
    case_insensitive: bool = False
    context_lines: Annotated[int, Field(ge=0, le=20, description="Lines of context before and after each "
                                                                 "match.")] = 0
    max_results: MaxResults = 100
    timeout_seconds: TimeoutSeconds = 300
    max_depth: MaxDepth = None


class GrepMatch(TypedDict):
    file: str
    line_number: int
    line_content: str
    context_before: list[str]
    context_after: list[str]


def _items(description: str) -> WithJsonSchema:
    """A light output schema for a result list: an array, its items' fields named in words.

    The MCP Python client validates every structured result against the output schema
    with jsonschema, at about 30 µs per fully described item and still 5 µs per item
    described only as an object: on a 5,000-match answer that cost more than the search.
    """
    return WithJsonSchema({"type": "array", "description": description})


class GrepResult(BaseModel):
    matches: Annotated[list[GrepMatch], _items(
        "Each match: file (path relative to the root), line_number (1-based), line_content, context_before "
        "and context_after (lists of lines, nearest last / first).")]
    total_matches: int = Field(description="Number of matches returned.")
    truncated: bool = Field(description="True when max_results was reached and more matches exist.")
    timed_out: bool = Field(description="True when timeout_seconds ran out; matches are those found before.")


def _glob_regex(glob: str, *, names: bool) -> re.Pattern[str]:
    """wcmatch's translation of a glob to a Python regex, compiled once.

    Calling the compiled regex directly skips wcmatch's per-call wrapper layers, which
    cost more than the match itself when every entry of a big tree is tested.
    """
    if names:
        include, _ = wc_fnmatch.translate(glob, flags=_NAME_FLAGS)
    else:
        include, _ = wc_glob.translate(glob.removeprefix("./"), flags=_GLOB_FLAGS)
    return re.compile("|".join(f"(?:{part})" for part in include))


def _name_filter(glob: str | None) -> Callable[[Entry], bool] | None:
    if glob is None:
        return None
    try:
        if "/" in glob:
            by_path = _glob_regex(glob, names=False).match
            return lambda e: by_path(e.path) is not None
        by_name = _glob_regex(glob, names=True).match
    except (ValueError, TypeError, re.error) as exc:
        raise ToolError(f"invalid glob_filter: {exc}") from None
    return lambda e: by_name(e.name) is not None


class _Answer:
    """The grep answer being built, file by file in walk order, within max_results and the output budget."""

    def __init__(self, max_results: int) -> None:
        self.max_results = max_results
        self.want = max_results + 1  # one more than asked: finding it is what makes `truncated` true
        self.matches: list[GrepMatch] = []
        self.budget = OUTPUT_BUDGET
        self.over_budget = False
        self.timed_out = False

    @property
    def full(self) -> bool:
        return len(self.matches) >= self.want or self.over_budget

    def take(self, file: str, rows: list[HitRow]) -> None:
        shown = printable(file)
        for line_number, line, before, after in rows:
            self.budget -= len(line) + sum(map(len, before)) + sum(map(len, after))
            if self.budget < 0:
                self.over_budget = True
                return
            self.matches.append({"file": shown, "line_number": line_number, "line_content": line,
                                 "context_before": before, "context_after": after})
            if len(self.matches) >= self.want:
                return

    def result(self, clock: _Clock) -> GrepResult:
        truncated = len(self.matches) > self.max_results or self.over_budget
        del self.matches[self.max_results:]
        # Built from plain dicts: per-match validation would cost more than the search on big answers.
        return GrepResult.model_construct(matches=self.matches, total_matches=len(self.matches), truncated=truncated,
                                          timed_out=(clock.fired or self.timed_out) and not truncated)


Batch = tuple[int, str, list[str]]  # a handle on the directory (ours to close), its path prefix, file names


def _batches(entries: Iterator[Entry], keep: Callable[[Entry], bool] | None) -> Iterator[Batch]:
    """Group the walk's files by directory, at most BATCH a group, each with its own handle on the directory.

    The handle is duplicated when a group starts, while the walk still holds the directory open: the
    group may be searched after the walk has moved on and closed its own handle.
    """
    names: list[str] = []
    parent, dup = "", -1
    try:
        for entry in entries:
            if entry.kind != FILE or (keep is not None and not keep(entry)):
                continue
            if entry.parent != parent or len(names) >= BATCH or dup < 0:
                if names:
                    batch, dup = (dup, parent, names), -1
                    yield batch
                parent, names = entry.parent, []
                dup = os.dup(entry.dir_fd)
            names.append(entry.name)
        if names:
            batch, dup = (dup, parent, names), -1
            yield batch
    finally:
        if dup >= 0:
            os.close(dup)


def _search_tree(entries: Iterator[Entry], keep: Callable[[Entry], bool] | None, scanner: LineSearch,
                 job: Job, prefix: str, answer: _Answer, clock: _Clock) -> None:
    """Search the walk's files, sharing batches with the helper process when it is free.

    Batches are numbered in walk order and folded into the answer in that order, whoever
    searched them, so the answer (and where max_results cuts it) does not depend on timing.
    """
    helper = reserved = Helper.acquire()
    done: dict[int, tuple[str, list[FileRows], bool]] = {}
    sent: dict[int, tuple[int, str, list[str]]] = {}
    folded = 0

    def fold() -> None:
        nonlocal folded
        while folded in done and not answer.full:
            parent, found, over = done.pop(folded)
            for name, rows in found:
                answer.take(prefix + parent + name, rows)
            answer.over_budget |= over  # it stopped short of its limit to keep within the output budget
            folded += 1

    def here(batch_id: int, fd: int, parent: str, names: list[str]) -> None:
        try:
            found, timed_out, over = search_batch(scanner, fd, names, answer.want - len(answer.matches),
                                                  answer.budget)
        finally:
            os.close(fd)
        done[batch_id] = (parent, found, over)
        answer.timed_out |= timed_out

    def arrived(wait: float) -> None:
        nonlocal helper
        assert helper is not None
        try:
            replies = helper.replies(wait)
        except HelperGone:  # it died: search what it had here, in order, and go on without it
            helper.outstanding = 0
            helper = None
            for batch_id in sorted(sent):
                fd, parent, names = sent.pop(batch_id)
                here(batch_id, fd, parent, names)
            return
        for batch_id, found, timed_out, over in replies:
            fd, parent, _ = sent.pop(batch_id)
            os.close(fd)
            done[batch_id] = (parent, found, over)
            answer.timed_out |= timed_out

    try:
        for batch_id, (fd, parent, names) in enumerate(_batches(entries, keep)):
            if helper is not None and helper.alive and helper.outstanding < 4:
                sent[batch_id] = (fd, parent, names)
                try:
                    helper.send(batch_id, job, fd, names, answer.budget)
                except HelperGone:
                    del sent[batch_id]
                    arrived(0)  # takes back what it had
                    here(batch_id, fd, parent, names)
            else:
                here(batch_id, fd, parent, names)
            if sent:
                arrived(0)
            fold()
            if answer.full or answer.timed_out or clock.expired():
                break
        while sent and not answer.full and not clock.expired():  # a cancelled call must not wait it out
            arrived(0.05)
            fold()
    finally:
        if reserved is not None:
            reserved.release()
        for fd, _, _ in sent.values():
            os.close(fd)
    fold()


def _grep(root: Root, args: GrepArgs) -> GrepResult:
    clock = _clock(args.timeout_seconds)
    try:
        scanner = make_scanner(args.pattern, args.case_insensitive, args.context_lines, clock.expired)
    except PatternError as exc:
        raise ToolError(f"invalid pattern: {exc}") from None
    keep = _name_filter(args.glob_filter)
    answer = _Answer(args.max_results)
    top, st, prefix = _start_dir(root, args.path)
    try:
        if stat.S_ISREG(st.st_mode):
            hits = scanner.search(top, st.st_size, answer.want, answer.budget)
            answer.take(display_path(split_path(args.path)), found_rows("", hits)[1])
            answer.timed_out, answer.over_budget = scanner.timed_out, answer.over_budget or scanner.over_budget
        elif not stat.S_ISDIR(st.st_mode):
            raise ToolError(f"not a regular file or directory: {args.path}")
        else:
            job: Job = (args.pattern, args.case_insensitive, args.context_lines, answer.want, clock.deadline)
            entries = walk(top, max_depth=args.max_depth, expired=clock.expired)
            _search_tree(entries, keep, scanner, job, prefix, answer, clock)
    finally:
        os.close(top)
    return answer.result(clock)


def grep(ctx: CallContext, args: GrepArgs) -> BaseModel:
    return _grep(ctx.roots.get_for(args.root, "grep"), args)


# -- glob -----------------------------------------------------------------------------------------


class GlobArgs(Args):
    root: RootName
    pattern: Annotated[str | None, Field(
        description='Glob matched against paths relative to path: "*" and "?" stay within one directory, '
                    '"**" spans any number of directories ("**/*.go"), "{a,b}" alternates, "[abc]" is a set. '
                    "Give pattern or regex, not both.")] = None
    regex: Annotated[str | None, Field(
        description=r'Regular expression (Go/RE2 syntax) searched for in each path relative to path, e.g. '
                    r'"test_\d+\.go$"; anchor with ^ and $ to match whole paths. Give pattern or regex, '
                    "not both.")] = None
    path: SearchPath = "."
    max_results: MaxResults = 100
    timeout_seconds: TimeoutSeconds = 300
    max_depth: MaxDepth = None
    type_filter: Annotated[Literal["file", "directory", "symlink", "all"],
                           Field(description="Only entries of this type.")] = "all"


class GlobMatch(TypedDict):
    path: str
    type: str
    size: int
    modified_at: str


class GlobResult(BaseModel):
    matches: Annotated[list[GlobMatch], _items(
        "Sorted by path. Each: path (relative to the root), type (file, directory, symlink, ...), size "
        "(bytes; a symlink's own) and modified_at (ISO 8601).")]
    total_matches: int = Field(description="Number of matches returned.")
    truncated: bool = Field(description="True when max_results was reached and more entries match.")
    timed_out: bool = Field(description="True when timeout_seconds ran out; matches are those found before.")


def _path_matcher(args: GlobArgs) -> tuple[Callable[[str], bool], int | None]:
    """The test for one relative path, and how deep a match can possibly be (None: any depth)."""
    if (args.pattern is None) == (args.regex is None):
        raise ToolError("exactly one of pattern or regex must be provided")
    if args.regex is not None:
        try:
            rx = compile_regex(args.regex, lines=False)
        except PatternError as exc:
            raise ToolError(f"invalid regex: {exc}") from None
        found = finder(rx)
        return (lambda path: found(path.encode("utf-8", "surrogateescape"))), None
    pattern = (args.pattern or "").removeprefix("./")
    try:
        matcher = _glob_regex(pattern, names=False).match
    except (ValueError, TypeError, re.error) as exc:
        raise ToolError(f"invalid pattern: {exc}") from None
    # Without ** or braces a pattern has a fixed number of segments: no need to walk deeper.
    depth = None if "**" in pattern or "{" in pattern else pattern.count("/") + 1
    return (lambda path: matcher(path) is not None), depth


def _glob(root: Root, args: GlobArgs) -> GlobResult:
    matches_path, depth = _path_matcher(args)
    limit = args.max_depth if depth is None else depth if args.max_depth is None else min(depth, args.max_depth)
    wanted = None if args.type_filter == "all" else args.type_filter
    clock = _clock(args.timeout_seconds)
    found: list[GlobMatch] = []
    top, st, prefix = _start_dir(root, args.path)
    try:
        if not stat.S_ISDIR(st.st_mode):
            raise ToolError(f"not a directory: {args.path}")
        for n, entry in enumerate(walk(top, max_depth=limit, expired=clock.expired)):
            if n % 32 == 31 and clock.expired():  # the walk also checks before each directory
                break
            kind = entry.kind
            if wanted is not None and kind != wanted:
                continue
            if not matches_path(entry.path):
                continue
            try:
                est = entry.lstat()
            except OSError:
                continue  # gone since it was listed
            found.append({"path": printable(prefix + entry.path),
                          "type": file_type(est.st_mode) if kind == OTHER else kind,
                          "size": est.st_size, "modified_at": iso_time(est.st_mtime)})
            if len(found) > args.max_results:
                break
    finally:
        os.close(top)
    truncated = len(found) > args.max_results
    del found[args.max_results:]
    found.sort(key=lambda m: m["path"])
    return GlobResult.model_construct(matches=found, total_matches=len(found), truncated=truncated,
                                      timed_out=clock.fired and not truncated)


def glob(ctx: CallContext, args: GlobArgs) -> BaseModel:
    return _glob(ctx.roots.get_for(args.root, "glob"), args)


TOOLS = [
    ToolSpec(
        "grep", "Search file contents",
        "Search the files under a path in a root for lines matching a regular expression (Go/RE2 syntax, "
        "linear time). Returns matches with file (root-relative), line_number, line_content and "
        "context_before/context_after (context_lines each side), in a stable order. Binary files (a NUL byte "
        "in the first 8 KiB) are skipped; symlinks met in the walk are not followed. A match never spans "
        f"lines. Lines longer than {LINE_CAP} bytes are cut to a {LINE_CAP}-byte window around the match "
        f"(context lines: their start), and the cut side is marked {CUT}. Stops at max_results (truncated: "
        "true) or timeout_seconds (timed_out: true) and returns what it found. Filter files with "
        'glob_filter, e.g. "*.py".',
        GrepArgs, GrepResult, read_only("Search file contents"), grep, file_timeout=False),
    ToolSpec(
        "glob", "Find files by name",
        "Find files, directories and symlinks under a path in a root whose relative path matches a glob "
        '(pattern, e.g. "**/*.go" - "**" spans directories) or a regular expression (regex, Go/RE2 syntax); '
        "give exactly one of them. Paths are matched relative to path and returned relative to the root, "
        "sorted, each with type, size and modified_at. Symlinks are listed, not followed. Narrow with "
        "type_filter (file, directory, symlink) and max_depth; stops at max_results (truncated: true) or "
        "timeout_seconds (timed_out: true).",
        GlobArgs, GlobResult, read_only("Find files by name"), glob, file_timeout=False),
]
