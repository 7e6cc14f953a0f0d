"""Bytes into and out of open files: whole writes, copies that keep holes, hashes, lines, the binary sniff.

Everything here works on descriptors the caller opened through a `Root`; nothing
takes a path. The loops check the call's bound between chunks (`bounds.checkpoint`).
"""

from __future__ import annotations

import errno
import hashlib
import os
from collections.abc import Iterator
from typing import Final

from rootbound.fs.bounds import checkpoint

__all__ = ["SNIFF", "copy_fd", "count_lines", "digest", "looks_binary", "read_all", "read_lines", "write_all"]

CHUNK: Final = 1024 * 1024
SNIFF: Final = 8192  # seed FR-005 and FR-016: a NUL byte in the first 8 KiB means binary
_SCAN: Final = CHUNK  # counting and skipping lines: big reads, newlines counted in C
_BLOCK: Final = 64 * 1024


def looks_binary(head: bytes) -> bool:
    """Is a file whose first bytes are `head` binary? (a NUL among the first SNIFF bytes)"""
    return head.find(b"\x00", 0, SNIFF) >= 0


def write_all(fd: int, data: bytes | memoryview) -> int:
    view = memoryview(data)
    total = len(view)
    while view:
        view = view[os.write(fd, view[:CHUNK * 64]):]
    return total


def _pwrite_all(fd: int, data: bytes, at: int) -> None:
    view = memoryview(data)
    while view:
        written = os.pwrite(fd, view, at)
        view, at = view[written:], at + written


def read_all(fd: int) -> bytes:
    """The whole content of the open file `fd`, read from its start."""
    chunks, offset = [], 0
    while chunk := os.pread(fd, CHUNK, offset):
        chunks.append(chunk)
        offset += len(chunk)
    return b"".join(chunks)


def _data_extents(fd: int, start: int, end: int | None) -> Iterator[tuple[int, int]]:
    """The (start, end) ranges of `fd` from `start` that hold data, skipping holes (SEEK_DATA/SEEK_HOLE).

    Up to `end`, or the file's end when None. A filesystem that cannot tell holes reports the whole
    file as data (the kernel's own fallback), so this is always safe to use.
    """
    pos = start
    while end is None or pos < end:
        try:
            data = os.lseek(fd, pos, os.SEEK_DATA)
        except OSError as exc:
            if exc.errno == errno.ENXIO:  # only a hole is left
                return
            if exc.errno not in (errno.EINVAL, errno.EOPNOTSUPP):
                raise
            yield pos, end if end is not None else -1  # no hole support: read to the end
            return
        if end is not None and data >= end:
            return
        hole = os.lseek(fd, data, os.SEEK_HOLE)
        yield data, hole if end is None else min(hole, end)
        pos = hole


def copy_fd(src: int, dst: int, offset: int = 0, count: int | None = None) -> int:
    """Copy from `src` (starting at `offset`, `count` bytes or to its end) to `dst`'s position.

    Holes stay holes: only the data extents are copied (copy_file_range alone writes zeros for
    holes on filesystems without reflinks, so a sparse 1 GiB file cost 1 GiB), and the destination
    is extended over a trailing hole. Checks the call's bound between chunks.
    """
    base = os.lseek(dst, 0, os.SEEK_CUR)
    end = None if count is None else offset + count
    use_range = True
    copied_to = offset  # how far into the source the copy has got
    for lo, hi in _data_extents(src, offset, end):
        pos = lo
        while hi < 0 or pos < hi:
            checkpoint()
            want = CHUNK * 16 if hi < 0 else min(CHUNK * 16, hi - pos)
            n = 0
            if use_range:
                try:
                    n = os.copy_file_range(src, dst, want, pos, base + pos - offset)
                except OSError as exc:
                    if exc.errno not in (errno.EXDEV, errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP, errno.EBADF):
                        raise
                    use_range = False  # across filesystems on older kernels, or O_APPEND: plain reads
                    continue
            else:
                chunk = os.pread(src, min(want, CHUNK), pos)
                _pwrite_all(dst, chunk, base + pos - offset)
                n = len(chunk)
            if n == 0:
                break  # the source ended early (it shrank while we copied)
            pos += n
        copied_to = max(copied_to, pos)
        if hi < 0 or pos < hi:
            break
    # A trailing hole: the source's size (or `count`) decides the length, not its last data byte.
    last = os.fstat(src).st_size if end is None else min(end, os.fstat(src).st_size)
    copied_to = max(copied_to, last)
    length = copied_to - offset
    if base + length > os.fstat(dst).st_size:
        os.ftruncate(dst, base + length)
    os.lseek(dst, base + length, os.SEEK_SET)
    return length


def digest(fd: int, algorithm: str = "sha256") -> tuple[str, int]:
    """The hex digest of the open file `fd` (from its start), and how many bytes that was.

    One reused buffer: memory stays flat whatever the file's size (seed NFR-003); between chunks,
    the call's time bound and the client's cancellation are checked."""
    hasher = hashlib.new(algorithm)
    buf = bytearray(CHUNK)
    view = memoryview(buf)
    size = 0
    while True:
        checkpoint()
        n = os.preadv(fd, [buf], size)
        if not n:
            return hasher.hexdigest(), size
        hasher.update(view[:n])
        size += n


# -- lines ----------------------------------------------------------------------------------------


def count_lines(fd: int, size: int) -> int:
    """How many lines the first `size` bytes of `fd` hold (a last line without a newline counts)."""
    lines, last, offset = 0, b"", 0
    while offset < size:
        checkpoint()
        chunk = os.pread(fd, _SCAN, offset)
        if not chunk:
            break
        lines += chunk.count(b"\n")
        last = chunk[-1:]
        offset += len(chunk)
    return lines + (1 if last and last != b"\n" else 0)


def _nth_newline(data: bytes, n: int) -> int:
    """Index of the `n`-th (1-based) newline in `data`; the caller knows there are at least `n`."""
    pos, block = 0, _BLOCK
    while (here := data.count(b"\n", pos, pos + block)) < n:  # count in C, block by block
        n -= here
        pos += block
    pos -= 1
    for _ in range(n):  # a Python loop over one block at most
        pos = data.index(b"\n", pos + 1)
    return pos


def _line_start(fd: int, first: int) -> int | None:
    """Byte offset where line `first` (1-based) begins, or None when the file has fewer lines."""
    offset, skip = 0, first - 1
    while skip:
        checkpoint()
        chunk = os.pread(fd, _SCAN, offset)
        if not chunk:
            return None
        found = chunk.count(b"\n")
        if found >= skip:
            return offset + _nth_newline(chunk, skip) + 1
        skip -= found
        offset += len(chunk)
    return offset


def read_lines(fd: int, first: int, limit: int | None, cap: int) -> tuple[bytes, bool]:
    """Lines `first`.. (1-based), at most `limit` lines and `cap` bytes; returns (data, more follows)."""
    start = _line_start(fd, first)
    if start is None:
        return b"", False
    window = os.pread(fd, cap + 1, start)  # one byte past the cap tells whether more follows
    # Whole lines only: cut after the last newline that fits (nothing when the first line alone is too long).
    end = len(window) if len(window) <= cap else window.rfind(b"\n", 0, cap) + 1
    if limit is not None and window.count(b"\n", 0, end) >= limit:
        end = _nth_newline(window, limit) + 1 if limit else 0
    return window[:end], end < len(window)
