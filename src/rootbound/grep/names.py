"""glob over an open directory: the entries whose relative path matches a glob or a regex.

The directory is walked beneath its handle (`fs.trees.find`: `walk`'s rules, specialised
for a search; symlinks listed, never followed). A glob without `**` or braces has a fixed
number of segments, so the walk goes no deeper than that. The search stops at max_results (one more is looked for:
finding it is what makes `truncated` true) or when the clock runs out.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Final, Literal

from rootbound.fs.ignores import Ignores
from rootbound.fs.trees import Found, find
from rootbound.grep.clock import Clock
from rootbound.grep.patterns import name_regex, path_regex
from rootbound.grep.scanner import compile_regex, finder

__all__ = ["Glob", "Named"]

Named = Found  # path relative to the start, kind (fs.trees.FILE, ...), its own lstat


# A last segment that means the same as a file name glob as in a path glob: no slash, brackets, braces or escapes.
_PLAIN_SEGMENT: Final = re.compile(r"[^/\[\]{}\\]+")


def _matcher(pattern: str | None, regex: str | None) -> tuple[Callable[[str], object], bool, int | None]:
    """The test for one entry, whether it takes the entry's path (else its name), and how deep a match can
    possibly be (None: any depth)."""
    if regex is not None:
        found = finder(compile_regex(regex, lines=False))
        return (lambda path: found(path.encode("utf-8", "surrogateescape"))), True, None
    pattern = (pattern or "").removeprefix("./")
    last = pattern.removeprefix("**/")
    if last != pattern and "**" not in last and _PLAIN_SEGMENT.fullmatch(last):
        # "**/*.py": any depth, so only the name decides. The path regex for it was a third of a glob's time
        # (a lookahead at every character of every path); the name's is a plain scan, called with no wrapper.
        return name_regex(last).match, False, None
    # Without ** or braces a pattern has a fixed number of segments: no need to walk deeper.
    depth = None if "**" in pattern or "{" in pattern else pattern.count("/") + 1
    return path_regex(pattern).match, True, depth


class Glob:
    """One glob call: a glob `pattern` or a `regex` (PatternError if it cannot be used), and its limits."""

    def __init__(self, pattern: str | None, regex: str | None, *, max_depth: int | None, max_results: int,
                 kind: Literal["file", "directory", "symlink"] | None, clock: Clock) -> None:
        self.matches, self.on_path, depth = _matcher(pattern, regex)
        self.max_depth = max_depth if depth is None else depth if max_depth is None else min(depth, max_depth)
        self.max_results = max_results
        self.kind = kind
        self.clock = clock

    def find(self, top: int, ignores: Ignores | None = None) -> tuple[list[Named], bool]:
        """The matching entries beneath the open directory `top` (borrowed), in walk order, but for those
        `ignores` leaves out; and whether max_results cut them short."""
        return find(top, self.matches, on_path=self.on_path, kind=self.kind, max_depth=self.max_depth,
                    max_results=self.max_results, expired=self.clock.expired, ignores=ignores)
