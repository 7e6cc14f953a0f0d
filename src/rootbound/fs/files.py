"""What `Root.open` hands out: an open file or directory with its status, and the kinds it may be asked for."""

from __future__ import annotations

import enum
import os

__all__ = ["File", "Kinds"]


class Kinds(enum.Flag):
    """What `Root.open` may open: a regular file, a directory, or anything else (as an O_PATH handle)."""

    FILE = enum.auto()
    DIRECTORY = enum.auto()
    OTHER = enum.auto()


class File:
    """An open file or directory and its status at the open; the caller closes it (or uses `with`)."""

    __slots__ = ("fd", "st")

    def __init__(self, fd: int, st: os.stat_result) -> None:
        self.fd = fd
        self.st = st

    def read_at(self, count: int, offset: int) -> bytes:
        """Up to `count` bytes from `offset` (fewer at the end of the file)."""
        return os.pread(self.fd, count, offset)

    def close(self) -> None:
        os.close(self.fd)

    def __enter__(self) -> File:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()
