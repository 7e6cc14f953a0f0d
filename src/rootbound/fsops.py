"""Write-side filesystem primitives that work through directory handles, never path strings.

Every function takes an open directory descriptor and single names beneath it
(`dirfd`, `name`), or a root descriptor and components resolved with
`beneath.open_beneath`. No final symlink is ever followed by these calls: they
use O_NOFOLLOW, `*at` calls on the link itself, or check-by-inode.

Atomic writes (`write_file`): the data goes into an unnamed inode made with
O_TMPFILE in the target's directory; once written, fsynced and given its mode,
it is linked in — straight to the final name for create-only (linkat fails if
the name exists, so two creators cannot both win), or to a temporary name and
renamed over the target to replace it (Linux cannot link over an existing name).
A process killed while writing leaves no unnamed inode behind (the kernel frees
it). Filesystems without O_TMPFILE get a named temporary file (`.rootbound-<16
hex>.tmp`, created with O_EXCL) and `renameat2(RENAME_NOREPLACE)` for create-only.
Every temporary name (the link before the rename, the named fallback, a folder
copy's temp folder) is recorded in the server's recovery log (`recovery.temp_entry`)
before it is created, so one a kill leaves between link and rename is removed on
the next start; listings and searches hide such names meanwhile (`is_temp_name`).
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import hashlib
import os
import secrets
import shutil
import stat
import threading
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Final

from rootbound.errors import ToolError
from rootbound.fs import recovery
from rootbound.fs.beneath import EscapeError, open_beneath
from rootbound.fs.bounds import checkpoint

__all__ = [
    "TEMP_PREFIX", "TEMP_SUFFIX", "UMASK", "CopyStats", "EntryError", "Located", "append", "copy_fd", "copy_tree",
    "fd_path", "is_inside", "is_temp_name", "locate", "lstat_or_none", "real_relpath", "remove_tree",
    "rename_noreplace", "sha256_fd", "target_lock", "temp_dir", "temp_name", "undo_dirs", "walk_entries", "walk_names",
    "write_all", "write_file",
]

TEMP_PREFIX: Final = ".rootbound-"
TEMP_SUFFIX: Final = ".tmp"
_DIR: Final = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
_READ: Final = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC  # NONBLOCK: a FIFO must not hang us
_MAX_LINKS: Final = 40
_MAX_DEPTH: Final = 256  # deeper trees are refused: each level holds two descriptors
_CHUNK: Final = 1024 * 1024
_HAVE_PROC_FD: Final = os.path.isdir("/proc/self/fd")  # linking an O_TMPFILE inode goes through /proc
_RENAME_NOREPLACE: Final = 1
_SYS_RENAMEAT2: Final = {"x86_64": 316, "aarch64": 276}.get(os.uname().machine)


def _read_umask() -> int:
    # os.umask can only be read by setting it; this runs once, at import, before any worker thread exists.
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


UMASK: Final = _read_umask()
NEW_FILE_MODE: Final = 0o666 & ~UMASK


def is_temp_name(name: str) -> bool:
    """True for the names of our temporary files and directories (`.rootbound-<16 hex>.tmp`)."""
    return name.startswith(TEMP_PREFIX) and recovery.TEMP_NAME.match(name) is not None


def temp_name() -> str:
    """A fresh name for a temporary entry (hidden, recognised by `is_temp_name`)."""
    return f"{TEMP_PREFIX}{secrets.token_hex(8)}{TEMP_SUFFIX}"


# -- renames -------------------------------------------------------------------------------------

_libc = ctypes.CDLL(None, use_errno=True)


def _renameat2(src_dirfd: int, src: str, dst_dirfd: int, dst: str, flags: int) -> None:
    fn = getattr(_libc, "renameat2", None)  # glibc >= 2.28; else the raw system call
    args = (src_dirfd, os.fsencode(src), dst_dirfd, os.fsencode(dst), flags)
    if fn is not None:
        rc = fn(*args)
    elif _SYS_RENAMEAT2 is not None:
        rc = _libc.syscall(_SYS_RENAMEAT2, *args)
    else:
        raise OSError(errno.ENOSYS, os.strerror(errno.ENOSYS))
    if rc != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


def rename_noreplace(src_dirfd: int, src: str, dst_dirfd: int, dst: str) -> None:
    """Rename, failing with EEXIST if `dst` exists — decided by the kernel, so no race."""
    try:
        _renameat2(src_dirfd, src, dst_dirfd, dst, _RENAME_NOREPLACE)
        return
    except OSError as exc:
        if exc.errno not in (errno.EINVAL, errno.ENOSYS):  # EINVAL: this filesystem lacks the flag
            raise
    st = os.stat(src, dir_fd=src_dirfd, follow_symlinks=False)
    if not stat.S_ISDIR(st.st_mode):
        os.link(src, dst, src_dir_fd=src_dirfd, dst_dir_fd=dst_dirfd, follow_symlinks=False)  # EEXIST if taken
        os.unlink(src, dir_fd=src_dirfd)
        return
    if lstat_or_none(dst_dirfd, dst) is not None:  # a directory cannot be hard-linked: check, then rename
        raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST))
    os.rename(src, dst, src_dir_fd=src_dirfd, dst_dir_fd=dst_dirfd)


# -- small helpers ------------------------------------------------------------------------------


def lstat_or_none(dirfd: int, name: str) -> os.stat_result | None:
    try:
        return os.stat(name, dir_fd=dirfd, follow_symlinks=False)
    except FileNotFoundError:
        return None


def write_all(fd: int, data: bytes | memoryview) -> int:
    view = memoryview(data)
    total = len(view)
    while view:
        view = view[os.write(fd, view[:_CHUNK * 64]):]
    return total


def _pwrite_all(fd: int, data: bytes, at: int) -> None:
    view = memoryview(data)
    while view:
        written = os.pwrite(fd, view, at)
        view, at = view[written:], at + written


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
            want = _CHUNK * 16 if hi < 0 else min(_CHUNK * 16, hi - pos)
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
                chunk = os.pread(src, min(want, _CHUNK), pos)
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


def sha256_fd(fd: int) -> str:
    digest = hashlib.sha256()
    offset = 0
    while chunk := os.pread(fd, _CHUNK, offset):
        checkpoint()
        digest.update(chunk)
        offset += len(chunk)
    return digest.hexdigest()


def fd_path(fd: int) -> str | None:
    """Where the open directory `fd` is now, as a host path; None if unknown (no /proc) or deleted."""
    try:
        where = os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return None
    if not where.startswith("/") or where.endswith(" (deleted)"):
        return None
    return where


def real_relpath(dirfd: int, rootfd: int) -> list[str] | None:
    """Where `dirfd` really is, as components relative to the root open at `rootfd`; None if unknown.

    Both places are read now, from the handles: a root's configured path goes stale when
    the directory is renamed (through an enclosing root, say), and a stale base would hide
    a path's real location from the protected-path rules.
    Used only to match protected-path rules and the symlink policy, never to open anything.
    """
    where, base = fd_path(dirfd), fd_path(rootfd)
    if where is None or base is None:
        return None
    if where == base:
        return []
    base = base.rstrip("/")
    if where.startswith(base + "/"):
        return where[len(base) + 1:].split("/")
    return None


def is_inside(dirfd: int, ancestor: os.stat_result) -> bool:
    """True if the directory `dirfd` is `ancestor` or lies below it (walking up by inode, never by name)."""
    cur = os.dup(dirfd)
    try:
        for _ in range(4096):
            st = os.fstat(cur)
            if os.path.samestat(st, ancestor):
                return True
            up = os.open("..", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=cur)
            if os.path.samestat(os.fstat(up), st):  # the top of the filesystem tree
                os.close(up)
                return False
            os.close(cur)
            cur = up
        return False
    finally:
        os.close(cur)


class _Lock:
    __slots__ = ("__weakref__", "lock")

    def __init__(self) -> None:
        self.lock = threading.Lock()


_locks: weakref.WeakValueDictionary[tuple[int, int, str], _Lock] = weakref.WeakValueDictionary()
_locks_guard = threading.Lock()


@contextlib.contextmanager
def target_lock(dirfd: int, name: str) -> Iterator[None]:
    """Serialise this server's read-modify-writes of one file (patch, expected_sha256, append)."""
    st = os.fstat(dirfd)
    key = (st.st_dev, st.st_ino, name)
    with _locks_guard:
        entry = _locks.get(key)
        if entry is None:
            entry = _Lock()
            _locks[key] = entry
    with entry.lock:
        yield


# -- finding a target beneath a root -------------------------------------------------------------


@dataclass
class Located:
    """Where an operation acts: the parent directory handle and the final name in it.

    `name == "."` means the target is the directory `dirfd` itself (the root, or a
    path ending in `..`). `st` is the final entry's lstat, None when it does not exist.
    """

    dirfd: int
    name: str
    parts: list[str]  # root-relative components, through any final symlinks followed
    st: os.stat_result | None
    made: list[list[str]] = field(default_factory=list)  # directories created for it, outermost first

    @property
    def is_dir(self) -> bool:
        return self.st is not None and stat.S_ISDIR(self.st.st_mode)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self.dirfd)


def _make_dirs(rootfd: int, parts: list[str], made: list[list[str]]) -> int:
    """`mkdir -p` beneath `rootfd`: each missing directory made with mkdirat in its resolved
    parent, then reopened from the root, so a directory swapped for a symlink cannot lead out."""
    try:
        return open_beneath(rootfd, parts, _DIR)
    except FileNotFoundError:
        pass
    fd = open_beneath(rootfd, [], _DIR)
    try:
        for k, comp in enumerate(parts):
            prefix = parts[:k + 1]
            try:
                nfd = open_beneath(rootfd, prefix, _DIR)
            except FileNotFoundError:
                if comp == "..":
                    raise
                try:
                    os.mkdir(comp, 0o777, dir_fd=fd)
                    made.append(prefix)
                except FileExistsError:
                    pass  # made meanwhile, or a dangling symlink: the reopen decides
                nfd = open_beneath(rootfd, prefix, _DIR)
            os.close(fd)
            fd = nfd
        return fd
    except BaseException:
        os.close(fd)
        raise


def undo_dirs(rootfd: int, made: list[list[str]]) -> None:
    """Remove the directories `_make_dirs` created, innermost first, if they are still empty."""
    for prefix in reversed(made):
        try:
            fd = open_beneath(rootfd, prefix[:-1], _DIR)
        except OSError:
            continue
        with contextlib.suppress(OSError):
            os.rmdir(prefix[-1], dir_fd=fd)
        os.close(fd)
    made.clear()


def locate(rootfd: int, parts: list[str], *, follow: bool = True, make_parents: bool = False) -> Located:
    """Resolve `parts` beneath `rootfd` to (parent handle, final name).

    With `follow`, a final symlink is followed while it stays beneath the root (its
    text is spliced in and resolved again: an absolute or escaping target raises
    `EscapeError`); otherwise the link itself is the target. `make_parents` creates
    missing parent directories; the caller undoes them with `undo_dirs` on failure.
    """
    made: list[list[str]] = []
    try:
        for _ in range(_MAX_LINKS + 1):
            if not parts or parts[-1] == "..":
                fd = open_beneath(rootfd, parts, _DIR)
                return Located(fd, ".", parts, os.fstat(fd), made)
            dirfd = _make_dirs(rootfd, parts[:-1], made) if make_parents else open_beneath(rootfd, parts[:-1], _DIR)
            name = parts[-1]
            owned = True  # until handed to the caller in a Located
            try:
                st = lstat_or_none(dirfd, name)
                if st is None or not follow or not stat.S_ISLNK(st.st_mode):
                    owned = False
                    return Located(dirfd, name, parts, st, made)
                try:
                    target = os.readlink(name, dir_fd=dirfd)
                except OSError as exc:
                    if exc.errno != errno.EINVAL:
                        raise
                    continue  # no longer a symlink: look again
            finally:
                if owned:
                    os.close(dirfd)
            if target.startswith("/"):
                raise EscapeError()
            parts = parts[:-1] + [p for p in target.split("/") if p not in ("", ".")]
        raise OSError(errno.ELOOP, os.strerror(errno.ELOOP))
    except BaseException:
        undo_dirs(rootfd, made)
        raise


# -- writing -------------------------------------------------------------------------------------


def _open_temp(dirfd: int, records: contextlib.ExitStack) -> tuple[int, str | None]:
    """A new file in `dirfd` to fill: unnamed (O_TMPFILE) when possible, else an O_EXCL temporary name
    (recorded in `records` before it exists)."""
    if _HAVE_PROC_FD:
        try:
            return os.open(".", os.O_TMPFILE | os.O_WRONLY | os.O_CLOEXEC, 0o600, dir_fd=dirfd), None
        except OSError as exc:
            if exc.errno not in (errno.EOPNOTSUPP, errno.EISDIR, errno.EINVAL):
                raise
    while True:
        name = temp_name()
        records.enter_context(recovery.temp_entry(dirfd, name))
        try:
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
            return os.open(name, flags, 0o600, dir_fd=dirfd), name
        except FileExistsError:
            continue


def _link_unnamed(fd: int, dirfd: int, name: str) -> None:
    # linkat(AT_EMPTY_PATH) needs CAP_DAC_READ_SEARCH; the /proc magic link does not.
    os.link(f"/proc/self/fd/{fd}", name, dst_dir_fd=dirfd, follow_symlinks=True)


def _link_temp(fd: int, dirfd: int, records: contextlib.ExitStack) -> str:
    """Link the unnamed inode `fd` to a fresh temporary name in `dirfd` (recorded before it exists)."""
    while True:
        tmp = temp_name()
        records.enter_context(recovery.temp_entry(dirfd, tmp))
        try:
            _link_unnamed(fd, dirfd, tmp)
            return tmp
        except FileExistsError:
            continue


def write_file(dirfd: int, name: str, fill: Callable[[int], int], *, replace: bool, perms: int,
               owner: tuple[int, int] | None = None, before_commit: Callable[[], None] | None = None,
               made: Callable[[os.stat_result], None] | None = None) -> int:
    """Create or replace `name` in `dirfd` with what `fill(fd)` writes; return its size.

    Atomic: other processes see the old file or the complete new one, never a part.
    `replace=False` fails with FileExistsError if the name exists (race-free).
    `made` is told the new inode once its data is durable; `before_commit` runs just
    before it becomes visible, and raising there abandons the write.
    """
    with contextlib.ExitStack() as records:  # closed last: after the temporary name is gone
        fd, tmp = _open_temp(dirfd, records)
        try:
            size = fill(fd)
            os.fchmod(fd, perms)
            if owner is not None:
                with contextlib.suppress(PermissionError):  # keep the file's owner when we may (running as root)
                    os.fchown(fd, *owner)
            os.fsync(fd)
            if made is not None:
                made(os.fstat(fd))
            if before_commit is not None:
                before_commit()
            if tmp is None:
                if not replace:
                    _link_unnamed(fd, dirfd, name)
                    return size
                tmp = _link_temp(fd, dirfd, records)
            recovery.kill_point("linked")
            if replace:
                os.rename(tmp, name, src_dir_fd=dirfd, dst_dir_fd=dirfd)
            else:
                rename_noreplace(dirfd, tmp, dirfd, name)
            tmp = None
            return size
        finally:
            os.close(fd)
            if tmp is not None:
                with contextlib.suppress(OSError):
                    os.unlink(tmp, dir_fd=dirfd)


def append(dirfd: int, name: str, data: bytes) -> bool:
    """Append `data` to `name`, creating it if missing; return True if it was created.

    In place with O_APPEND, so concurrent appenders all land; on an error the file is
    cut back to its old length. A file with other hard links is rewritten atomically
    instead, so the append cannot reach a file that has a name outside the root.
    """
    while True:
        try:
            fd = os.open(name, os.O_RDWR | os.O_APPEND | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dirfd)
        except FileNotFoundError:
            try:
                write_file(dirfd, name, lambda f: write_all(f, data), replace=False, perms=NEW_FILE_MODE)
                return True
            except FileExistsError:
                continue  # created meanwhile: append to it
        break
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ToolError("not a regular file")
        if st.st_nlink > 1:
            def fill(out: int) -> int:
                return copy_fd(fd, out, 0, st.st_size) + write_all(out, data)

            write_file(dirfd, name, fill, replace=True, perms=stat.S_IMODE(st.st_mode), owner=(st.st_uid, st.st_gid))
            return False
        try:
            write_all(fd, data)
            os.fsync(fd)
        except BaseException:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, st.st_size)
            raise
        return False
    finally:
        os.close(fd)


# -- trees ---------------------------------------------------------------------------------------


def remove_tree(dirfd: int, name: str) -> None:
    """Delete directory `name` and everything in it. CPython's rmtree with `dir_fd` walks by
    descriptor and re-checks each directory's inode before entering it, so a symlink (or one
    swapped in mid-walk) is unlinked, never followed (verified on 3.11)."""
    shutil.rmtree(name, dir_fd=dirfd)


def walk_names(dirfd: int, name: str) -> Iterator[str]:
    """Every entry below directory `name`, as a path relative to it; symlinks are listed, not entered."""
    for rel, _ in walk_entries(dirfd, name):
        yield rel


def _listing(fd: int) -> list[os.DirEntry[str]]:
    with os.scandir(fd) as it:
        return sorted(it, key=lambda e: e.name)


def walk_entries(dirfd: int, name: str) -> Iterator[tuple[str, str | None]]:
    """Every entry below directory `name`: (path relative to it, the symlink's text or None).

    By descriptor and without recursion (os.fwalk recurses, and a tree a thousand levels
    deep crashed it). Symlinks are listed, never entered. A tree deeper than the copy limit
    is refused rather than half-walked, since callers check every entry against the
    protected-path rules.
    """
    top = os.open(name, _DIR | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=dirfd)
    stack: list[tuple[int, str, Iterator[os.DirEntry[str]]]] = []
    seen = 0
    try:
        stack.append((top, "", iter(_listing(top))))
        while stack:
            fd, prefix, entries = stack[-1]
            for de in entries:
                seen += 1
                if seen & 63 == 0:
                    checkpoint()  # a walk of a huge tree stops at the call's time bound
                rel = prefix + de.name
                if de.is_dir(follow_symlinks=False):
                    yield rel, None
                    if len(stack) >= _MAX_DEPTH:
                        raise ToolError(f"folder too deep: more than {_MAX_DEPTH} levels below {name}; "
                                        "nothing was changed")
                    try:
                        sub = os.open(de.name, _DIR | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=fd)
                    except OSError as exc:
                        if exc.errno in (errno.ENOENT, errno.ENOTDIR, errno.ELOOP):
                            continue  # removed, or replaced by a file or link, since it was listed
                        raise
                    stack.append((sub, rel + "/", iter(())))  # stacked first: closed by `finally` if listing fails
                    stack[-1] = (sub, rel + "/", iter(_listing(sub)))
                    break
                text = None
                if de.is_symlink():
                    with contextlib.suppress(OSError):  # gone, or no longer a link
                        text = os.readlink(de.name, dir_fd=fd)
                yield rel, text
            else:
                stack.pop()
                os.close(fd)
    finally:
        for fd, _, _ in stack:
            os.close(fd)


@contextlib.contextmanager
def temp_dir(dirfd: int) -> Iterator[tuple[int, str]]:
    """A new private directory with a temporary name in `dirfd`, and a handle on it, for the block.

    The name is recorded for recovery before the directory exists. The block renames it
    into place; if it is still there when the block ends (an error), it is removed."""
    with contextlib.ExitStack() as records:
        while True:
            name = temp_name()
            records.enter_context(recovery.temp_entry(dirfd, name))
            try:
                os.mkdir(name, 0o700, dir_fd=dirfd)
                break
            except FileExistsError:
                continue
        fd = os.open(name, _DIR | os.O_NOFOLLOW, dir_fd=dirfd)
        try:
            yield fd, name
        finally:
            made = os.fstat(fd)
            os.close(fd)
            left = lstat_or_none(dirfd, name)
            if left is not None and os.path.samestat(left, made):
                with contextlib.suppress(OSError):
                    remove_tree(dirfd, name)


class EntryError(Exception):
    """An OS error on one entry of a tree operation, with the entry's path relative to the tree."""

    def __init__(self, rel: str, exc: OSError) -> None:
        super().__init__(rel, exc)
        self.rel = rel
        self.exc = exc


@dataclass
class CopyStats:
    files: int = 0
    dirs: int = 0
    bytes: int = 0
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (relative path, why)


def copy_tree(src: int, dst: int, stats: CopyStats, *, check: Callable[[str], None],
              link_ok: Callable[[str, str], bool], rel: str = "", depth: int = 0) -> None:
    """Copy the contents of directory `src` into the empty directory `dst`, by descriptor.

    Nothing is dereferenced: a symlink is recreated (its text, not its target's content)
    only when `link_ok(relative path, link text)` says so, else skipped and reported, as
    are FIFOs, sockets and devices. `check(relative path)` may veto an entry by raising.
    """
    if depth >= _MAX_DEPTH:
        raise ToolError(f"directory tree too deep to copy (more than {_MAX_DEPTH} levels) at {rel}")
    with os.scandir(src) as it:
        entries = sorted(it, key=lambda e: e.name)
    for entry in entries:
        checkpoint()
        child = f"{rel}/{entry.name}" if rel else entry.name
        try:
            st = entry.stat(follow_symlinks=False)
            check(child)
            if stat.S_ISDIR(st.st_mode):
                _copy_dir(src, dst, entry.name, st, stats, check, link_ok, child, depth)
            elif stat.S_ISREG(st.st_mode):
                _copy_regular(src, dst, entry.name, st, stats, child)
            elif stat.S_ISLNK(st.st_mode):
                text = os.readlink(entry.name, dir_fd=src)
                if link_ok(child, text):
                    os.symlink(text, entry.name, dir_fd=dst)
                else:
                    stats.skipped.append((child, "symlink leading outside the destination root"))
            else:
                stats.skipped.append((child, f"special file ({_kind(st.st_mode)})"))
        except FileNotFoundError:
            stats.skipped.append((child, "removed during the copy"))
        except OSError as exc:
            raise EntryError(child, exc) from None


def _kind(mode: int) -> str:
    return "fifo" if stat.S_ISFIFO(mode) else "socket" if stat.S_ISSOCK(mode) else "device"


def _copy_dir(src: int, dst: int, name: str, st: os.stat_result, stats: CopyStats, check: Callable[[str], None],
              link_ok: Callable[[str, str], bool], child: str, depth: int) -> None:
    sfd = os.open(name, _DIR | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=src)
    try:
        if not os.path.samestat(os.fstat(sfd), st):
            stats.skipped.append((child, "changed during the copy"))
            return
        os.mkdir(name, 0o700, dir_fd=dst)
        dfd = os.open(name, _DIR | os.O_NOFOLLOW, dir_fd=dst)
        try:
            copy_tree(sfd, dfd, stats, check=check, link_ok=link_ok, rel=child, depth=depth + 1)
            os.fchmod(dfd, stat.S_IMODE(st.st_mode) & 0o777)
        finally:
            os.close(dfd)
        stats.dirs += 1
    finally:
        os.close(sfd)


def _copy_regular(src: int, dst: int, name: str, st: os.stat_result, stats: CopyStats, child: str) -> None:
    sfd = os.open(name, _READ, dir_fd=src)
    try:
        if not os.path.samestat(os.fstat(sfd), st):
            stats.skipped.append((child, "changed during the copy"))
            return
        dfd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=dst)
        try:
            stats.bytes += copy_fd(sfd, dfd)
            os.fchmod(dfd, stat.S_IMODE(st.st_mode) & 0o777)
        finally:
            os.close(dfd)
        stats.files += 1
        recovery.kill_point("copied-file")
    finally:
        os.close(sfd)
