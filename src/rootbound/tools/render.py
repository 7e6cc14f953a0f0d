"""The text block of each file tool's result: what the model reads (most clients show it nothing else).

structuredContent stays the machine contract; the text here is a rendering of that same data in the formats
models already know: `cat -n` for files, ripgrep's `--heading` for matches, one line per entry or path for
listings, and one short sentence for a change. Each function takes the structured result as the client gets
it (a dict) and the call's few arguments that shape the text; `base._shape` calls them, so handlers stay thin.
A last line in [brackets] says what was left out and how to get it.
"""

from __future__ import annotations

import base64
import mimetypes
import operator
import re
import threading
from collections.abc import Iterable
from typing import Any

__all__ = ["binary_kind", "copied", "file_hash", "file_read", "folder_created", "folder_listing", "folder_removed",
           "glob_paths", "grep_matches", "moved", "patched", "permissions", "removed", "roots", "stat", "written"]

Data = dict[str, Any]

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def _plain(name: str) -> str:
    """A name on one line: a newline or tab in a file name must not start a line of its own in a listing."""
    return _CONTROL.sub(lambda m: repr(m.group())[1:-1], name) if _CONTROL.search(name) else name


def _count(n: int, noun: str, plural: str = "") -> str:
    return f"{n:,} {noun if n == 1 else plural or noun + 's'}"


# -- read_file --------------------------------------------------------------------------------------------------

# First bytes of the binary formats an agent meets most, as `file` names them.
_MAGIC: tuple[tuple[bytes, str], ...] = (
    (b"\x89PNG\r\n\x1a\n", "PNG image"), (b"\xff\xd8\xff", "JPEG image"), (b"GIF8", "GIF image"),
    (b"%PDF-", "PDF document"), (b"PK\x03\x04", "zip archive (or jar, docx, wheel...)"),
    (b"\x1f\x8b", "gzip data"), (b"\x7fELF", "ELF executable or library"), (b"SQLite format 3\x00", "SQLite database"),
    (b"\x00asm", "WebAssembly module"), (b"BZh", "bzip2 data"), (b"\xfd7zXZ\x00", "xz data"),
    (b"7z\xbc\xaf\x27\x1c", "7-zip archive"), (b"\xca\xfe\xba\xbe", "Java class or Mach-O universal binary"),
    (b"\xcf\xfa\xed\xfe", "Mach-O executable"), (b"MZ", "Windows executable"), (b"\x00\x00\x01\x00", "ICO image"),
    (b"RIFF", "RIFF data (WAV, AVI or WebP)"), (b"OggS", "Ogg media"), (b"\xff\xfe", "UTF-16 text (little endian)"),
    (b"\xfe\xff", "UTF-16 text (big endian)"),
)


def binary_kind(head: bytes, path: str) -> str:
    """A guess at what binary data is: by its first bytes, else by the file name's extension."""
    for magic, kind in _MAGIC:
        if head.startswith(magic):
            return kind
    guessed, _ = mimetypes.guess_type(path, strict=False)
    return guessed or "binary data"


def file_read(data: Data, *, first_line: int, numbered: bool, at_start: bool) -> str:
    """read_file: `cat -n` lines (real line numbers from `first_line`), or the raw text; binary as one line."""
    text: str = data["content"]
    raw: bytes | None = None
    if data["encoding"] == "base64" and not data["binary"]:
        # Text that is not all UTF-8 (Latin-1, or a byte range that cuts a character): shown with U+FFFD where
        # a byte is not, rather than hidden; the exact bytes stay in structuredContent.
        raw = base64.b64decode(text)
        text = raw.decode("utf-8", "replace")
    elif data["encoding"] == "base64" or (data["binary"] and numbered):
        return _binary(data, text, at_start)
    trailer = _read_trailer(data, first_line, text, raw)
    if not numbered:
        return text + (("" if not text or text.endswith("\n") else "\n") + trailer if trailer else "")
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()  # the newline that ends the last line does not start another
    out = _numbered(lines, first_line)
    if not text:
        out = "[empty file]" if data["size"] == 0 else ""
    return f"{out}\n{trailer}" if out and trailer else out or trailer


_NUMBERS: list[str] = []  # "     1\t", "     2\t", ...: made once, as far as reads have needed
_NUMBERS_KEPT = 20_000  # ~1 MB at most; further line numbers are made per call
_numbers_lock = threading.Lock()  # reads run in worker threads too: one extends the list at a time


def _numbered(lines: list[str], first: int) -> str:
    """`lines` in `cat -n` form from line `first`: prefixes from the table (a third of the time of formatting
    each), or beyond it formatted line by line."""
    last = first + len(lines) - 1
    if last > _NUMBERS_KEPT:
        return "\n".join([f"{n:>6}\t{line}" for n, line in enumerate(lines, first)])
    if len(_NUMBERS) < last:
        with _numbers_lock:
            _NUMBERS.extend([f"{n:>6}\t" for n in range(len(_NUMBERS) + 1, last + 1)])
    return "\n".join(map(operator.add, _NUMBERS[first - 1:last], lines))


def _binary(data: Data, text: str, at_start: bool) -> str:
    """One line for data that is not text (or text with NUL bytes): what it is, and where its bytes are."""
    if data["encoding"] == "base64":
        head, held, form = base64.b64decode(text[:24]), len(text) * 3 // 4 - text[-2:].count("="), "as base64"
    else:
        head, held, form = text[:32].encode(), len(text.encode()), "as text"
    kind = binary_kind(head if at_start else b"", data["path"])
    return (f"[binary file, not shown: {_plain(data['path'])} is {_count(data['size'], 'byte')}, {kind}; "
            f"structuredContent.content holds {_count(held, 'byte')} of it {form} (choose a part with "
            "offset_bytes/limit_bytes)]")


def _read_trailer(data: Data, first_line: int, text: str, raw: bytes | None) -> str:
    notes = [data["note"]] if data.get("note") else []
    total = data.get("lines_total")
    if raw is not None:
        notes.append("not valid UTF-8: \ufffd stands for each byte that is not; structuredContent.content holds the "
                     "exact bytes as base64")
    if data["truncated"] and text:
        if total is not None:  # a line range
            last = first_line + text.count("\n") - (0 if text.endswith("\n") else -1) - 1
            notes.append(f"lines {first_line:,}-{last:,} of {total:,}; read on with offset_lines={last + 1}")
        else:
            got = len(raw) if raw is not None else len(text.encode())
            notes.append(f"{_count(got, 'byte')} of {data['size']:,}; read on with a larger offset_bytes")
    return f"[{'; '.join(notes)}]" if notes else ""


# -- list_folder ------------------------------------------------------------------------------------------------

_MARKS = {"file": "-", "directory": "d", "symlink": "l", "fifo": "p", "socket": "s", "char_device": "c",
          "block_device": "b"}
_TARGETS = {"file": " (link to a file)", "directory": " (link to a directory)",
            "external": " (link leading outside the root)"}


def folder_listing(data: Data, *, offset: int) -> str:
    """list_folder: `d 4096 2026-11-26 11:03:07 src/` per entry (type, size, mtime UTC, name); a last line when more
    follow."""
    entries = data["entries"]
    # Runs once per entry of a page of up to 100,000: one check for control characters in all the names, and
    # the width of the size column from the largest size.
    escape = _CONTROL.search("/".join([e["name"] for e in entries])) is not None  # "/" is in no name
    width = len(str(max([e["size"] for e in entries], default=0)))
    lines: list[str] = []
    add, marks = lines.append, _MARKS
    for e in entries:
        kind, name, when = e["type"], _plain(e["name"]) if escape else e["name"], e["modified_at"]
        if kind == "directory":
            name += "/"
        elif kind == "symlink":
            name += _TARGETS.get(e.get("target_type", ""), "")
        # rjust, not a format spec: several times cheaper, here where it counts
        add(f"{marks.get(kind, '?')} {str(e['size']).rjust(width)} {when[:10]} {when[11:19]} {name}")
    total = data["total"]
    if data["truncated"]:
        lines.append(f"[{len(entries):,} of {_count(total, 'entry', 'entries')} shown; the rest: "
                     f"offset={offset + len(entries)}]")
    elif not entries:
        lines.append("[empty folder]" if total == 0 else
                     f"[no entries from offset {offset:,}: the folder has {_count(total, 'entry', 'entries')}]")
    return "\n".join(lines)


# -- grep and glob ----------------------------------------------------------------------------------------------


def grep_matches(data: Data, *, max_results: int, context: bool) -> str:
    """grep as `rg --heading -n` prints it: the path once, `12:line`, context `11-line`, and with context `--`
    between groups that do not touch (overlapping context is shown once)."""
    out: list[str] = []
    for file, matches in _by_file(data["matches"]):
        lines: dict[int, tuple[str, str]] = {}
        for m in matches:
            n = m["line_number"]
            before, after = m.get("context_before", ()), m.get("context_after", ())
            for i, line in enumerate(before):
                lines.setdefault(n - len(before) + i, ("-", line))
            lines[n] = (":", m["line_content"])  # a matching line is shown as one, even where it is context too
            for i, line in enumerate(after, n + 1):
                lines.setdefault(i, ("-", line))
        if out:
            out.append("")
        out.append(_plain(file))
        previous = None
        for n in sorted(lines):
            if context and previous is not None and n > previous + 1:
                out.append("--")
            sep, line = lines[n]
            out.append(f"{n}{sep}{line}")
            previous = n
    out += _stopped(data, max_results, "matches exist", "path, pattern or glob_filter", "matches")
    return "\n".join(out) if out else "no matches"


def _by_file(matches: Iterable[Data]) -> Iterable[tuple[str, list[Data]]]:
    group: list[Data] = []
    for m in matches:
        if group and m["file"] != group[0]["file"]:
            yield group[0]["file"], group
            group = []
        group.append(m)
    if group:
        yield group[0]["file"], group


def glob_paths(data: Data, *, max_results: int) -> str:
    """glob: one path per line, directories with a trailing /."""
    matches = data["matches"]
    # One check for control characters in all the paths, not one per path ("/" is not one).
    escape = _CONTROL.search("/".join([m["path"] for m in matches])) is not None
    out = [(_plain(m["path"]) if escape else m["path"]) + ("/" if m["type"] == "directory" else "") for m in matches]
    out += _stopped(data, max_results, "paths match", "path or pattern", "paths")
    return "\n".join(out) if out else "no matches"


def _stopped(data: Data, max_results: int, more: str, narrow: str, found: str) -> list[str]:
    """A search's last line when it stopped early: at max_results, or at its timeout."""
    if data["truncated"]:
        return [f"[stopped at max_results={max_results:,}; more {more}: narrow {narrow}, or raise max_results]"]
    if data["timed_out"]:
        return [f"[timed out (timeout_seconds): these are the {found} found before; search a narrower path]"]
    return []


# -- the other tools: one short sentence ------------------------------------------------------------------------


def roots(data: Data) -> str:
    lines = [f"{r['name']}: {', '.join(r['allowed_tools']) or 'no file tools'}" for r in data["roots"]]
    return "roots and the file tools each allows:\n" + "\n".join(lines) if lines else "no roots"


def stat(data: Data) -> str:
    text = f"{data['path']}: {data['type']}, {_count(data['size'], 'byte')}, modified {data['modified_at']}"
    if data.get("created_at"):
        text += f", created {data['created_at']}"
    target = data.get("target")
    if target is not None:
        text += (", a link leading outside the root (or nowhere)" if target["type"] == "external" else
                 f", a link to a {target['type']} of {_count(target.get('size', 0), 'byte')}")
    return text


def file_hash(data: Data) -> str:
    return f"{data['algorithm']} of {data['path']} ({_count(data['size'], 'byte')}): {data['hash']}"


def permissions(data: Data) -> str:
    return f"{data['path']}: {data['mode_string']} ({data['mode']}), owner {data['owner']}, group {data['group']}"


def written(data: Data) -> str:
    size, path, created = _count(data["size"], "byte"), data["path"], data["created"]
    if data["mode"] == "append":
        text = f"appended {size} to {path}" + (" (a new file)" if created else "")
    else:
        text = f"{'created' if created else 'overwrote'} {path}: wrote {size}"
    return text + (f" (sha256 {data['sha256']})" if data.get("sha256") else "")


def patched(data: Data) -> str:
    hunks = [f"#{h['hunk']} at line {h['line']}" + (f" ({h['offset']:+} from its header)" if h.get("offset") else "")
             for h in data["hunks"]]
    verb = "created" if data["created"] else "patched"
    return (f"{verb} {data['path']}: {_count(data['hunks_applied'], 'hunk')} applied ({', '.join(hunks)}); now "
            f"{_count(data['size'], 'byte')} (sha256 {data['sha256']})")


def removed(data: Data) -> str:
    return f"removed {data['path']}"


def folder_removed(data: Data) -> str:
    return f"removed folder {data['path']} and the {_count(data['entries_removed'], 'entry', 'entries')} in it"


def folder_created(data: Data) -> str:
    return f"created folder {data['path']}" if data["created"] else f"folder {data['path']} already exists"


def copied(data: Data) -> str:
    what = "folder " if data["is_directory"] else ""
    text = f"copied {what}{data['source']} to {data['destination']} ({_count(data['size'], 'byte')}"
    text += f" in {_count(data['files_copied'], 'file')})" if data.get("files_copied") is not None else ")"
    skipped = data.get("skipped") or []
    if skipped:
        text += f"; skipped {len(skipped)}: " + "; ".join(f"{_plain(s['path'])} ({s['reason']})" for s in skipped)
    return text


def moved(data: Data) -> str:
    how = "renamed" if data["method"] == "rename" else "copied across filesystems, then the source removed"
    return f"moved {'folder ' if data['is_directory'] else ''}{data['source']} to {data['destination']} ({how})"
