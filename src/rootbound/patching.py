"""Unified diffs: parse one, pick the part meant for a file, apply it to bytes. Pure functions, no I/O.

The parser is our own, not `unidiff`: unidiff 1.0.1 rejects a hunk whose header
counts are too high ("Hunk is shorter than expected"), silently drops lines when
they are too low, and needs `---`/`+++` headers — and diffs written by an LLM get
the counts wrong more often than not. Here the counts are only a hint for where
a hunk ends; the hunk's own lines are the truth.

Matching rules (the README repeats them):
* Context and removed lines must match the file exactly, apart from the line
  terminator (LF vs CRLF, and a missing newline at the end of the file).
* A hunk applies at the position nearest to the line its header names (moved by
  the offset the previous hunk needed), never before the end of the previous
  hunk. No fuzz: a hunk that matches nowhere fails the whole patch.
* Added lines take the file's line terminator (CRLF if most lines use it).
* The end of file keeps its newline state unless the patch says otherwise with
  `\\ No newline at end of file`.
"""

from __future__ import annotations

import bisect
import re
from array import array
from dataclasses import dataclass, field

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


def _split(data: bytes) -> list[bytes]:
    """Lines with their terminators; only the last may lack one."""
    lines = data.split(b"\n")
    out = [ln + b"\n" for ln in lines[:-1]]
    if lines[-1]:
        out.append(lines[-1])
    return out


def _key(line: bytes) -> bytes:
    return line.removesuffix(b"\n").removesuffix(b"\r")


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


class _Lines:
    """The file's line keys joined into one bytes object, so a hunk is found with `bytes.find`.

    Comparing line lists at every candidate position costs lines x hunk length: a file of
    identical lines and a long hunk that almost matches kept a worker busy for hours. CPython's
    `find` switches to the two-way algorithm when a search gets expensive, so it stays linear;
    the nearest match *before* a place is found the same way in the reversed text.
    """

    def __init__(self, keys: list[bytes]) -> None:
        self.count = len(keys)
        self.blob = b"\n" + b"\n".join(keys) + b"\n"  # every line sits between two "\n"s (keys hold none)
        self.reverse = self.blob[::-1]
        self.starts = array("q", [0])  # offset of the "\n" before each line (and one past the last)
        offset = 0
        for key in keys:
            offset += len(key) + 1
            self.starts.append(offset)

    def line_at(self, offset: int) -> int:
        return bisect.bisect_left(self.starts, offset)


def _find(lines: _Lines, old: list[bytes], expected: int, floor: int) -> int | None:
    """The match of `old` nearest to `expected` at or after `floor`; ties go to the earlier line."""
    last = lines.count - len(old)
    if last < floor:
        return None
    expected = min(max(expected, floor), last)
    needle = b"\n" + b"\n".join(old) + b"\n"  # whole lines only: it starts and ends on a line break
    at, size, total = lines.starts[expected], len(needle), len(lines.blob)
    found = lines.blob.find(needle, at)
    after = lines.line_at(found) if found >= 0 else None
    if after == expected:
        return after
    # The last match starting in [floor, expected]: the first one of the reversed needle in the reversed text.
    r = lines.reverse.find(needle[::-1], max(total - at - size, 0), total - lines.starts[floor])
    before = lines.line_at(total - r - size) if r >= 0 else None
    if before is None or (after is not None and after - expected < expected - before):
        return after
    return before


def _mismatch(keys: list[bytes], old: list[bytes], at: int, hunk: Hunk) -> PatchError:
    at = max(0, min(at, len(keys)))
    for k, want in enumerate(old):
        if at + k >= len(keys):
            found = "the end of the file"
            line = at + k + 1
            break
        if keys[at + k] != want:
            found = _show(keys[at + k])
            line = at + k + 1
            break
    else:  # the expected place matches but lies before an earlier hunk's end
        return PatchError(f"patch failed: hunk {hunk.number} does not match at line {at + 1} (it overlaps the "
                          "previous hunk or comes before it); the file is unchanged")
    return PatchError(f"patch failed: hunk {hunk.number} does not match at line {line} (expected "
                      f"{_show(old[k])}, found {found}; context and removed lines must match the file exactly); "
                      "the file is unchanged")


def apply(data: bytes, fp: FilePatch) -> tuple[bytes, list[Applied]]:
    """Apply every hunk of `fp` to `data`, or raise `PatchError` and change nothing."""
    lines = _split(data)
    keys = [_key(ln) for ln in lines]
    found_in = _Lines(keys)
    eol = _eol(lines, fp.hunks)
    had_eol = not lines or lines[-1].endswith(b"\n")
    out: list[bytes] = []
    applied: list[Applied] = []
    cursor = 0  # lines before this index are already copied or replaced
    drift = 0  # how far the previous hunk was from its header
    end_state: bool | None = None  # whether the output must end with a newline, when a hunk decides it
    for hunk in fp.hunks:
        old = [ln.body.removesuffix(b"\r") for ln in hunk.old]
        if hunk.old_start is None:
            header_at = None
            expected = cursor
        else:
            header_at = hunk.old_start if hunk.old_len == 0 else max(hunk.old_start - 1, 0)
            expected = header_at + drift
        if not old:  # pure insertion: nothing to match, it goes where the header says
            pos: int | None = min(max(expected, cursor), len(lines))
        else:
            pos = _find(found_in, old, expected, cursor)
        if pos is None:
            raise _mismatch(keys, old, expected, hunk)
        out.extend(lines[cursor:pos])
        k = pos
        for ln in hunk.lines:
            if ln.kind == " ":
                out.append(lines[k])
                k += 1
            elif ln.kind == "-":
                k += 1
            else:
                out.append(ln.body.removesuffix(b"\r") + eol)
        cursor = pos + len(old)
        if header_at is not None:
            drift = pos - header_at
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
    return b"".join(out), applied
