"""Bounded capture of one output stream: the head and the tail in memory, everything else in a spill file.

A stream of any size costs at most `limit` bytes of memory (plus part of one read).
When it outgrows the limit, the result keeps its first and last halves joined by a
marker that says how much was cut and where the whole output is; bytes that are
not UTF-8 are shown as U+FFFD, never an error.

Memory is what is kept, not a multiple of it: chunks are sliced through
memoryviews (no copies), everything beyond the limit goes straight to the spill
file, and `finish` assembles the text in the head's own buffer (the tail chunks
appended and dropped one by one) before decoding it once — so the peak is the
kept bytes plus their decoded text, and the buffers are gone afterwards.
"""

from __future__ import annotations

import contextlib
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from rootbound.execution.spill import SpillFile, SpillInfo
from rootbound.libc import libc

__all__ = ["Capture", "StreamResult", "heap_grew", "return_big_buffers", "trim_heap"]

_MAX_LINE = 2000  # a progress line longer than this is cut (output without newlines must not grow a buffer)
_RECENT = 10  # lines per chunk passed on for progress; a throttled notification shows only recent ones anyway

# (stream, number of new lines, the last few of them)
LinesCallback = Callable[[str, int, list[str]], None]


@dataclass
class StreamResult:
    text: str
    total_bytes: int
    truncated: bool
    spill: SpillInfo | None
    spill_file: SpillFile | None = field(default=None, repr=False, compare=False)  # to discard it if unused


def _complete_end(data: bytearray) -> int:
    """Where `data` ends without an incomplete UTF-8 sequence (so the cut does not make a replacement character)."""
    for back in range(1, min(4, len(data)) + 1):
        byte = data[-back]
        if byte < 0x80:
            return len(data)
        if byte >= 0xC0:  # a lead byte: complete only if the sequence fits
            need = 2 if byte < 0xE0 else 3 if byte < 0xF0 else 4
            return len(data) if back >= need else len(data) - back
    return len(data)


def _continuation_bytes(data: memoryview) -> int:
    """How many UTF-8 continuation bytes `data` starts with (the rest of a character cut off in front)."""
    skip = 0
    while skip < min(3, len(data)) and 0x80 <= data[skip] < 0xC0:
        skip += 1
    return skip


_M_MMAP_THRESHOLD = -3


def return_big_buffers() -> None:
    """Have glibc serve every allocation over 256 KiB with its own mmap, returned to the system when freed.

    By default glibc raises that threshold each time such a block is freed (up to 32 MiB), after which
    the multi-MiB buffers of command output come from heaps that are rarely given back: eight 10 MiB
    outputs left over 300 MiB behind. A fixed threshold turns that adaptation off."""
    with contextlib.suppress(OSError, AttributeError):  # not glibc: nothing to tune
        libc.mallopt(_M_MMAP_THRESHOLD, 256 * 1024)


_trim_due = False


def heap_grew() -> None:
    """A result of megabytes was made: once it is gone, `trim_heap` gives the heap's free pages back."""
    global _trim_due
    _trim_due = True


def trim_heap() -> None:
    """Give the heap's free pages back to the system, when a big result has been made since the last time.

    What stays below the mmap threshold (the many smaller pieces around a big result) leaves the heap fragmented
    when freed: eight concurrent 10 MiB outputs kept 0-27 MiB for good, depending on the order of the frees.
    malloc_trim returns the free pages inside the heap too, in a few milliseconds, once per big result."""
    global _trim_due
    if _trim_due:
        _trim_due = False
        with contextlib.suppress(AttributeError):  # not glibc: nothing to trim
            libc.malloc_trim(0)


class Capture:
    def __init__(self, stream: str, limit: int, open_spill: Callable[[str], SpillFile | None] | None = None,
                 on_lines: LinesCallback | None = None, spill_after: int | None = None) -> None:
        self.stream = stream
        # The spill starts once the stream could be cut: beyond what memory keeps, or (smaller) what a result
        # may show inline (`inline.fit`), so every cut points at the whole output.
        self.spill_after = limit if spill_after is None else min(limit, spill_after)
        self.head_limit = limit // 2
        self.tail_limit = limit - self.head_limit
        self.head = bytearray()
        self.tail: deque[memoryview] = deque()  # views of the chunks read: trimming one copies nothing
        self.tail_len = 0
        self.total = 0
        self.open_spill = open_spill
        self.spill: SpillFile | None = None
        self.on_lines = on_lines
        self.partial = b""

    def feed(self, data: bytes) -> None:
        if self.on_lines is not None:
            self._lines(data)
        if self.spill is None and self.open_spill is not None and self.total + len(data) > self.spill_after:
            self.spill = self.open_spill(self.stream)
            self.open_spill = None
            if self.spill is not None:
                self.spill.write(self.head)
                for chunk in self.tail:
                    self.spill.write(chunk)
        if self.spill is not None:
            self.spill.write(data)
        self.total += len(data)
        view = memoryview(data)
        room = self.head_limit - len(self.head)
        if room > 0:
            self.head += view[:room]
            view = view[room:]
        if view:
            self.tail.append(view)
            self.tail_len += len(view)
            while self.tail_len > self.tail_limit:
                excess = self.tail_len - self.tail_limit
                first = self.tail[0]
                if len(first) <= excess:
                    self.tail.popleft()
                    self.tail_len -= len(first)
                else:
                    self.tail[0] = first[excess:]
                    self.tail_len -= excess

    def _lines(self, data: bytes) -> None:
        """Pass on the count of new lines and the last few of them (progress shows recent lines, not all)."""
        assert self.on_lines is not None
        count = data.count(b"\n")
        if not count:
            self.partial = (self.partial + data)[-_MAX_LINE:]
            return
        parts = (self.partial + data).rsplit(b"\n", _RECENT)
        self.partial = parts.pop()[-_MAX_LINE:]
        if count > _RECENT:
            parts = parts[1:]  # the first part holds every earlier line at once
        self.on_lines(self.stream, count, [p[:_MAX_LINE].decode("utf-8", "replace") for p in parts])

    def finish(self) -> StreamResult:
        if self.on_lines is not None and self.partial:
            self.on_lines(self.stream, 1, [self.partial.decode("utf-8", "replace")])
            self.partial = b""
        if self.spill is not None:
            self.spill.close()
        kept = len(self.head) + self.tail_len
        info = self.spill.info() if self.spill is not None else None
        buf = self.head  # the text is assembled here, in place
        if kept != self.total:
            cut = self.total - kept
            if info is not None:
                whole = "the whole output" if info.complete else f"the first {info.size} bytes"
                where = (f"{whole} is in root {info.root!r}, path {info.path!r}: page through it with read_file "
                         "(offset_bytes/limit_bytes or offset_lines/limit_lines)")
            else:
                where = "the full output was not kept"
            del buf[_complete_end(buf):]
            buf += f"\n[... {cut} bytes of {self.stream} cut here ({self.total} in all); {where} ...]\n".encode()
            if self.tail:
                self.tail[0] = self.tail[0][_continuation_bytes(self.tail[0]):]
        while self.tail:
            buf += self.tail.popleft()  # each chunk is released as soon as it is in
        self.tail_len = 0
        self.head = bytearray()
        text = buf.decode("utf-8", "replace")
        del buf
        return StreamResult(text, self.total, kept != self.total, info, self.spill)
