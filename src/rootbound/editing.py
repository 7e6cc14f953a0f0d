"""Exact replacements: find old text, put new text in its place. Pure functions over text, no I/O.

The rules (the README repeats them):
* `old` must occur exactly, apart from line endings: a CRLF file is matched with LF
  text and keeps its CRLF; new text gets the file's line ending. No fuzz, ever: text
  that differs in indentation, trailing whitespace or one word is not found, and the
  error shows the closest place and what differs there (`nearmatch`).
* `old` must occur once, unless `replace_all`; several places are refused with their lines.
* An empty `old` only fills an empty (or new) file.
* Several edits apply in order, each to the result of the ones before; any failure fails all.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Sequence
from dataclasses import dataclass

from rootbound import nearmatch

__all__ = ["Edit", "EditError", "Edited", "apply", "numbered"]

CONTEXT = 3  # unchanged lines shown around a change
_MAX_SHOWN_LINES = 60  # lines of the result shown in all
_MAX_LISTED = 20  # match lines listed when old text is ambiguous
_MAX_DIFFERENCES = 3  # differing lines explained when old text is not found
_MAX_REGION = 16  # lines of the closest region shown when old text is not found
_LINE_NUMBER = re.compile(r"^ *\d+\t")


class EditError(ValueError):
    """The edit cannot be made; the message says why and what to send instead. Nothing was changed."""


@dataclass(frozen=True)
class Edit:
    old: str
    new: str
    replace_all: bool = False


@dataclass(frozen=True)
class Edited:
    text: str
    replacements: int
    first_changed_line: int  # 1-based, in the new text
    shown: str  # the changed lines with a few around them, numbered as `cat -n` does


def apply(text: str, edits: Sequence[Edit], path: str) -> Edited:
    """Make every edit in order, or raise `EditError` and change nothing."""
    spans: list[tuple[int, int]] = []  # changed character ranges of the current text
    total = 0
    for number, edit in enumerate(edits, 1):
        where = "" if len(edits) == 1 else f"edit {number} of {len(edits)}: "
        later = number > 1
        try:
            text, splices = _one(text, edit, path, later)
        except EditError as exc:
            raise EditError(where + str(exc)) from None
        spans = _remap(spans, splices)
        total += len(splices)
    norm = text.replace("\r\n", "\n")
    lines = norm.split("\n")
    ranges = _line_ranges(text, spans)
    first = ranges[0][0] if ranges else 1
    return Edited(text, total, first, _show(lines, ranges))


# -- one edit ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Splice:
    start: int  # in the text before this edit
    end: int
    new: str
    changed: tuple[int, int]  # the part of `new` that differs from what it replaces, relative to start


def _one(text: str, edit: Edit, path: str, later: bool) -> tuple[str, list[_Splice]]:
    old, new = _lf(edit.old), _lf(edit.new)
    if old == new:
        raise EditError("old_string and new_string are the same; nothing to change")
    eol = _eol(text, edit.new)
    if old == "":
        if text:
            raise EditError(f"old_string is empty, but {path} is not empty (an empty old_string only creates a file "
                            "or fills an empty one); to insert text, give the neighbouring lines as old_string and "
                            "the same lines plus the new ones as new_string; nothing was changed")
        return _to_eol(new, eol), [_Splice(0, 0, _to_eol(new, eol), (0, len(_to_eol(new, eol))))]
    norm, crs = _normalise(text)
    found = _find_all(norm, old, None if edit.replace_all else 2)
    if not found:
        raise EditError(_not_found(norm, old, path, later))
    if len(found) > 1 and not edit.replace_all:
        everywhere = _find_all(norm, old, None)
        raise EditError(_ambiguous(norm, everywhere, path, later))
    splices = []
    replacement = _to_eol(new, eol)
    for at in found:
        start, end = _original(at, crs), _original(at + len(old), crs)
        splices.append(_Splice(start, end, replacement, _differing(text[start:end], replacement)))
    out, cursor = [], 0
    for s in splices:
        out.append(text[cursor:s.start])
        out.append(s.new)
        cursor = s.end
    out.append(text[cursor:])
    return "".join(out), splices


def _lf(text: str) -> str:
    return text.replace("\r\n", "\n")


def _eol(text: str, new: str) -> str:
    """The file's line ending (the one most of its lines use); for a file without any, the new text's."""
    crlf = text.count("\r\n")
    lf = text.count("\n") - crlf
    if crlf or lf:
        return "\r\n" if crlf > lf else "\n"
    crlf = new.count("\r\n")
    return "\r\n" if crlf and crlf == new.count("\n") else "\n"


def _to_eol(text: str, eol: str) -> str:
    return text if eol == "\n" else text.replace("\n", eol)


def _normalise(text: str) -> tuple[str, list[int]]:
    """The text with CRLF as LF, and where (in the new text) each removed CR stood: before those `\\n`s."""
    if "\r\n" not in text:
        return text, []
    norm = text.replace("\r\n", "\n")
    crs, shift, at = [], 0, text.find("\r\n")
    while at >= 0:
        crs.append(at - shift)  # the "\n" that followed this "\r" sits here in `norm`
        shift += 1
        at = text.find("\r\n", at + 2)
    return norm, crs


def _original(pos: int, crs: list[int]) -> int:
    """A position in the normalised text, in the original: every CR before it counts (a CR just before
    the position's own `\\n` stays outside a match that ends there and inside one that starts there)."""
    return pos + bisect.bisect_left(crs, pos)


def _find_all(text: str, old: str, limit: int | None) -> list[int]:
    found: list[int] = []
    at = text.find(old)
    while at >= 0 and (limit is None or len(found) < limit):
        found.append(at)
        at = text.find(old, at + len(old))  # replace_all replaces non-overlapping matches, as str.replace does
    return found


def _differing(before: str, after: str) -> tuple[int, int]:
    """The part of `after` (start, end) that differs from `before`: for the first changed line and the view."""
    p = 0
    limit = min(len(before), len(after))
    while p < limit and before[p] == after[p]:
        p += 1
    q = 0
    while q < limit - p and before[-1 - q] == after[-1 - q]:
        q += 1
    return p, len(after) - q


# -- where the changes are -----------------------------------------------------------------------


def _remap(spans: list[tuple[int, int]], splices: list[_Splice]) -> list[tuple[int, int]]:
    """Earlier changed ranges moved through this edit's splices, plus this edit's own changes; merged."""
    starts = [s.start for s in splices]
    shifts = [0]
    for s in splices:
        shifts.append(shifts[-1] + len(s.new) - (s.end - s.start))

    def moved(pos: int, side: int) -> int:
        n = bisect.bisect_right(starts, pos) - 1  # the last splice starting at or before pos
        if n < 0:
            return pos
        s = splices[n]
        if pos >= s.end:
            return pos + shifts[n + 1]
        new_start = s.start + shifts[n]
        return new_start if side == 0 else new_start + len(s.new)  # inside a replaced part: its new extent

    out = [(moved(a, 0), moved(b, 1)) for a, b in spans]
    out += [(s.start + shifts[n] + s.changed[0], s.start + shifts[n] + s.changed[1]) for n, s in enumerate(splices)]
    out.sort()
    merged: list[tuple[int, int]] = []
    for a, b in out:
        if merged and a <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], b))
        else:
            merged.append((a, b))
    return merged


def _line_ranges(text: str, spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """1-based inclusive line ranges of the changed character spans."""
    breaks = [m.start() for m in re.finditer("\n", text)]
    ranges = []
    for a, b in spans:
        if a < b and a > 0 and text[a] in "\r\n" and text[a - 1] != "\n":
            a += 2 if text.startswith("\r\n", a) else 1  # lines added after a line's end begin on the next one
        first = bisect.bisect_left(breaks, a) + 1
        last = bisect.bisect_left(breaks, max(b - 1, a)) + 1
        ranges.append((first, max(first, last)))
    return ranges


def numbered(lines: Sequence[str], first: int, last: int) -> list[str]:
    """Lines `first`..`last` (1-based, inclusive) as `cat -n` prints them: number right-aligned, a tab, the line."""
    return [f"{n:6d}\t{lines[n - 1]}" for n in range(max(first, 1), min(last, len(lines)) + 1)]


def _show(lines: list[str], ranges: list[tuple[int, int]]) -> str:
    if lines and lines[-1] == "":
        lines = lines[:-1]  # the text after the final newline is not a line
    groups: list[tuple[int, int]] = []
    for a, b in ranges:
        a, b = a - CONTEXT, b + CONTEXT
        if groups and a <= groups[-1][1] + 1:
            groups[-1] = (groups[-1][0], max(groups[-1][1], b))
        else:
            groups.append((a, b))
    out: list[str] = []
    for n, (a, b) in enumerate(groups):
        block = numbered(lines, a, b)
        if out and len(out) + len(block) > _MAX_SHOWN_LINES:
            out.append(f"... and {len(groups) - n} more changed place{'s' * (len(groups) - n != 1)}")
            break
        if out:
            out.append("...")
        out.extend(block[:_MAX_SHOWN_LINES])
    return "\n".join(out)


# -- why old text was not used -------------------------------------------------------------------


def _line_of(text: str, pos: int) -> int:
    return text.count("\n", 0, pos) + 1


def _ambiguous(text: str, found: list[int], path: str, later: bool) -> str:
    lines = [_line_of(text, at) for at in found[:_MAX_LISTED]]
    listed = ", ".join(map(str, lines)) + (", ..." if len(found) > _MAX_LISTED else "")
    now = " (line numbers after the edits before this one)" if later else ""
    return (f"old_string matches {len(found)} places in {path}, at lines {listed}{now}; nothing was changed. Add "
            "neighbouring lines to old_string until it matches one place only, or set replace_all to true to "
            f"replace all {len(found)}")


def _not_found(text: str, old: str, path: str, later: bool) -> str:
    now = " (after the edits before this one)" if later else ""
    hint = _likely_slip(text, old)
    lines = text.split("\n")
    parts = old.split("\n")
    whole_lines = parts[-1] == ""
    want = nearmatch.Want(parts[:-1] if whole_lines else parts, partial_start=True, partial_end=not whole_lines)
    near = nearmatch.closest(lines, want)
    if near is None:
        return (f"old_string was not found in {path}{now}, and no line of the file resembles it; nothing was "
                f"changed.{hint} Read the file again (read_file) and copy the text to replace exactly")
    notes = _differences(lines, want, near)
    out = [f"old_string was not found in {path}{now}; nothing was changed.{hint} The closest text is at "
           f"{nearmatch.span(near.start + 1, near.end)}" + (", where it differs:" if notes else ":")]
    out.extend(notes)
    last = min(near.end, near.start + _MAX_REGION)
    out.append(f"{nearmatch.span(near.start + 1, last).capitalize()} of the file as they are now:")
    out.extend(numbered(lines, near.start + 1, last))
    out.append("Copy old_string exactly from these lines (without the line numbers) and try again.")
    return "\n".join(out)


def _differences(lines: list[str], want: nearmatch.Want, near: nearmatch.Near) -> list[str]:
    notes: list[str] = []
    count = 0
    last = len(want.lines) - 1
    for pair in near.pairs:
        if pair.want is not None and pair.found is not None:
            expected, found = want.lines[pair.want], lines[pair.found]
            why = nearmatch.explain(expected, found, "old_string", partial_start=pair.want == 0,
                                    partial_end=pair.want == last and want.partial_end)
            if not why:
                continue
            note = [f"- line {pair.found + 1}: {why}", f"    file:       {nearmatch.visible(found)}",
                    f"    old_string: {nearmatch.visible(expected)}"]
        elif pair.found is not None:
            note = [f"- line {pair.found + 1}: the file has this line, old_string lacks it: "
                    f"{nearmatch.visible(lines[pair.found])}"]
        else:
            assert pair.want is not None
            note = [f"- old_string has a line the file lacks here: {nearmatch.visible(want.lines[pair.want])}"]
        count += 1
        if count <= _MAX_DIFFERENCES:
            notes.extend(note)
    if count > _MAX_DIFFERENCES:
        notes.append(f"- and {count - _MAX_DIFFERENCES} more differing line{'s' * (count - _MAX_DIFFERENCES != 1)}")
    return notes


def _likely_slip(text: str, old: str) -> str:
    """A sentence naming a mistake that explains the miss, when one does."""
    parts = old.split("\n")
    numbered_lines = [p for p in parts if p]
    if numbered_lines and all(_LINE_NUMBER.match(p) for p in numbered_lines):
        return (" old_string starts its lines with line numbers (as read_file shows them, e.g. "
                f"{nearmatch.visible(_LINE_NUMBER.match(numbered_lines[0]).group())}); leave them out.")  # type: ignore[union-attr]
    if "\n" not in old and "\\n" in old and old.replace("\\n", "\n") in text:
        return " old_string holds the two characters '\\n' where the file has a line break; send real line breaks."
    return ""
