"""Unified diffs: parse one, pick the part meant for a file, apply it to bytes. Pure functions, no I/O.

The parser is our own, not `unidiff`: unidiff 1.0.1 rejects a hunk whose header
counts are too high ("Hunk is shorter than expected"), silently drops lines when
they are too low, and needs `---`/`+++` headers — and diffs written by an LLM get
the counts wrong more often than not. Here the counts are only a hint for where
a hunk ends; the hunk's own lines are the truth.

Matching rules (the README repeats them):
* Context and removed lines must match the file exactly, apart from the line
  terminator (LF vs CRLF, and a missing newline at the end of the file) and, for
  context lines only, trailing whitespace.
* Each hunk is placed on its own in the original file, by its context and removed
  lines: where they match once, it applies there, whatever its header's line says.
  Where they match several places, it applies only if one of them is the line its
  header names; otherwise the patch is refused with the places listed. Never a guess,
  never fuzz: a hunk that matches nowhere fails the whole patch, and the error shows
  the closest place and what differs there (`nearmatch`).
* Hunks may come in any order; they apply by position, and overlapping hunks are refused.
* Added lines take the file's line terminator (CRLF if most lines use it).
* The end of file keeps its newline state unless the patch says otherwise with
  `\\ No newline at end of file`.
* The `*** Begin Patch` / `*** Update File: path` envelope (OpenAI's apply_patch) is read
  too: hunks without line numbers, each placed by its lines and optional `@@ anchor` lines
  (the hunk must lie inside the block the anchor line opens).
"""

from __future__ import annotations

import bisect
import re
from array import array
from dataclasses import dataclass, field

from rootbound import nearmatch

__all__ = ["Applied", "FilePatch", "Hunk", "PatchError", "apply", "parse", "select"]

_HEADER = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
_MAX_SHOWN = 60  # characters of a line quoted in an error


class PatchError(ValueError):
    """The patch is malformed or does not apply; the message says where."""


@dataclass
class Line:
    kind: str  # " " context, "-" removed, "+" added
    body: bytes  # without the line terminator
    no_eol: bool = False  # followed by "\ No newline at end of file"


@dataclass
class Hunk:
    number: int  # 1-based, in the order of the selected file's hunks
    old_start: int | None  # the header's old line number; None for a bare "@@"
    old_len: int | None
    new_len: int | None
    lines: list[Line] = field(default_factory=list)
    patch_line: int = 0  # where the header is in the patch text, for messages
    anchors: list[str] = field(default_factory=list)  # "@@ def median(": lines the hunk lies within, outermost first
    at_eof: bool = False  # "*** End of File": the hunk ends the file

    @property
    def old(self) -> list[Line]:
        return [ln for ln in self.lines if ln.kind != "+"]

    @property
    def new(self) -> list[Line]:
        return [ln for ln in self.lines if ln.kind != "-"]


@dataclass
class FilePatch:
    old_name: str | None  # None for /dev/null; "" when the patch had no file headers
    new_name: str | None
    hunks: list[Hunk] = field(default_factory=list)

    @property
    def creates(self) -> bool:
        return self.old_name is None

    @property
    def deletes(self) -> bool:
        return self.new_name is None


@dataclass(frozen=True)
class Applied:
    hunk: int
    line: int  # 1-based line of the original file where the hunk applied
    offset: int | None  # lines away from where its header said; None for a bare "@@"


# -- parsing --------------------------------------------------------------------------------------

_GIT_NOISE = ("diff ", "index ", "new file mode", "deleted file mode", "old mode", "new mode", "similarity index",
              "dissimilarity index", "rename from", "rename to", "copy from", "copy to", "Index: ", "=====")


def _name(raw: str) -> str | None:
    name = raw.split("\t", 1)[0].strip()
    if len(name) >= 2 and name[0] == name[-1] == '"':
        name = name[1:-1]
    return None if name == "/dev/null" else name


def _is_file_header(lines: list[str], i: int) -> bool:
    return lines[i].startswith("--- ") and i + 1 < len(lines) and lines[i + 1].startswith("+++ ")


def _is_body(line: str) -> bool:
    return line[:1] in (" ", "-", "+", "\\")


def parse(text: str) -> list[FilePatch]:
    """Parse a unified diff into file sections. Text outside hunks (a commit message, git's
    extended headers) is skipped; a line that looks like hunk content outside a hunk is an error."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if any(line.rstrip() == _BEGIN for line in lines):
        return _parse_envelope(lines)
    files: list[FilePatch] = []
    current: FilePatch | None = None
    in_hunks = False  # a hunk has been read in the current section
    i = 0
    while i < len(lines):
        line = lines[i]
        if _is_file_header(lines, i):
            current = FilePatch(_name(line[4:]), _name(lines[i + 1][4:]))
            files.append(current)
            in_hunks = False
            i += 2
            continue
        if line.startswith("@@"):
            if current is None:
                current = FilePatch("", "")
                files.append(current)
            hunk, i = _parse_hunk(lines, i, len(current.hunks) + 1)
            current.hunks.append(hunk)
            in_hunks = True
            continue
        if line.startswith(("GIT binary patch", "Binary files ")):
            raise PatchError("invalid patch: binary patches are not supported; use write_file")
        if in_hunks and line[:1] in (" ", "-", "+") and line.strip("-+ ") and not line.startswith(_GIT_NOISE):
            raise PatchError(f"invalid patch: line {i + 1} is outside any hunk (a hunk's header line count may be "
                             f"too small, or a line lacks its leading ' ', '+' or '-'): {_show(line)}")
        i += 1  # preamble, git headers, blank lines
    files = [f for f in files if f.hunks]
    if not files:
        raise PatchError("invalid patch: no hunks found; expected a unified diff with '@@ -start,count "
                         "+start,count @@' hunk headers followed by ' ', '-' and '+' lines")
    return files


def _parse_hunk(lines: list[str], i: int, number: int) -> tuple[Hunk, int]:
    m = _HEADER.match(lines[i])
    if m:
        old_start = int(m.group(1))
        old_len = 1 if m.group(2) is None else int(m.group(2))
        new_len = 1 if m.group(4) is None else int(m.group(4))
        hunk = Hunk(number, old_start, old_len, new_len, patch_line=i + 1)
    elif re.match(r"^@@\s*(@@.*)?$", lines[i]):  # "@@" or "@@ @@" without numbers: placed by its context
        hunk = Hunk(number, None, None, None, patch_line=i + 1)
    elif re.match(r"^@@ +[^-\s]", lines[i]):  # "@@ def median(": apply_patch's anchor, in a unified diff
        hunk = Hunk(number, None, None, None, patch_line=i + 1, anchors=[lines[i][2:].strip()])
    else:
        raise PatchError(f"invalid patch: line {i + 1} is not a valid hunk header: {_show(lines[i])}")
    olds = news = 0
    j = i + 1
    while j < len(lines):
        line = lines[j]
        counted = hunk.old_len is not None and hunk.new_len is not None
        done = not counted or (olds >= (hunk.old_len or 0) and news >= (hunk.new_len or 0))
        if line.startswith("@@"):
            break
        # A "--- x" / "+++ y" pair is the next file's header, unless the counts say we are still
        # inside this hunk (a removed "-- x" then an added "++ y") and no hunk header follows it.
        if _is_file_header(lines, j) and (done or (j + 2 < len(lines) and lines[j + 2].startswith("@@"))):
            break
        if line == "":
            # An empty line is an empty context line whose leading space was stripped, if the hunk goes on.
            if not done or _continues(lines, j + 1):
                hunk.lines.append(Line(" ", b""))
                olds += 1
                news += 1
                j += 1
                continue
            break
        kind = line[0]
        if kind == "\\":
            if hunk.lines:
                hunk.lines[-1].no_eol = True
        elif kind in (" ", "-", "+"):
            hunk.lines.append(Line(kind, _encode(line[1:], j)))
            olds += kind != "+"
            news += kind != "-"
        else:
            break  # text after the hunk
        j += 1
    if not hunk.lines:
        raise PatchError(f"invalid patch: hunk {number} (line {i + 1} of the patch) has no lines")
    return hunk, j


def _continues(lines: list[str], j: int) -> bool:
    while j < len(lines) and lines[j] == "":
        j += 1
    return j < len(lines) and _is_body(lines[j]) and not _is_file_header(lines, j)


def _encode(body: str, j: int) -> bytes:
    try:
        return body.encode("utf-8")
    except UnicodeEncodeError:
        raise PatchError(f"invalid patch: line {j + 1} is not valid text") from None


# -- the *** Begin Patch envelope ----------------------------------------------------------------

_BEGIN = "*** Begin Patch"


def _parse_envelope(lines: list[str]) -> list[FilePatch]:
    """OpenAI's apply_patch format: `*** Update File: path` sections of hunks without line numbers, each
    begun by `@@` (optionally `@@ anchor`: a line the hunk lies within), `*** Add File: path` with '+' lines,
    `*** Delete File: path`; between `*** Begin Patch` and `*** End Patch`."""
    i = next(n for n, line in enumerate(lines) if line.rstrip() == _BEGIN) + 1
    files: list[FilePatch] = []
    current: FilePatch | None = None
    hunk: Hunk | None = None
    blanks = 0  # empty lines seen: context lines that lost their space, unless the hunk ends here

    def new_hunk(at: int, anchors: list[str]) -> Hunk:
        assert current is not None
        h = Hunk(len(current.hunks) + 1, None, None, None, patch_line=at + 1, anchors=anchors)
        current.hunks.append(h)
        return h

    while i < len(lines):
        line = lines[i].removesuffix("\r")
        directive = line.startswith("*** ")
        if directive or line.startswith("@@"):
            blanks = 0
        if line.rstrip() == "*** End Patch":
            break
        if directive and line.startswith(("*** Update File:", "*** Add File:", "*** Delete File:")):
            kind, name = line[4:].split(":", 1)
            name = name.strip()
            if kind == "Update File":
                current = FilePatch(name, name)
            elif kind == "Add File":
                current = FilePatch(None, name)
                hunk = new_hunk(i, [])
                hunk.old_start, hunk.old_len = 0, 0  # a pure insertion into the empty file
            else:
                current = FilePatch(name, None)
            files.append(current)
            hunk = hunk if kind == "Add File" else None
        elif directive and line.startswith("*** Move to:"):
            raise PatchError("invalid patch: renaming a file (*** Move to) is not supported; apply the changes "
                             "with patch_file, then rename with move")
        elif directive and line.rstrip() == "*** End of File":
            if hunk is not None:
                hunk.at_eof = True
        elif current is None:
            if line.strip():
                raise PatchError(f"invalid patch: line {i + 1} comes before any '*** Update File: path' line: "
                                 f"{_show(line)}")
        elif line.startswith("@@"):
            m = _HEADER.match(line)
            anchor = "" if m else line[2:].strip()
            if current.deletes:
                raise PatchError(f"invalid patch: line {i + 1}: a deleted file has no hunks")
            if hunk is None or hunk.lines or current.creates:
                hunk = new_hunk(i, [])
            if m:
                hunk.old_start, hunk.old_len, hunk.new_len = int(m.group(1)), int(m.group(2) or 1), \
                    int(m.group(4) or 1)
            elif anchor:
                hunk.anchors.append(anchor)
        elif line == "":
            blanks += 1
        elif line[0] in (" ", "-", "+", "\\") and not current.deletes:
            if current.creates and line[0] != "+":
                raise PatchError(f"invalid patch: line {i + 1}: every line of an added file starts with '+': "
                                 f"{_show(line)}")
            if hunk is None or hunk.at_eof:
                hunk = new_hunk(i, [])
            for _ in range(blanks):
                hunk.lines.append(Line(" ", b""))
            blanks = 0
            if line[0] == "\\":
                if hunk.lines:
                    hunk.lines[-1].no_eol = True
            else:
                hunk.lines.append(Line(line[0], _encode(line[1:], i)))
        else:
            raise PatchError(f"invalid patch: line {i + 1} lacks its leading ' ', '+' or '-' (in a *** Begin Patch "
                             f"patch every line of a hunk starts with one): {_show(line)}")
        i += 1
    for f in files:
        if not f.deletes and not any(h.lines for h in f.hunks):
            raise PatchError(f"invalid patch: the section for {f.new_name} has no changes")
        f.hunks = [h for h in f.hunks if h.lines]
        for n, h in enumerate(f.hunks, 1):
            h.number = n
    if not files:
        raise PatchError("invalid patch: no '*** Update File: path' section after *** Begin Patch")
    return files


# -- choosing the section for `path` -------------------------------------------------------------


def _strip_prefix(name: str) -> str:
    name = name.removeprefix("./")
    for prefix in ("a/", "b/", "i/", "w/", "c/", "o/"):  # git's prefixes, incl. diff.mnemonicPrefix
        if name.startswith(prefix):
            return name[len(prefix):]
    return name


def _names(fp: FilePatch) -> set[str]:
    out = set()
    for n in (fp.old_name, fp.new_name):
        if n:
            out.update({n.removeprefix("./"), _strip_prefix(n)})
    return out


def select(files: list[FilePatch], path: str) -> FilePatch:
    """The section meant for `path` (root-relative, components joined by "/").

    One section: it is used whatever names its headers give (LLM diffs often get
    them wrong; `path` says which file). Several: the sections whose header names
    `path` (a/ b/ prefixes ignored), else those whose name ends with it on a path
    boundary. If that leaves none, or sections for different files, the patch is
    ambiguous and refused.
    """
    if len(files) == 1:
        return files[0]
    listed = ", ".join(sorted({(f.new_name or f.old_name or "?") for f in files}))
    exact = [f for f in files if path in _names(f)]
    chosen = exact or [f for f in files if any(n.endswith("/" + path) or path.endswith("/" + n) for n in _names(f))]
    if not chosen:
        raise PatchError(f"patch does not name {path}: it changes {listed}; send only the part for {path}")
    if len({_strip_prefix(f.new_name or f.old_name or "") for f in chosen}) > 1:
        raise PatchError(f"ambiguous patch: several of its files ({listed}) could be {path}; "
                         f"send only the part for {path}")
    merged = FilePatch(chosen[0].old_name, chosen[0].new_name)
    for f in chosen:  # one file split over several sections: their hunks in order
        merged.hunks.extend(f.hunks)
    for n, h in enumerate(merged.hunks, 1):
        h.number = n
    return merged


# -- applying -------------------------------------------------------------------------------------

_MAX_LISTED = 20  # candidate places listed when a hunk is ambiguous
_MAX_REJECTED = 10_000  # near-misses (a removed line's trailing whitespace) looked past before giving up
_REGION = 16  # lines of the closest place shown when a hunk does not match


def _split(data: bytes) -> list[bytes]:
    """Lines with their terminators; only the last may lack one."""
    lines = data.split(b"\n")
    out = [ln + b"\n" for ln in lines[:-1]]
    if lines[-1]:
        out.append(lines[-1])
    return out


def _key(line: bytes) -> bytes:
    return line.removesuffix(b"\n").removesuffix(b"\r")


def _loose(key: bytes) -> bytes:
    return key.rstrip(b" \t")


def _show(line: str | bytes) -> str:
    text = line.decode("utf-8", "replace") if isinstance(line, bytes) else line
    text = text.rstrip("\r\n")
    return repr(text if len(text) <= _MAX_SHOWN else text[:_MAX_SHOWN] + "...")


def _eol(lines: list[bytes], hunks: list[Hunk]) -> bytes:
    crlf = sum(1 for ln in lines if ln.endswith(b"\r\n"))
    lf = sum(1 for ln in lines if ln.endswith(b"\n")) - crlf
    if crlf or lf:
        return b"\r\n" if crlf > lf else b"\n"
    bodies = [ln.body for h in hunks for ln in h.lines if ln.kind == "+"]
    return b"\r\n" if bodies and all(b.endswith(b"\r") for b in bodies) else b"\n"


@dataclass(frozen=True)
class _Old:
    """A hunk's context and removed lines, as matched: context ignoring trailing whitespace, removed exactly."""

    exact: list[bytes | None]  # a removed line's key; None for a context line
    loose: list[bytes]

    @classmethod
    def of(cls, hunk: Hunk) -> _Old:
        bodies = [(ln.kind, ln.body.removesuffix(b"\r")) for ln in hunk.old]
        return cls([b if kind == "-" else None for kind, b in bodies], [_loose(b) for _, b in bodies])

    def __len__(self) -> int:
        return len(self.loose)


class _Lines:
    """The file's lines, searchable: their keys (trailing whitespace cut) joined into one bytes object,
    so a hunk is found with `bytes.find`.

    Comparing line lists at every candidate position costs lines x hunk length: a file of
    identical lines and a long hunk that almost matches kept a worker busy for hours. CPython's
    `find` switches to the two-way algorithm when a search gets expensive, so it stays linear.
    """

    def __init__(self, keys: list[bytes]) -> None:
        self.keys = keys
        self.count = len(keys)
        loose = [_loose(k) for k in keys]
        self.blob = b"\n" + b"\n".join(loose) + b"\n"  # every line sits between two "\n"s (keys hold none)
        self.starts = array("q", [0])  # offset of the "\n" before each line (and one past the last)
        offset = 0
        for key in loose:
            offset += len(key) + 1
            self.starts.append(offset)
        self._text: list[str] | None = None

    @property
    def text(self) -> list[str]:
        """The lines as text, for anchors and messages."""
        if self._text is None:
            self._text = [k.decode("utf-8", "replace") for k in self.keys]
        return self._text

    def line_at(self, offset: int) -> int:
        return bisect.bisect_left(self.starts, offset)

    def exact_at(self, old: _Old, at: int) -> bool:
        return all(want is None or self.keys[at + k] == want for k, want in enumerate(old.exact))

    def matches_at(self, old: _Old, at: int) -> bool:
        return 0 <= at <= self.count - len(old) and all(
            _loose(self.keys[at + k]) == want for k, want in enumerate(old.loose)) and self.exact_at(old, at)

    def find(self, old: _Old, lo: int, hi: int, limit: int) -> list[int]:
        """Up to `limit` places in lines [lo, hi) where `old` matches, first first."""
        needle = b"\n" + b"\n".join(old.loose) + b"\n"  # whole lines only: it starts and ends on a line break
        at, end = self.starts[lo], self.starts[hi] + 1
        found: list[int] = []
        rejected = 0
        while len(found) < limit:
            offset = self.blob.find(needle, at, end)
            if offset < 0:
                break
            line = self.line_at(offset)
            if self.exact_at(old, line):
                found.append(line)
            else:
                rejected += 1
                if rejected > _MAX_REJECTED:
                    break
            at = self.starts[line] + 1
        return found


def _scopes(lines: _Lines, hunk: Hunk) -> list[tuple[int, int]]:
    """The line ranges a hunk with `@@ anchor` lines may lie in: from each line that is (or begins with) the
    anchor to the end of the block it opens (the next line indented no deeper, which closes it, included).
    Nested anchors narrow the ranges one after the other."""
    text = lines.text
    scopes = [(0, lines.count)]
    for anchor in hunk.anchors:
        want = anchor.strip()
        inner: list[tuple[int, int]] = []
        for lo, hi in scopes:
            hits = [i for i in range(lo, hi) if text[i].strip() == want] or \
                   [i for i in range(lo, hi) if text[i].strip().startswith(want)]
            inner.extend((i, _block_end(text, i, hi)) for i in hits)
        if not inner:
            raise PatchError(f"patch failed: hunk {hunk.number}'s anchor '@@ {anchor}' names no line of the file"
                             + ("" if len(hunk.anchors) == 1 else " within the anchors before it")
                             + "; the file is unchanged")
        scopes = inner
    return scopes


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _block_end(text: list[str], at: int, hi: int) -> int:
    depth = _indent(text[at])
    for i in range(at + 1, hi):
        if text[i].strip() and _indent(text[i]) <= depth:
            return i + 1
    return hi


def _place(lines: _Lines, hunk: Hunk) -> int:
    """Where `hunk` applies in the original file: the one place its lines match, or refuse."""
    old = _Old.of(hunk)
    header_at: int | None = None
    if hunk.old_start is not None:
        header_at = hunk.old_start if hunk.old_len == 0 else max(hunk.old_start - 1, 0)
    if not old:  # a pure insertion: nothing to match, it goes where it says
        if hunk.at_eof:
            return lines.count
        if header_at is None:
            if lines.count:
                raise PatchError(f"patch failed: hunk {hunk.number} has only '+' lines and no line number, so "
                                 "nothing says where it goes; add the lines around it as context; the file is "
                                 "unchanged")
            return 0
        return min(header_at, lines.count)
    if hunk.at_eof:
        at = lines.count - len(old)
        if lines.matches_at(old, at):
            return at
        raise _mismatch(lines, hunk, old, max(at, 0), "at the end of the file")
    if hunk.anchors:  # the change itself (not its context) must lie in a block an anchor opens
        lead = _first_change(hunk)
        found = sorted({m for lo, hi in _scopes(lines, hunk)
                        for m in lines.find(old, max(lo - lead, 0), min(hi + len(old), lines.count), _MAX_LISTED + 1)
                        if lo <= m + lead < hi})
    else:
        found = lines.find(old, 0, lines.count, _MAX_LISTED + 1)
    if len(found) == 1:
        return found[0]
    if found:
        if header_at is not None and lines.matches_at(old, header_at):
            return header_at
        raise _ambiguous(hunk, found, header_at)
    if hunk.anchors:
        elsewhere = lines.find(old, 0, lines.count, 1)
        if elsewhere:
            raise PatchError(f"patch failed: hunk {hunk.number} matches at line {elsewhere[0] + 1}, which is not "
                             f"inside '@@ {hunk.anchors[-1]}'; fix the anchor or drop it; the file is unchanged")
    raise _mismatch(lines, hunk, old, header_at, "")


def _first_change(hunk: Hunk) -> int:
    """How many context lines come before the hunk's first removed or added line."""
    return next((n for n, ln in enumerate(hunk.lines) if ln.kind != " "), len(hunk.lines))


def _ambiguous(hunk: Hunk, found: list[int], header_at: int | None) -> PatchError:
    many = len(found) > _MAX_LISTED
    places = ", ".join(str(f + 1) for f in found[:_MAX_LISTED]) + (", ..." if many else "")
    count = f"more than {_MAX_LISTED}" if many else str(len(found))
    header = ("it has no line number to choose by" if header_at is None else
              f"its header's line {header_at + 1} is none of them")
    return PatchError(f"patch failed: hunk {hunk.number} matches {count} places (lines {places}) and {header}; "
                      "add context lines that tell them apart, or give the right line number in the @@ header; "
                      "the file is unchanged")


def _mismatch(lines: _Lines, hunk: Hunk, old: _Old, hint: int | None, where: str) -> PatchError:
    """The hunk matches nowhere: name its closest place in the file, and the first line that differs there."""
    text = lines.text
    want = nearmatch.Want([b.decode("utf-8", "replace") for b in (ln.body.removesuffix(b"\r") for ln in hunk.old)])
    near = None if where else nearmatch.closest(text, want, hint if hint is not None else 0)
    if near is None:  # nothing alike: compare where the header (or the end of the file) says
        start = min(hint or 0, lines.count)
        pairs = [nearmatch.Pair(k, start + k if start + k < lines.count else None) for k in range(len(want.lines))]
        near = nearmatch.Near(start, min(start + len(pairs), lines.count), pairs)
    line, detail = _first_difference(text, want, old, near)
    place = f"does not match {where}" if where else f"does not match at line {line}"
    out = (f"patch failed: hunk {hunk.number} {place} ({detail}); context "
           "and removed lines must match the file exactly (a context line's trailing whitespace aside)")
    if near.end > near.start:
        last = min(near.end, near.start + _REGION)
        out += f". Its closest place is {nearmatch.span(near.start + 1, near.end)}; the file there:\n"
        out += "\n".join(f"{n + 1:6d}\t{text[n]}" for n in range(near.start, last)) + "\n"
    else:
        out += "; "
    return PatchError(out + "the file is unchanged")


def _first_difference(text: list[str], want: nearmatch.Want, old: _Old, near: nearmatch.Near) -> tuple[int, str]:
    for n, pair in enumerate(near.pairs):
        if pair.want is not None and pair.found is not None:
            expected, found = want.lines[pair.want], text[pair.found]
            removed = old.exact[pair.want] is not None
            if expected == found or (not removed and expected.rstrip(" \t") == found.rstrip(" \t")):
                continue
            why = nearmatch.explain(expected, found, "the hunk")
            return pair.found + 1, f"expected {_show(expected)}, found {_show(found)}" + (f": {why}" if why else "")
        if pair.found is not None:
            return pair.found + 1, (f"found {_show(text[pair.found])}, a line the hunk lacks here: was a context "
                                    "line left out?")
        assert pair.want is not None
        later = next((p.found for p in near.pairs[n:] if p.found is not None), None)
        at = later + 1 if later is not None else len(text) + 1
        found_text = _show(text[later]) if later is not None else "the end of the file"
        return at, f"expected {_show(want.lines[pair.want])}, found {found_text}"
    return near.start + 1, "the lines differ"


def _shares_context(first: Hunk, second: Hunk, shared: int) -> bool:
    """Whether two hunks overlap only in context lines that both keep, with nothing added inside them
    (models often repeat the previous hunk's last context lines): then both apply, the lines once."""
    tail, head = first.old[-shared:], second.old[:shared]
    if len(tail) < shared or len(head) < shared or any(ln.kind != " " for ln in [*tail, *head]):
        return False
    after = first.lines[next(i for i, ln in enumerate(first.lines) if ln is tail[0]):]
    before = second.lines[:next(i for i, ln in enumerate(second.lines) if ln is head[-1])]
    return not any(ln.kind == "+" for ln in [*after, *before])


def apply(data: bytes, fp: FilePatch) -> tuple[bytes, list[Applied]]:
    """Apply every hunk of `fp` to `data`, or raise `PatchError` and change nothing."""
    lines = _split(data)
    index = _Lines([_key(ln) for ln in lines])
    eol = _eol(lines, fp.hunks)
    had_eol = not lines or lines[-1].endswith(b"\n")
    placed = sorted(((_place(index, h), h) for h in fp.hunks), key=lambda ph: (ph[0], bool(ph[1].old), ph[1].number))
    end = 0
    for n, (pos, hunk) in enumerate(placed):
        if n and pos < end and not _shares_context(placed[n - 1][1], hunk, end - pos):
            other = placed[n - 1][1]
            first, second = sorted((other.number, hunk.number))
            raise PatchError(f"patch failed: hunks {first} and {second} overlap at line {pos + 1} "
                             "of the file; merge them into one hunk; the file is unchanged")
        end = max(end, pos + len(hunk.old))
    out: list[bytes] = []
    applied: list[Applied] = []
    cursor = 0  # lines before this index are already copied or replaced
    end_state: bool | None = None  # whether the output must end with a newline, when a hunk decides it
    for pos, hunk in placed:
        out.extend(lines[cursor:pos])
        k = pos
        for ln in hunk.lines:
            if ln.kind == " ":
                if k >= cursor:  # a context line the previous hunk ended with is already out
                    out.append(lines[k])
                k += 1
            elif ln.kind == "-":
                k += 1
            else:
                out.append(ln.body.removesuffix(b"\r") + eol)
        cursor = pos + len(hunk.old)
        header_at = None if hunk.old_start is None else (
            hunk.old_start if hunk.old_len == 0 else max(hunk.old_start - 1, 0))
        applied.append(Applied(hunk.number, pos + 1, None if header_at is None else pos - header_at))
        if cursor == len(lines):
            # This hunk ends the file: it decides whether the file ends with a newline. A
            # "\\ No newline" marker says so explicitly; without one the file keeps its state.
            new, old_lines = hunk.new, hunk.old
            said = bool(new and new[-1].no_eol) or bool(old_lines and old_lines[-1].no_eol)
            end_state = (not new[-1].no_eol if said else had_eol) if new else None
        else:
            end_state = None
    out.extend(lines[cursor:])
    for n in range(len(out) - 1):  # a line that used to be last may now have lines after it
        if not out[n].endswith(b"\n"):
            out[n] += eol
    if out and end_state is not None:
        last = out[-1]
        if end_state and not last.endswith(b"\n"):
            out[-1] = last + eol
        elif not end_state:
            out[-1] = last.removesuffix(b"\n").removesuffix(b"\r")
    return b"".join(out), sorted(applied, key=lambda a: a.hunk)
