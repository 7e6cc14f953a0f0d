"""Content-addressed blobs: the before-state contents of files, named by their sha256, in one directory.

Two ways in, the cheapest that is safe:

* **link** — the file being replaced or removed is hard-linked into the blob directory (`<sha256>`):
  no byte is copied. Used for a regular file with no other name (`st_nlink == 1`), when the journal and
  the root share a filesystem. Once the change renames over or unlinks its old name, the inode is
  reachable from the journal alone. On ext4 and XFS the link is a metadata operation committed in order
  with the change that follows it (one journal on one filesystem), so it is durable no later than the
  change; elsewhere `Blobs.sync()` fsyncs the directory before the change is made.
* **copy** — otherwise (another filesystem, a file with hard links elsewhere, a link refused by
  `protected_hardlinks`) the content is streamed through zlib into `<sha256>.z`, hashed on the way,
  fsynced, and linked in; `Blobs.sync()` then fsyncs the directory.

A blob's name is its content's hash, so a content already stored is never stored again. Reading
verifies the hash: a linked inode that someone still had open and wrote to after the change is
reported as damaged, never restored. Retention (`retention.compact`) later replaces linked blobs by
compressed copies.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import hashlib
import os
import secrets
import stat
import zlib
from collections.abc import Iterator
from typing import Final

from rootbound.fs.bounds import checkpoint

__all__ = ["Blobs", "Damaged"]

_CHUNK: Final = 1 << 20
_DIR: Final = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_ORDERED_FS: Final = {0xEF53, 0x58465342}  # ext4 (and ext2/3's magic), XFS: one ordered metadata journal
TMP_PREFIX: Final = ".tmp-"


_SYNC_FILE_RANGE_ALL: Final = 1 | 2 | 4  # WAIT_BEFORE | WRITE | WAIT_AFTER
_libc: Final = ctypes.CDLL(None, use_errno=True)
_libc.sync_file_range.argtypes = (ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint)


class Damaged(Exception):
    """A blob is missing, or its content no longer has the hash it is named by."""


def _fs_type(fd: int) -> int:
    """The filesystem's magic number (statfs f_type; the first field of struct statfs on Linux)."""
    buf = ctypes.create_string_buffer(256)
    if _libc.fstatfs(fd, buf) != 0:
        return 0
    return int.from_bytes(buf.raw[:8], "little") & 0xFFFFFFFF


class Blobs:
    """The blob directory of one root's journal, held open."""

    def __init__(self, path: str) -> None:
        with contextlib.suppress(FileExistsError):
            os.mkdir(path, 0o700)
        self.fd = os.open(path, _DIR)
        self.ordered = _fs_type(self.fd) in _ORDERED_FS
        self.dev = os.fstat(self.fd).st_dev

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self.fd)

    def names(self, digest: str) -> tuple[str, str]:
        return digest, f"{digest}.z"

    def has(self, digest: str) -> bool:
        for name in self.names(digest):
            try:
                os.stat(name, dir_fd=self.fd, follow_symlinks=False)
                return True
            except FileNotFoundError:
                continue
        return False

    def link(self, fd: int, st: os.stat_result, digest: str) -> bool:
        """Hard-link the open file `fd` as blob `digest`; False when it cannot be linked (then copy it)."""
        if st.st_nlink != 1 or st.st_dev != self.dev:
            return False
        try:
            os.link(f"/proc/self/fd/{fd}", digest, dst_dir_fd=self.fd, follow_symlinks=True)
        except FileExistsError:
            return True
        except OSError as exc:
            if exc.errno in (errno.EXDEV, errno.EPERM, errno.ENOENT, errno.EMLINK, errno.EACCES):
                return False
            raise
        return True

    def settle_data(self, fd: int) -> None:
        """Make the data of a file about to be linked reach the disk before the change that follows.

        On an ordered filesystem, writing its dirty pages out (sync_file_range) is enough: the journal
        commit that makes the link or the change durable flushes the device's cache first, and the
        blocks' allocation is logged in that commit or an earlier one. A clean file costs nothing.
        Elsewhere: fsync."""
        if self.ordered and _libc.sync_file_range(fd, 0, 0, _SYNC_FILE_RANGE_ALL) == 0:
            return
        os.fsync(fd)

    def copy(self, fd: int) -> tuple[str, int]:
        """Store the content of `fd` compressed; returns (sha256, bytes stored). Fsynced; `sync()` does the name."""
        out, tmp = self._temp()
        try:
            digest = hashlib.sha256()
            squeeze = zlib.compressobj(1)
            offset = stored = 0
            while chunk := os.pread(fd, _CHUNK, offset):
                checkpoint()
                digest.update(chunk)
                offset += len(chunk)
                stored += _write(out, squeeze.compress(chunk))
            stored += _write(out, squeeze.flush())
            os.fsync(out)
            name = f"{digest.hexdigest()}.z"
            try:
                if tmp is None:
                    os.link(f"/proc/self/fd/{out}", name, dst_dir_fd=self.fd, follow_symlinks=True)
                else:
                    os.rename(tmp, name, src_dir_fd=self.fd, dst_dir_fd=self.fd)
                    tmp = None
            except FileExistsError:
                pass
            return digest.hexdigest(), stored
        finally:
            os.close(out)
            if tmp is not None:
                with contextlib.suppress(OSError):
                    os.unlink(tmp, dir_fd=self.fd)

    def _temp(self) -> tuple[int, str | None]:
        try:
            return os.open(".", os.O_TMPFILE | os.O_WRONLY | os.O_CLOEXEC, 0o600, dir_fd=self.fd), None
        except OSError as exc:
            if exc.errno not in (errno.EOPNOTSUPP, errno.EISDIR, errno.EINVAL):
                raise
        name = f"{TMP_PREFIX}{secrets.token_hex(8)}"
        return os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600,
                       dir_fd=self.fd), name

    def sync(self) -> None:
        """Make the names of blobs stored so far durable."""
        os.fsync(self.fd)

    def chunks(self, digest: str) -> Iterator[bytes]:
        """The content of blob `digest`, in chunks; raises `Damaged` (after the last chunk at worst) if it is
        missing or its content does not match its name."""
        fd, packed = self._open(digest)
        try:
            check = hashlib.sha256()
            unpack = zlib.decompressobj() if packed else None
            offset = 0
            while raw := os.pread(fd, _CHUNK, offset):
                checkpoint()
                offset += len(raw)
                try:
                    chunk = unpack.decompress(raw) if unpack is not None else raw
                except zlib.error:
                    raise Damaged(digest) from None
                check.update(chunk)
                yield chunk
            if unpack is not None:
                tail = unpack.flush()
                check.update(tail)
                yield tail
            if check.hexdigest() != digest:
                raise Damaged(digest)
        finally:
            os.close(fd)

    def read(self, digest: str) -> bytes:
        return b"".join(self.chunks(digest))

    def _open(self, digest: str) -> tuple[int, bool]:
        for name, packed in ((f"{digest}.z", True), (digest, False)):
            try:
                fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=self.fd)
            except FileNotFoundError:
                continue
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                os.close(fd)
                continue
            return fd, packed
        raise Damaged(digest)

    def size(self, digest: str) -> int:
        """Bytes the blob takes on disk (allocated blocks)."""
        total = 0
        for name in self.names(digest):
            with contextlib.suppress(FileNotFoundError):
                total += os.stat(name, dir_fd=self.fd, follow_symlinks=False).st_blocks * 512
        return total

    def remove(self, digest: str) -> None:
        for name in self.names(digest):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(name, dir_fd=self.fd)

    def compact(self, digest: str) -> int | None:
        """Replace a linked (raw) blob by a compressed copy; returns the bytes now stored, None if nothing to do."""
        try:
            fd = os.open(digest, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=self.fd)
        except FileNotFoundError:
            return None
        try:
            copied, stored = self.copy(fd)
        finally:
            os.close(fd)
        if copied != digest:  # written to since it was linked (the copy, under its true name, is swept later)
            raise Damaged(digest)
        self.sync()
        os.unlink(digest, dir_fd=self.fd)
        return stored

    def listing(self) -> list[str]:
        with os.scandir(self.fd) as it:
            return [e.name for e in it]


def _write(fd: int, data: bytes) -> int:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]
    return len(data)
