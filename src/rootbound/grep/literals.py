"""Literals every match of a regex must contain: grep's prefilter.

RE2 scans a plain literal at memory speed, but a pattern such as
`\\b(TODO|FIXME)\\b` makes it step its DFA byte by byte, ten times slower.
ripgrep's answer, reproduced here: find a set of literals one of which every match
must contain, scan for those literals (RE2 in literal mode), and run the full
pattern only on the lines where one occurs.

The set is read off the pattern's parse tree. Python's own parser (`re._parser`)
understands the shared core of Python and RE2 syntax; the few constructs it would
read differently (POSIX classes like `[[:alpha:]]`) are refused up front, and
anything it cannot parse, or parses into something unexpected, means "no
prefilter" — which is never wrong, only slower. The pattern has already been
accepted by RE2, which stays the only judge of what matches.
"""

from __future__ import annotations

import importlib
import re
import warnings
from typing import Any, Final

__all__ = ["required_literals"]

MIN_LENGTH: Final = 3  # shorter literals occur too often to be worth a separate scan
MAX_LITERALS: Final = 8

_Set = frozenset[str]

_p: Any
_c: Any
try:  # private but stable since Python 3.11; without it there is simply no prefilter
    _p = importlib.import_module("re._parser")
    _c = importlib.import_module("re._constants")
except ImportError:  # pragma: no cover
    _p = _c = None


def _better(a: _Set | None, b: _Set | None) -> _Set | None:
    """The more selective of two literal sets: longest shortest member, then fewest members."""
    if a is None:
        return b
    if b is None:
        return a
    ka, kb = (min(map(len, a)), -len(a)), (min(map(len, b)), -len(b))
    return a if ka >= kb else b


def _sequence(items: list[tuple[Any, Any]]) -> _Set | None:
    best: _Set | None = None
    run: list[str] = []
    for op, av in items:
        if op is _c.LITERAL:
            run.append(chr(av))
            continue
        if run:
            best = _better(best, frozenset(["".join(run)]))
            run = []
        best = _better(best, _node(op, av))
    if run:
        best = _better(best, frozenset(["".join(run)]))
    return best


def _node(op: Any, av: Any) -> _Set | None:
    if op is _c.SUBPATTERN:
        _, add_flags, _, sub = av
        if add_flags & re.IGNORECASE:
            return None  # the caller scans case-insensitively whenever (?i) appears; stay simple here
        return _sequence(list(sub))
    if op is _c.BRANCH:
        union: set[str] = set()
        for branch in av[1]:
            found = _sequence(list(branch))
            if found is None:
                return None  # one branch can match without any literal
            union |= found
        return frozenset(union)
    if op in (_c.MAX_REPEAT, _c.MIN_REPEAT, getattr(_c, "POSSESSIVE_REPEAT", None)):
        low, _, sub = av
        return _sequence(list(sub)) if low >= 1 else None
    return None  # classes, anchors, any-char: no literal of their own


def required_literals(pattern: str) -> tuple[list[str], bool] | None:
    """Literals of which every match of `pattern` (valid RE2) contains at least one, or None.

    The flag says whether the literals must be looked for ignoring case (the
    pattern starts with `(?i)`). None when no useful set exists: a literal shorter than MIN_LENGTH, more than
    MAX_LITERALS of them, or a pattern that is itself one plain literal (RE2 is
    already at its fastest there).
    """
    if _p is None or "[:" in pattern:
        return None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "possible nested set" and the like
            tree = _p.parse(pattern)
    except (re.error, RecursionError, OverflowError, ValueError, TypeError, IndexError):
        return None
    items = list(tree.data)
    if all(op is _c.LITERAL for op, _ in items):
        return None
    try:
        found = _sequence(items)
    except (TypeError, ValueError, AttributeError):
        return None
    if not found or len(found) > MAX_LITERALS or min(map(len, found)) < MIN_LENGTH:
        return None
    return sorted(found), bool(tree.state.flags & re.IGNORECASE)
