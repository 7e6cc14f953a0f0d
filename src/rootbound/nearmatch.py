"""Where text that was not found exactly most likely is, and how it differs. Pure functions, no I/O.

edit_file and patch_file use it to explain a failed match so that the next attempt
succeeds: the closest region of the file, and line by line what differs there
(indentation, trailing whitespace, tabs vs spaces, a changed word), with the
whitespace made visible. It only ever explains; it never decides where to edit.

The search stays linear in the file: candidate places come from lines (compared
without whitespace) and words of the wanted text that occur in the file, and a
line or word found more than `_COMMON` times is ignored as saying nothing about where.
"""

from __future__ import annotations

import difflib
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["Near", "Pair", "Want", "closest", "explain", "span", "visible"]

_COMMON = 200  # a line or word found more often than this gives no hint of place
_CANDIDATES = 12  # best-voted places compared line by line
_MAX_WANT = 400  # lines of the wanted text compared
_LOOKAHEAD = 3  # lines an alignment may skip on either side (an omitted or extra line)
_MAX_SHOWN = 80  # characters of a line quoted in a message
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*|\d+")
_TOKEN = re.compile(r"\w+|[^\w\s]")
_WORDCHAR = re.compile(r"\w")


def squash(text: str) -> str:
    """The text without any whitespace: what two lines share when only spacing differs."""
    return "".join(text.split())


@dataclass(frozen=True)
class Want:
    """The lines looked for. An exact-replacement's text may begin and end in the middle of a line."""

    lines: list[str]
    partial_start: bool = False  # the first line may be the end of a file line
    partial_end: bool = False  # the last line may be the start of a file line

    def fits(self, k: int, line: str, *, loose: bool) -> bool:
        want = self.lines[k]
        if loose:
            want, line = squash(want), squash(line)
        first = k == 0 and self.partial_start
        last = k == len(self.lines) - 1 and self.partial_end
        if first and last:
            return want in line
        if first:
            return line.endswith(want)
        if last:
            return line.startswith(want)
        return line == want


@dataclass(frozen=True)
class Pair:
    """One step of an alignment: a wanted line and the file line it meets (None: missing on that side)."""

    want: int | None
    found: int | None


@dataclass(frozen=True)
class Near:
    start: int  # first file line (0-based) of the closest region
    end: int  # one past its last line
    pairs: list[Pair]


def closest(lines: Sequence[str], want: Want, hint: int | None = None) -> Near | None:
    """The region of `lines` most like `want`: most lines alike (whitespace aside), then most shared
    lines and words, then nearest to `hint`, then first. None when nothing in the file resembles it."""
    if not want.lines or not lines:
        return None
    if len(want.lines) > _MAX_WANT:  # its beginning says where it is; comparing all of it costs too much
        want = Want(want.lines[:_MAX_WANT], want.partial_start)
    votes = _line_votes(lines, want) or _word_votes(lines, want)
    starts = [s for s, _ in sorted(votes.items(), key=lambda sv: (-sv[1], _distance(sv[0], hint), sv[0]))]
    starts = starts[:_CANDIDATES]
    if hint is not None and not starts:
        starts = [min(max(hint, 0), len(lines) - 1)]
    best: tuple[tuple[int, int, int, int], list[Pair]] | None = None
    for start in starts:
        pairs = _align(lines, want, start)
        alike = sum(1 for p in pairs if p.want is not None and p.found is not None
                    and want.fits(p.want, lines[p.found], loose=True))
        rank = (-alike, -votes.get(start, 0), _distance(start, hint), start)
        if best is None or rank < best[0]:
            best = (rank, pairs)
    if best is None:
        return None
    pairs = best[1]
    found = [p.found for p in pairs if p.found is not None]
    if not found:
        return None
    return Near(min(found), max(found) + 1, pairs)


def _distance(start: int, hint: int | None) -> int:
    return 0 if hint is None else abs(start - hint)


def _line_votes(lines: Sequence[str], want: Want) -> Counter[int]:
    """Places where whole wanted lines occur, indentation and trailing whitespace aside: each such line
    votes for where `want` would start. (`strip`, not `squash`: it runs once per line of the file.)"""
    wanted: dict[str, list[int]] = {}
    for k, text in enumerate(want.lines):
        key = text.strip()  # a first or last line that may be part of a line is usually a whole one: it votes too
        if key:
            wanted.setdefault(key, []).append(k)
    hits: dict[str, list[int]] = {}
    if wanted:
        for i, line in enumerate(lines):
            key = line.strip()
            if key in wanted:
                hits.setdefault(key, []).append(i)
    votes: Counter[int] = Counter()
    for key, where in hits.items():
        if len(where) <= _COMMON:
            for k in wanted[key]:
                votes.update(i - k for i in where)
    return votes


def _word_votes(lines: Sequence[str], want: Want) -> Counter[int]:
    """Places where words of the wanted lines occur: for text whose every line was changed a little."""
    words: dict[str, set[int]] = {}
    for k, text in enumerate(want.lines):
        for word in _WORD.findall(text):
            words.setdefault(word, set()).add(k)
    text = "\n".join(lines)
    votes: Counter[int] = Counter()
    for word, ks in words.items():
        found: set[int] = set()
        line = last = rejected = 0
        # A literal then (?!\w): the regex engine's fast literal search. A leading \b would defeat it.
        for m in re.finditer(re.escape(word) + r"(?!\w)", text):
            at = m.start()
            if at and _WORDCHAR.match(text, at - 1):  # inside a longer word
                rejected += 1
                if rejected > 20 * _COMMON:
                    found = set(range(_COMMON + 1))  # as good as common
                    break
                continue
            line += text.count("\n", last, at)
            last = at
            found.add(line)
            if len(found) > _COMMON:
                break
        if len(found) <= _COMMON:
            for i in found:
                votes.update(i - k for k in ks)
    return votes


def _align(lines: Sequence[str], want: Want, start: int) -> list[Pair]:
    """Walk `want` against the file from `start`, skipping up to `_LOOKAHEAD` lines on either side
    where that lets lines meet again (an omitted context line, or an extra one)."""
    n, pairs, i, k = len(lines), [], max(start, 0), 0

    def fits(k: int, i: int) -> bool:
        return i < n and want.fits(k, lines[i], loose=True)

    while k < len(want.lines):
        if fits(k, i):
            pairs.append(Pair(k, i))
            i, k = i + 1, k + 1
            continue
        extra = next((d for d in range(1, _LOOKAHEAD + 1) if fits(k, i + d)), None)
        missing = next((d for d in range(1, _LOOKAHEAD + 1) if k + d < len(want.lines) and fits(k + d, i)), None)
        if extra is not None and (missing is None or extra <= missing):
            pairs.extend(Pair(None, i + d) for d in range(extra))
            i += extra
        elif missing is not None:
            pairs.extend(Pair(k + d, None) for d in range(missing))
            k += missing
        else:
            pairs.append(Pair(k, i if i < n else None))
            i, k = min(i + 1, n), k + 1
    return pairs


# -- saying what differs -------------------------------------------------------------------------


def span(first: int, last: int) -> str:
    """ "line 6" or "lines 6-8" (1-based, inclusive)."""
    return f"line {first}" if first == last else f"lines {first}-{last}"


def visible(text: str) -> str:
    """A line quoted so that its whitespace shows: tabs as \\t, spaces inside the quotes; long lines cut."""
    text = text if len(text) <= _MAX_SHOWN else text[:_MAX_SHOWN] + "..."
    return repr(text)


def _whitespace(text: str) -> str:
    tabs, spaces = text.count("\t"), text.count(" ")
    parts = [f"{tabs} tab{'s' * (tabs != 1)}"] if tabs else []
    if spaces:
        parts.append(f"{spaces} space{'s' * (spaces != 1)}")
    other = len(text) - tabs - spaces
    if other:
        parts.append(f"{other} other whitespace character{'s' * (other != 1)}")
    return " and ".join(parts) or "none"


def _leading(text: str) -> str:
    return text[: len(text) - len(text.lstrip())]


def _trailing(text: str) -> str:
    return text[len(text.rstrip()):]


def explain(expected: str, found: str, yours: str, *, partial_start: bool = False,
            partial_end: bool = False) -> str:
    """What differs between a wanted line and the file's line, in words (empty if nothing does).

    `partial_start` / `partial_end`: the wanted line may begin / end in the middle of the file's line.
    """
    if ((partial_start and partial_end and expected in found) or (partial_start and found.endswith(expected))
            or (partial_end and found.startswith(expected))):
        return ""
    if partial_start and not _leading(expected):
        found_core = found.lstrip()  # the text was copied from where the line's code starts
        lead_found = ""
    else:
        found_core, lead_found = found, _leading(found)
    if expected == found_core:
        return ""
    if expected.strip() == found_core.strip():
        what = []
        lead_want = _leading(expected)
        if lead_want != lead_found:
            mixed = ("\t" in lead_want) != ("\t" in lead_found)
            what.append(f"indentation differs: the file has {_whitespace(lead_found)}, {yours} has "
                        f"{_whitespace(lead_want)}" + (" (tabs vs spaces)" if mixed else ""))
        if _trailing(expected) != _trailing(found_core) and not partial_end:
            what.append(f"trailing whitespace differs: the file's line ends with {_whitespace(_trailing(found_core))}, "
                        f"{yours}'s with {_whitespace(_trailing(expected))}")
        return "; ".join(what) or "whitespace differs"
    if squash(expected) == squash(found_core):
        return "spacing inside the line differs"
    return _changed_words(expected, found_core, yours, partial_start, partial_end)


def _changed_words(expected: str, found: str, yours: str, partial_start: bool, partial_end: bool) -> str:
    want, have = _TOKEN.findall(expected), _TOKEN.findall(found)
    ops = difflib.SequenceMatcher(None, have, want, autojunk=False).get_opcodes()
    if partial_start and ops and ops[0][0] == "delete":
        ops = ops[1:]  # the file's line goes on before the wanted text begins
    if partial_end and ops and ops[-1][0] == "delete":
        ops = ops[:-1]
    for tag, i1, i2, j1, j2 in ops:
        if tag == "equal":
            continue
        file_part, your_part = " ".join(have[i1:i2]), " ".join(want[j1:j2])
        if tag == "replace":
            return f"different text: the file has {visible(file_part)} where {yours} has {visible(your_part)}"
        if tag == "delete":
            return f"different text: the file has {visible(file_part)} that {yours} lacks"
        return f"different text: {yours} has {visible(your_part)} that the file lacks"
    return "different text"
