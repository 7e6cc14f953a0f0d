"""Find the lines of one open file that match an RE2 pattern, in bounded memory.

Speed comes from scanning whole buffers, not lines: a file (or a 1 MiB block of
a big one) is handed to RE2 in one call, and line numbers and line bounds are
worked out only around the matches. Most files have none, so most files cost
one read and one RE2 scan.

Semantics follow ripgrep's defaults:
* a match never spans lines (RE2's `never_nl`: a `\\n` in the pattern matches
  nothing) and `^`/`$` match at line starts/ends (the pattern runs in `(?m)`);
* a line is reported once however often it matches; a file whose first 8 KiB
  hold a NUL byte is binary and skipped.

Memory is bounded whatever the file: at most two blocks plus a small overlap are
held. A line longer than a block is searched window by window, each window
re-reading the last `OVERLAP` bytes of the previous one, so a match is missed
only if it is longer than 64 KiB *and* straddles a window edge. Lines shown in
results are capped at `LINE_CAP` bytes; a cut side is marked with `CUT`.
"""

from __future__ import annotations

import os
import re
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from rootbound.fs.content import SNIFF, looks_binary
from rootbound.grep.literals import required_literals

__all__ = ["CUT", "LINE_CAP", "Hit", "LineSearch", "PatternError", "Prefilter", "compile_regex", "finder",
           "regex_message"]

BLOCK: Final = 1 << 20
_SNIFF_FIRST: Final = 64 * 1024  # bigger files are sniffed before the rest is read
OVERLAP: Final = 64 * 1024
LINE_CAP: Final = 1024
CUT: Final = "[…]"

_UNANCHORED: Any = None  # re2's UNANCHORED, set by `_re2()`: every regex here is made by a caller of it
_NL: Final = 10


class PatternError(ValueError):
    """A pattern that cannot be used (a regex RE2 refuses, a glob too long or too wide); the message says why."""


def _re2() -> Any:
    """The RE2 module, imported by the first pattern compiled: a server that never greps does not load it."""
    global _UNANCHORED
    import re2

    _UNANCHORED = re2._Anchor.UNANCHORED
    return re2


_LINES = "(?m)"  # what grep puts before a pattern: the agent never wrote it, so no error shows it
_META = re.compile(r"([\\.+*?()|\[\]{}^$])")


def regex_message(exc: Exception, pattern: str = "", prefix: str = "") -> str:
    """RE2's complaint about `pattern` (compiled as `prefix + pattern`) in the agent's words: without `prefix`,
    saying what RE2 lacks, and with the pattern escaped, in case the text itself was meant."""
    arg = exc.args[0] if exc.args else str(exc)
    said = arg.decode("utf-8", "replace") if isinstance(arg, bytes) else str(arg)
    if prefix:
        said = said.replace(f": {prefix}", ": ", 1)
    said += "; the syntax is RE2 (no lookaround, no backreferences)"
    escaped = _META.sub(r"\\\1", pattern)
    if escaped != pattern:
        said += f"; to search for the text itself: {escaped}"
    return said


def compile_regex(pattern: str, *, case_insensitive: bool = False, lines: bool = True) -> Any:
    """Compile a Go-compatible (RE2) pattern to a byte-level RE2 object.

    `lines=True` is the grep mode: multi-line anchors and no match across `\\n`.
    Capturing groups are parsed as plain groups: only where a match starts is
    needed, and asking RE2 for submatches would push it off its fast DFA path.
    """
    re2 = _re2()
    options = re2.Options()
    options.log_errors = False  # RE2 would print every bad pattern to stderr
    options.never_capture = True
    options.case_sensitive = not case_insensitive
    if lines:
        options.never_nl = True
    try:
        source = pattern.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise PatternError(f"pattern is not valid UTF-8: {exc.reason}") from None
    try:
        compiled = re2.compile(_LINES.encode() + source if lines else source, options)
    except re2.error as exc:
        raise PatternError(regex_message(exc, pattern, _LINES if lines else "")) from None
    # The low-level object: the Python wrapper's search() builds a generator and a
    # match object per call, which costs more than the scan of a typical file.
    return compiled._regexp


def finder(regex: Any) -> Callable[[bytes], bool]:
    """A test for whether `regex` matches anywhere in a (short) byte string."""
    match = regex.Match

    def found(data: bytes) -> bool:
        return bool(match(_UNANCHORED, data, 0, len(data))[0][0] >= 0)

    return found


class Prefilter:
    """Finds the next occurrence of any of a few literals: the lines worth running the full pattern on."""

    def __init__(self, literals: list[str], ignore_case: bool) -> None:
        re2 = _re2()
        options = re2.Options()
        options.literal = True
        options.log_errors = False
        options.case_sensitive = not ignore_case
        self._finders = [re2.compile(lit.encode("utf-8"), options)._regexp.Match for lit in literals]
        self._next = [-2] * len(literals)

    @classmethod
    def for_pattern(cls, pattern: str, case_insensitive: bool) -> Prefilter | None:
        found = required_literals(pattern)
        if found is None:
            return None
        literals, ignore_case = found
        return cls(literals, ignore_case or case_insensitive or ("(?" in pattern and "i" in pattern))

    def first(self, buf: bytes) -> int:
        """Whether any literal occurs in `buf` at all (>= 0), without caching anything."""
        n = len(buf)
        for finder in self._finders:
            if finder(_UNANCHORED, buf, 0, n)[0][0] >= 0:
                return 0
        return -1

    def reset(self) -> None:
        """Forget cached positions: a new buffer (or new bounds) follows."""
        self._next = [-2] * len(self._next)

    def find(self, buf: bytes, p: int, hi: int) -> int:
        """Where the first literal occurrence at or after `p` starts (-1: none before `hi`)."""
        best = -1
        nexts = self._next
        for j, finder in enumerate(self._finders):
            at = nexts[j]
            if at != -1 and at < p:  # -2: not looked for yet; below p: already passed
                at = nexts[j] = int(finder(_UNANCHORED, buf, p, hi)[0][0])
            if at >= 0 and (best < 0 or at < best):
                best = at
        return best


@dataclass(slots=True)
class Hit:
    """One matching line, with its context (each line capped at LINE_CAP bytes)."""

    line_number: int
    line: str
    before: list[str]
    after: list[str]
    need: int = 0  # after-context lines still to come from the next block


# Shared by every hit when no context is asked for: thousands of empty lists would only feed the GC.
_NO_CONTEXT: Final[list[str]] = []


def _char_start(buf: bytes, i: int, lo: int) -> int:
    """Move a cut point back off UTF-8 continuation bytes so no character is split."""
    stop = max(lo, i - 3)
    while stop < i < len(buf) and buf[i] & 0xC0 == 0x80:
        i -= 1
    return i


def _text(buf: bytes, lo: int, hi: int, cut_lo: bool, cut_hi: bool) -> str:
    text = buf[lo:hi].decode("utf-8", "replace")
    if not cut_hi and text.endswith("\r"):
        text = text[:-1]
    if cut_lo:
        text = CUT + text
    if cut_hi:
        text += CUT
    return text


def _head(buf: bytes, lo: int, hi: int, continues: bool = False) -> str:
    """A context line: its first LINE_CAP bytes."""
    if hi - lo <= LINE_CAP and not continues:
        return _text(buf, lo, hi, False, False)
    cap = _char_start(buf, min(hi, lo + LINE_CAP), lo)
    return _text(buf, lo, cap, False, cap < hi or continues)


def _around(buf: bytes, lo: int, hi: int, at: int, cut_before: bool, continues: bool) -> str:
    """A matching line: whole if short, else LINE_CAP bytes starting a little before the match."""
    if hi - lo <= LINE_CAP and not cut_before and not continues:
        return _text(buf, lo, hi, False, False)
    start = max(lo, min(at - LINE_CAP // 8, hi - LINE_CAP))
    if start > lo:
        start = _char_start(buf, start, lo)
    end = min(hi, start + LINE_CAP)
    if end < hi:
        end = _char_start(buf, end, start)
    return _text(buf, start, end, cut_before or start > lo, continues or end < hi)


class LineSearch:
    """Searches files one after another for one pattern; not shared between threads."""

    def __init__(self, regex: Any, context: int, expired: Callable[[], bool],
                 prefilter: Prefilter | None = None) -> None:
        self._match = regex.Match
        self._pre = prefilter
        self.context = context
        self.expired = expired
        self.timed_out = False
        self.over_budget = False
        self._budget = 0
        self._hits: list[Hit] = []
        self._limit = 0
        self._open: list[Hit] = []
        self._prev: deque[str] = deque(maxlen=max(context, 1))

    def _find(self, buf: bytes, lo: int, hi: int) -> int:
        return int(self._match(_UNANCHORED, buf, lo, hi)[0][0])

    def search(self, fd: int, size: int, limit: int, budget: int = 1 << 62) -> list[Hit]:
        """The first `limit` matching lines of the open file `fd` ([] for a binary file).

        Sets `timed_out` when `expired()` said stop before the file was done, and
        `over_budget` when the hits' text (context counted at its most) passed `budget` bytes.
        """
        if size > _SNIFF_FIRST:
            # The head is read apart (pread: the file's offset stays at 0), and then again with the rest: joining
            # head and rest copied every big file once more, a third of a search's reading time.
            if looks_binary(os.pread(fd, SNIFF, 0)):
                return []
            buf = os.read(fd, min(size + 1, BLOCK))
            eof = len(buf) <= size and len(buf) < BLOCK
        else:
            buf = os.read(fd, size + 1)  # +1: a short read proves we reached the end
            eof = len(buf) <= size
            if looks_binary(buf):
                return []
        if eof and (self._find(buf, 0, len(buf)) if self._pre is None else self._pre.first(buf)) < 0:
            return []  # the common case, kept short: a whole file without a match
        self._hits, self._limit, self._open, self._budget = [], limit, [], budget
        self._prev.clear()
        pos, line_no = 0, 1
        while True:
            end = len(buf) if eof else buf.rfind(b"\n", pos) + 1
            if end > pos:
                line_no = self._lines(buf, pos, end, line_no, eof)
                pos = end
            if eof or (len(self._hits) >= self._limit and not self._open):
                return self._hits
            if self.expired():
                self.timed_out = True
                return self._hits
            if len(buf) - pos >= BLOCK:
                buf, pos, eof = self._long_line(fd, buf, pos, line_no)
                line_no += 1
                continue
            more = os.read(fd, BLOCK)
            eof = len(more) < BLOCK
            buf = buf[pos:] + more
            pos = 0

    # -- complete lines ---------------------------------------------------------------------

    def _lines(self, buf: bytes, lo: int, hi: int, line_no: int, eof: bool) -> int:
        """Search the complete lines buf[lo:hi]; return the number of the line after them."""
        context = self.context
        if self._open:
            self._fill(buf, lo, hi)
        # A match at `hi` is in a line only if the last line has no newline (end of file).
        valid_end = hi + 1 if eof and hi > lo and buf[hi - 1] != _NL else hi
        hits, pre = self._hits, self._pre
        p, counted, n = lo, lo, line_no
        if pre is not None:
            pre.reset()
        while len(hits) < self._limit:
            if pre is None:
                at = self._find(buf, p, hi)
                if at < 0 or at >= valid_end:
                    break
                k = buf.rfind(b"\n", lo, at)
                ls = k + 1 if k >= 0 else lo
                le = buf.find(b"\n", at, hi)
                if le < 0:
                    le = hi
            else:
                # A literal occurs at `c`: run the full pattern on that line alone.
                c = pre.find(buf, p, hi)
                if c < 0:
                    break
                k = buf.rfind(b"\n", lo, c)
                ls = k + 1 if k >= 0 else lo
                le = buf.find(b"\n", c, hi)
                if le < 0:
                    le = hi
                at = self._find(buf, max(ls, p), le)
                if at < 0:
                    p = le + 1
                    if p >= valid_end:
                        break
                    continue
            n += buf.count(b"\n", counted, ls)
            counted = ls
            hit = Hit(n, _around(buf, ls, le, at, False, False),
                      self._before(buf, lo, ls) if context else _NO_CONTEXT, [] if context else _NO_CONTEXT)
            hits.append(hit)
            self._spend(hit)
            if context:
                self._after(hit, buf, le + 1, hi, eof)
            p = le + 1
            if p >= valid_end:
                break
        if context and not eof:
            self._remember(buf, lo, hi)
        return 0 if eof else n + buf.count(b"\n", counted, hi)  # at the end nobody needs the count

    def _before(self, buf: bytes, lo: int, ls: int) -> list[str]:
        lines = _lines_ending_at(buf, lo, ls, self.context)
        missing = self.context - len(lines)
        if missing and self._prev:
            earlier = list(self._prev)[-missing:]
            return earlier + lines
        return lines

    def _after(self, hit: Hit, buf: bytes, b: int, hi: int, eof: bool) -> None:
        hit.after.extend(_lines_starting_at(buf, b, hi, self.context - len(hit.after)))
        hit.need = self.context - len(hit.after)
        if hit.need and not eof:
            self._open.append(hit)

    def _fill(self, buf: bytes, lo: int, hi: int) -> None:
        """Give hits from earlier blocks the first lines of this one as after-context."""
        self._give(_lines_starting_at(buf, lo, hi, max(h.need for h in self._open)))

    def _give(self, lines: list[str]) -> None:
        for hit in self._open:
            take = lines[: hit.need]
            hit.after.extend(take)
            hit.need -= len(take)
        self._open = [h for h in self._open if h.need > 0]

    def _remember(self, buf: bytes, lo: int, hi: int) -> None:
        """Keep the block's last lines: the before-context of matches early in the next block."""
        self._prev.extend(_lines_ending_at(buf, lo, hi, self.context))

    # -- one line longer than a block ---------------------------------------------------------

    def _long_line(self, fd: int, buf: bytes, ls: int, line_no: int) -> tuple[bytes, int, bool]:
        """Search the line starting at buf[ls] (no newline yet, >= BLOCK bytes) window by window.

        Returns the buffer, the position just after the line, and whether the file ended.
        """
        head = _head(buf, ls, len(buf), continues=True)
        before = list(self._prev)[-self.context:] if self.context else []
        if self._open:
            self._give([head])
        if self.context:
            self._prev.append(head)
        found = len(self._hits) >= self._limit
        lo, in_view = ls, True  # where to search from; is the line's start still in `buf`?
        while True:
            if not found:
                # The last byte is held back: it is the context `$` and `\b` need at the window edge.
                at = self._find(buf, lo, len(buf) - 1)
                if at >= 0:
                    found = True
                    self._record(line_no, _around(buf, ls if in_view else lo, len(buf) - 1, at, not in_view, True),
                                 before)
            if self.expired():
                self.timed_out = True
                return buf, len(buf), True
            more = os.read(fd, BLOCK)
            eof = len(more) < BLOCK
            nl = more.find(b"\n")
            if nl < 0 and not eof:
                if not found:
                    buf, lo, in_view = buf[-(OVERLAP + 1):] + more, 1, False
                else:
                    buf = more  # already reported: only the line's end is wanted now
                continue
            if found:
                return more, (nl + 1 if nl >= 0 else len(more)), eof
            tail = buf[-(OVERLAP + 1):]
            buf = tail + more
            end = len(tail) + (nl if nl >= 0 else len(more))
            at = self._find(buf, 1, end)
            if at >= 0:
                self._record(line_no, _around(buf, 1, end, at, True, False), before)
            return buf, (end + 1 if nl >= 0 else end), eof

    @property
    def budget_left(self) -> int:
        """What is left of the last `search` call's byte budget."""
        return self._budget

    def _spend(self, hit: Hit) -> None:
        self._budget -= len(hit.line) + sum(map(len, hit.before)) + self.context * LINE_CAP
        if self._budget < 0:
            self.over_budget = True
            self._limit = len(self._hits)

    def _record(self, line_no: int, line: str, before: list[str]) -> None:
        hit = Hit(line_no, line, before if self.context else _NO_CONTEXT, [] if self.context else _NO_CONTEXT)
        self._hits.append(hit)
        self._spend(hit)
        if self.context:
            hit.need = self.context
            self._open.append(hit)


def _lines_ending_at(buf: bytes, lo: int, end: int, n: int) -> list[str]:
    """Up to `n` whole lines of `buf[lo:end]` that end just before `end` (a line start), in file order."""
    lines: list[str] = []
    e = end
    while len(lines) < n and e > lo:
        k = buf.rfind(b"\n", lo, e - 1)
        b = k + 1 if k >= 0 else lo
        lines.append(_head(buf, b, e - 1))
        e = b
    lines.reverse()
    return lines


def _lines_starting_at(buf: bytes, b: int, hi: int, n: int) -> list[str]:
    """Up to `n` lines of `buf[b:hi]` from `b` (a line start) on."""
    lines: list[str] = []
    while len(lines) < n and b < hi:
        e = buf.find(b"\n", b, hi)
        if e < 0:
            e = hi
        lines.append(_head(buf, b, e))
        b = e + 1
    return lines
