"""The inline cap: how much of a command's output one result shows (the model reads all of it).

`max_output_size` bounds what the server keeps in memory per stream; this bounds
what a call returns: about `limit` characters across stdout and stderr together,
counting what the tool's text adds per line (execute_command's YAML indents each
line by two). A stream over its share keeps its head and tail, cut at line
boundaries, joined by a marker that says which lines and bytes are not shown and
where the whole output is (the spill file, which `Capture` starts once a stream
could be cut: `spill_threshold`). A stream shown whole has no use for its spill
file: it is removed.
"""

from __future__ import annotations

from dataclasses import replace

from rootbound.execution.output import StreamResult

__all__ = ["MARKER_ROOM", "MAX_LINE_COST", "fit", "spill_threshold"]

MARKER_ROOM = 400  # of a cut stream's share, kept for the marker, so the result stays within the limit
MAX_LINE_COST = 2  # the most a tool's text adds per line (execute_command's YAML block indent)


def spill_threshold(limit: int) -> int:
    """Bytes after which a stream may be cut inline, so its spill must have begun. A cut stream costs more than
    half the limit less the marker's room; it costs at most (1 + MAX_LINE_COST) per byte (one character per byte
    at most, and a line is at least one byte)."""
    return max(0, (limit // 2 - MARKER_ROOM) // (1 + MAX_LINE_COST))


def _cost(text: str, line_cost: int) -> int:
    return len(text) + line_cost * text.count("\n")


def _shares(out: int, err: int, limit: int) -> tuple[int, int]:
    """Split `limit` between two streams: each gets up to half, and what one leaves the other may use."""
    if out + err <= limit:
        return out, err
    half = limit // 2
    if out <= half:
        return out, limit - out
    if err <= half:
        return limit - err, err
    return half, limit - half


def _head(text: str, budget: int, line_cost: int) -> str:
    """The longest run of whole lines from the start that costs at most `budget` (part of the first line if even
    that one is too long)."""
    pos = used = 0
    while (nl := text.find("\n", pos, pos + budget)) >= 0:
        cost = nl + 1 - pos + line_cost
        if used + cost > budget:
            break
        used, pos = used + cost, nl + 1
    return text[:pos] if pos else text[:budget]


def _tail(text: str, budget: int, line_cost: int) -> str:
    """The longest run of whole lines at the end that costs at most `budget` (the last line's end if even that one
    is too long)."""
    start = len(text)
    used = 0
    while start > 0:
        begin = text.rfind("\n", max(0, start - 1 - budget), start - 1) + 1
        if begin == 0 and start - 1 - budget > 0:
            break  # the line is longer than the budget
        cost = start - begin + (line_cost if text[start - 1] == "\n" else 0)
        if used + cost > budget:
            break
        used, start = used + cost, begin
    return text[start:] if start < len(text) else text[len(text) - budget:] if budget > 0 else ""


def _where(stream: StreamResult) -> str:
    info = stream.spill
    if info is None:
        return "the full output was not kept"
    whole = "the whole output" if info.complete else f"the first {info.size} bytes"
    return (f"{whole} is in root {info.root!r}, path {info.path!r}: page through it with read_file "
            "(offset_lines/limit_lines or offset_bytes/limit_bytes)")


def _cut(stream: StreamResult, name: str, share: int, line_cost: int) -> StreamResult:
    text = stream.text
    room = max(share - MARKER_ROOM, 2)
    head = _head(text, room // 2, line_cost)
    tail = _tail(text, room - _cost(head, line_cost), line_cost)
    shown = len(head.encode()) + len(tail.encode())
    lines = ""
    starts_line = not tail or text[len(text) - len(tail) - 1] == "\n"
    if head.endswith("\n") and starts_line and not stream.truncated:  # the whole output: the spill's line numbers
        lines = f"; lines {head.count(chr(10)) + 1}-{text.count(chr(10), 0, len(text) - len(tail))} not shown"
    end = "" if head.endswith("\n") or not head else "\n"
    marker = (f"{end}[... {stream.total_bytes - shown} bytes of {name} cut here ({stream.total_bytes} in all{lines}); "
              f"{_where(stream)} ...]\n")
    return replace(stream, text=head + marker + tail, truncated=True)


def fit(stdout: StreamResult, stderr: StreamResult, limit: int,
        line_cost: int = 0) -> tuple[StreamResult, StreamResult]:
    """Both streams cut to cost `limit` together (a character each, plus `line_cost` per line); the spill files
    of streams shown whole removed."""
    assert 0 <= line_cost <= MAX_LINE_COST
    shares = _shares(_cost(stdout.text, line_cost), _cost(stderr.text, line_cost), limit)
    fitted = []
    for stream, name, share in ((stdout, "stdout", shares[0]), (stderr, "stderr", shares[1])):
        if _cost(stream.text, line_cost) > share:
            stream = _cut(stream, name, share, line_cost)
        if not stream.truncated and stream.spill_file is not None:
            stream.spill_file.discard()
            stream = replace(stream, spill=None, spill_file=None)
        fitted.append(stream)
    return fitted[0], fitted[1]
