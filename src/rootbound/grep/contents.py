"""grep over an open file or directory: the lines that match, in a stable order, within the call's limits.

A directory is walked beneath its handle (`fs.trees.search_walk`); its files are grouped in
batches of up to BATCH names, one directory handle each, and the batches are shared with
the helper process (`helper.py`) when it is free. Batches are numbered in walk order and
folded into the answer in that order, whoever searched them, so the answer (and where
max_results cuts it) does not depend on timing.

The answer stops at max_results (one more is looked for: finding it is what makes
`truncated` true), at OUTPUT_BUDGET bytes of text, or when the clock runs out.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Final, NotRequired

from typing_extensions import TypedDict

from rootbound.fs.ignores import Ignores
from rootbound.fs.trees import search_walk
from rootbound.grep.clock import Clock
from rootbound.grep.helper import (
    BATCH,
    MAX_DIRS,
    FileRows,
    Group,
    HelperGone,
    HitRow,
    Job,
    SharedHelper,
    found_rows,
    make_scanner,
    search_batch,
)
from rootbound.grep.patterns import name_regex, path_regex
from rootbound.grep.scanner import PatternError

__all__ = ["OUTPUT_BUDGET", "FilterError", "Found", "Grep", "Match", "Query"]

# Text kept for one grep answer (lines and context); past it the answer is truncated.
OUTPUT_BUDGET: Final = 16 * 1024 * 1024


class Match(TypedDict):
    file: str
    line_number: int
    line_content: str
    context_before: NotRequired[list[str]]  # left out when empty: most matches have no context
    context_after: NotRequired[list[str]]


class FilterError(PatternError):
    """The file filter (a glob) cannot be used."""


@dataclass(frozen=True)
class Query:
    pattern: str  # RE2
    case_insensitive: bool = False
    context_lines: int = 0
    max_results: int = 100
    max_depth: int | None = None
    glob_filter: str | None = None  # matched against the name; with a "/", against the path below the start


@dataclass(frozen=True)
class Found:
    matches: list[Match]
    truncated: bool
    timed_out: bool


class _Answer:
    """The answer being built, file by file in walk order, within max_results and the output budget."""

    def __init__(self, max_results: int, shown: Callable[[str], str]) -> None:
        self.max_results = max_results
        self.want = max_results + 1  # one more than asked: finding it is what makes `truncated` true
        self.matches: list[Match] = []
        self.budget = OUTPUT_BUDGET
        self.over_budget = False
        self.timed_out = False
        self.shown = shown

    @property
    def full(self) -> bool:
        return len(self.matches) >= self.want or self.over_budget

    def take(self, file: str, rows: list[HitRow]) -> None:
        shown = self.shown(file)
        for line_number, line, before, after in rows:
            self.budget -= len(line) + sum(map(len, before)) + sum(map(len, after))
            if self.budget < 0:
                self.over_budget = True
                return
            match: Match = {"file": shown, "line_number": line_number, "line_content": line}
            if before:
                match["context_before"] = before
            if after:
                match["context_after"] = after
            self.matches.append(match)
            if len(self.matches) >= self.want:
                return

    def found(self, clock: Clock) -> Found:
        truncated = len(self.matches) > self.max_results or self.over_budget
        del self.matches[self.max_results:]
        return Found(self.matches, truncated, (clock.fired or self.timed_out) and not truncated)


def _every(_: str) -> bool:
    return True


def _file_filter(glob: str | None) -> tuple[Callable[[str], object], bool]:
    """The test of a file filter, and whether it takes the file's path (else its name)."""
    if glob is None:
        return _every, False
    try:
        if "/" in glob:
            return path_regex(glob).match, True
        return name_regex(glob).match, False
    except PatternError as exc:
        raise FilterError(str(exc)) from None


Batch = tuple[list[int], list[Group]]  # a handle on each folder (ours to close), and its group of files
Walked = Iterator[tuple[int, str, os.DirEntry[str], bool]]  # what `fs.trees.search_walk` yields


def _batches(entries: Walked) -> Iterator[Batch]:
    """Group the walk's files by directory, each group with its own handle on its directory, and the groups
    into batches of at most BATCH files and MAX_DIRS folders.

    The handle is duplicated when a group starts, while the walk still holds the directory open: the
    batch may be searched after the walk has moved on and closed its own handle.
    """
    fds: list[int] = []
    groups: list[Group] = []
    names: list[str] = []
    files = 0
    parent = ""
    try:
        for dir_fd, prefix, de, is_dir in entries:
            if is_dir:
                continue
            try:
                if not de.is_file(follow_symlinks=False):
                    continue
            except OSError:
                continue  # vanished since it was listed
            if files >= BATCH:
                batch, fds, groups, files = (fds, groups), [], [], 0
                yield batch
            if not groups or prefix != parent:
                if len(groups) >= MAX_DIRS:
                    batch, fds, groups, files = (fds, groups), [], [], 0
                    yield batch
                parent, names = prefix, []
                fds.append(os.dup(dir_fd))
                groups.append((parent, names))
            names.append(de.name)
            files += 1
        if groups:
            batch, fds, groups = (fds, groups), [], []
            yield batch
    finally:
        for fd in fds:
            os.close(fd)


class Grep:
    """One grep call: its pattern and file filter, compiled once (PatternError, or FilterError for the filter)."""

    def __init__(self, query: Query, clock: Clock, shown: Callable[[str], str]) -> None:
        self.query = query
        self.clock = clock
        self.scanner = make_scanner(query.pattern, query.case_insensitive, query.context_lines, clock.expired)
        self.keep, self.keep_on_path = _file_filter(query.glob_filter)
        self.shown = shown  # how a file name appears in the answer

    def file(self, fd: int, size: int, name: str) -> Found:
        """Search the open regular file `fd`, shown as `name`."""
        answer = _Answer(self.query.max_results, self.shown)
        hits = self.scanner.search(fd, size, answer.want, answer.budget)
        answer.take(name, found_rows("", hits)[1])
        answer.timed_out, answer.over_budget = self.scanner.timed_out, answer.over_budget or self.scanner.over_budget
        return answer.found(self.clock)

    def tree(self, top: int, prefix: str, helper: SharedHelper | None, ignores: Ignores | None = None) -> Found:
        """Search the files beneath the open directory `top` (borrowed), shown as `prefix` + their path, but for
        those `ignores` leaves out."""
        q = self.query
        answer = _Answer(q.max_results, self.shown)
        job: Job = (q.pattern, q.case_insensitive, q.context_lines, answer.want, self.clock.deadline)
        entries = search_walk(top, self.keep, on_path=self.keep_on_path, max_depth=q.max_depth,
                              expired=self.clock.expired, ignores=ignores)
        self._search(entries, job, prefix, answer, helper)
        return answer.found(self.clock)

    def _search(self, entries: Walked, job: Job, prefix: str, answer: _Answer,
                shared: SharedHelper | None) -> None:
        """Search the walk's files, sharing batches with the helper process when it is free."""
        scanner, clock = self.scanner, self.clock
        helper = reserved = shared.acquire() if shared is not None else None
        done: dict[int, tuple[list[FileRows], bool]] = {}
        sent: dict[int, Batch] = {}
        folded = 0

        def fold() -> None:
            nonlocal folded
            while folded in done and not answer.full:
                found, over = done.pop(folded)
                for name, rows in found:
                    answer.take(prefix + name, rows)
                answer.over_budget |= over  # it stopped short of its limit to keep within the output budget
                folded += 1

        def close(fds: list[int]) -> None:
            for fd in fds:
                os.close(fd)

        def here(batch_id: int, fds: list[int], groups: list[Group]) -> None:
            try:
                found, timed_out, over = search_batch(scanner, fds, groups, answer.want - len(answer.matches),
                                                      answer.budget)
            finally:
                close(fds)
            done[batch_id] = (found, over)
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
                    here(batch_id, *sent.pop(batch_id))
                return
            for batch_id, found, timed_out, over in replies:
                close(sent.pop(batch_id)[0])
                done[batch_id] = (found, over)
                answer.timed_out |= timed_out

        try:
            for batch_id, (fds, groups) in enumerate(_batches(entries)):
                if helper is not None and helper.alive and helper.outstanding < 4:
                    sent[batch_id] = (fds, groups)
                    try:
                        helper.send(batch_id, job, fds, groups, answer.budget)
                    except HelperGone:
                        del sent[batch_id]
                        arrived(0)  # takes back what it had
                        here(batch_id, fds, groups)
                else:
                    here(batch_id, fds, groups)
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
            for fds, _ in sent.values():
                close(fds)
        fold()
