"""What a change did to a file, as a unified diff and as +/- line counts (pure functions on bytes).

Binary content (a NUL byte, or not UTF-8) and texts over `MAX_DIFF_BYTES` are described, not diffed.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from typing import Final

__all__ = ["MAX_DIFF_BYTES", "Diff", "colour", "diff"]

MAX_DIFF_BYTES: Final = 1 << 20
_RED, _GREEN, _CYAN, _BOLD, _RESET = "\x1b[31m", "\x1b[32m", "\x1b[36m", "\x1b[1m", "\x1b[0m"


@dataclass
class Diff:
    """One path's diff: `lines` of a unified diff (headers included), or a `note` saying why there are none."""

    path: str
    lines: list[str] = field(default_factory=list)
    note: str | None = None
    added: int | None = None
    removed: int | None = None


def _text(data: bytes | None) -> list[str] | None:
    if data is None:
        return []
    if b"\0" in data[:8192]:
        return None
    try:
        return data.decode("utf-8").splitlines(keepends=True)
    except UnicodeDecodeError:
        return None


def diff(path: str, before: bytes | None, after: bytes | None, *, before_label: str | None = None,
         after_label: str | None = None) -> Diff:
    """The diff from `before` to `after` (None: the file did not exist)."""
    if before is not None and after is not None and before == after:
        return Diff(path, note="content unchanged", added=0, removed=0)
    if max(len(before or b""), len(after or b"")) > MAX_DIFF_BYTES:
        return Diff(path, note=f"too large to show ({len(before or b'')} -> {len(after or b'')} bytes)")
    old, new = _text(before), _text(after)
    if old is None or new is None:
        return Diff(path, note=f"binary file ({len(before or b'')} -> {len(after or b'')} bytes)")
    lines = []
    added = removed = 0
    for line in difflib.unified_diff(old, new, before_label or ("/dev/null" if before is None else f"a/{path}"),
                                     after_label or ("/dev/null" if after is None else f"b/{path}"), n=3):
        if line.startswith("+") and not line.startswith("+++"):
            added += 1
        elif line.startswith("-") and not line.startswith("---"):
            removed += 1
        if not line.endswith("\n"):
            lines.append(line)
            if not line.startswith(("---", "+++", "@@")):
                lines.append("\\ No newline at end of file")
        else:
            lines.append(line[:-1])
    return Diff(path, lines=lines, added=added, removed=removed)


def colour(line: str) -> str:
    """A diff line with terminal colours."""
    if line.startswith(("+++", "---")):
        return f"{_BOLD}{line}{_RESET}"
    if line.startswith("+"):
        return f"{_GREEN}{line}{_RESET}"
    if line.startswith("-"):
        return f"{_RED}{line}{_RESET}"
    if line.startswith("@@"):
        return f"{_CYAN}{line}{_RESET}"
    return line
