"""Open a relative path beneath a directory handle, never escaping it.

Two resolvers with the same contract, `open_beneath(dirfd, parts, flags, follow)`:

* `openat2` — Linux >= 5.6: the kernel walks the path with
  RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS, so no component (`..`, a symlink, a
  symlink swapped in mid-walk) can leave `dirfd`.
* `walk` — everywhere else: one `openat(O_NOFOLLOW)` per component from `dirfd`,
  reading each symlink ourselves and splicing its text into the remaining
  components, `..` popping only descriptors we opened. An absolute symlink, or
  `..` above `dirfd`, is an escape.

Both raise `EscapeError` on an escape and plain `OSError` otherwise. The
resolver is picked once at import time; `ROOTBOUND_RESOLVER=walk` forces the
fallback (the tests run every security case against both).

`locate` is the same resolution for an entry that is to be made, replaced or
removed: it yields the directory that holds it and its name there, following a
final symlink (when asked) by splicing its text in, exactly as the walk does.
`locate_making` is `locate` that first makes missing parent directories
(`make_dirs`, undone by `undo_dirs`). This module is the only place that reads a
symlink's text to decide where a path leads.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import stat
from collections.abc import Callable, Sequence
from typing import Final, NamedTuple

from rootbound.fs import onloop
from rootbound.fs.handles import lstat_or_none
from rootbound.libc import syscall as _syscall

__all__ = ["DIRECTORY", "MAX_SYMLINKS", "RESOLVER", "EscapeError", "Located", "locate", "locate_making", "make_dirs",
           "open_beneath", "undo_dirs"]

_SYS_OPENAT2: Final = 437  # same number on x86_64 and aarch64
_RESOLVE_NO_MAGICLINKS: Final = 0x02
_RESOLVE_BENEATH: Final = 0x08
_RESOLVE_NO_XDEV: Final = 0x01  # on the event loop: never enter another mount (onloop.py)
MAX_SYMLINKS: Final = 40  # Linux's own limit for one lookup
_DIR_FLAGS: Final = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
DIRECTORY: Final = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC  # a directory, reached through in-root symlinks


class EscapeError(OSError):
    """The path leaves the directory it must stay beneath."""

    def __init__(self) -> None:
        super().__init__(errno.EXDEV, "path resolves outside root boundary")


class _OpenHow(ctypes.Structure):
    _fields_ = (("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64))


_LOOP_RETRIES: Final = 16  # EAGAINs in a row an open on the event loop takes for a rename race


def _openat2(dirfd: int, parts: Sequence[str], flags: int, follow: bool, mode: int) -> int:
    path = os.fsencode("/".join(parts) if parts else ".")
    if not follow:
        flags |= os.O_NOFOLLOW
    on_loop = onloop.active()
    how = _OpenHow(flags | os.O_CLOEXEC, mode if flags & os.O_CREAT else 0,
                   _RESOLVE_BENEATH | _RESOLVE_NO_MAGICLINKS | (_RESOLVE_NO_XDEV if on_loop else 0))
    tries = 0
    while True:
        fd = _syscall(_SYS_OPENAT2, dirfd, path, ctypes.byref(how), ctypes.sizeof(how))
        if fd >= 0:
            return int(fd)
        err = ctypes.get_errno()
        if err == errno.EAGAIN:  # a concurrent rename raced a `..` step: the kernel asks us to retry
            # ... or, with O_NONBLOCK, a lease holder would make the open wait (same errno), as long as it holds on
            # (up to lease-break-time, 45 s): on the event loop that is not spun on (the caller offloads).
            tries += 1
            if on_loop and flags & os.O_NONBLOCK and tries > _LOOP_RETRIES:
                raise BlockingIOError(err, os.strerror(err), "/".join(parts))
            continue
        if err == errno.EXDEV:
            if on_loop:  # a mount point, or an escape: the thread's resolution (without NO_XDEV) tells which
                raise onloop.Offload
            raise EscapeError()
        raise OSError(err, os.strerror(err), "/".join(parts))


def _walk(dirfd: int, parts: Sequence[str], flags: int, follow: bool, mode: int) -> int:
    if onloop.active():  # component by component, a mount point is crossed unseen: never on the event loop
        raise onloop.Offload
    pending = list(reversed(parts))  # a stack: next component on top
    stack: list[int] = []  # descriptors we opened; `dirfd` itself is borrowed
    links = 0
    try:
        while True:
            top = stack[-1] if stack else dirfd
            if not pending:  # the path named the start directory itself (or a `..` back to it)
                return os.open(".", flags | os.O_CLOEXEC, dir_fd=top)
            name = pending.pop()
            if name in ("", "."):
                continue
            if name == "..":
                if not stack:
                    raise EscapeError()
                os.close(stack.pop())
                continue
            last = not pending
            if not last:
                try:
                    stack.append(os.open(name, _DIR_FLAGS, dir_fd=top))
                    continue
                except OSError as exc:
                    if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
                        raise
                    target = _readlink(name, top, exc)
            else:
                if follow:
                    st = os.stat(name, dir_fd=top, follow_symlinks=False) if flags & os.O_CREAT == 0 \
                        else lstat_or_none(top, name)
                    if st is not None and stat.S_ISLNK(st.st_mode):
                        target = _readlink(name, top, OSError(errno.ELOOP, "symlink"))
                        links += 1
                        if links > MAX_SYMLINKS:
                            raise OSError(errno.ELOOP, os.strerror(errno.ELOOP))
                        _splice(pending, target)
                        continue
                fd = os.open(name, flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=top)
                if follow and flags & os.O_PATH and stat.S_ISLNK(os.fstat(fd).st_mode):
                    os.close(fd)  # swapped for a symlink after our lstat: go round again
                    pending.append(name)
                    continue
                return fd
            links += 1
            if links > MAX_SYMLINKS:
                raise OSError(errno.ELOOP, os.strerror(errno.ELOOP))
            _splice(pending, target)
    finally:
        for fd in stack:
            os.close(fd)


def _readlink(name: str, dirfd: int, original: OSError) -> str:
    try:
        return os.readlink(name, dir_fd=dirfd)
    except OSError:
        raise original from None  # not a symlink after all: report the first error


def _link_parts(target: str) -> list[str]:
    """The components a symlink's text stands for, relative to the link's directory."""
    if target.startswith("/"):
        raise EscapeError()  # absolute targets are refused, as RESOLVE_BENEATH does
    return [p for p in target.split("/") if p not in ("", ".")]


def _splice(pending: list[str], target: str) -> None:
    pending.extend(reversed(_link_parts(target)))


def _openat2_works() -> bool:
    if os.environ.get("ROOTBOUND_RESOLVER") == "walk":
        return False
    probe = os.open("/", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.close(_openat2(probe, [], os.O_PATH, True, 0))
        return True
    except OSError:
        return False  # ENOSYS on old kernels, EPERM under seccomp profiles that predate openat2
    finally:
        os.close(probe)


RESOLVER: Final = "openat2" if _openat2_works() else "walk"
_open = _openat2 if RESOLVER == "openat2" else _walk


def open_beneath(dirfd: int, parts: Sequence[str], flags: int, *, follow: bool = True, mode: int = 0o666) -> int:
    """Open `parts` (already split, no empty names needed) beneath `dirfd`.

    `follow=False` opens a final symlink itself (with O_PATH) or fails with ELOOP;
    symlinks in earlier components are always followed while they stay beneath.
    """
    return _open(dirfd, parts, flags, follow, mode)


class Located(NamedTuple):
    """Where an entry lies: a handle on the directory holding it (the caller's to close), its name there, the
    components that lead to it (through any final symlinks followed), its lstat or None when it does not exist."""

    dirfd: int
    name: str
    parts: list[str]
    st: os.stat_result | None

    @property
    def is_dir(self) -> bool:
        return self.st is not None and stat.S_ISDIR(self.st.st_mode)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self.dirfd)


def locate(dirfd: int, parts: list[str], *, follow: bool = True,
           open_parent: Callable[[list[str]], int] | None = None) -> Located:
    """Where the entry `parts` names lies beneath `dirfd`: (a handle on the directory holding it, its name
    there, the components that lead to it, its lstat or None when it does not exist). The caller owns the handle.

    The name is "." when `parts` names a directory itself (the start, or a path ending in `..`): the handle
    is that directory. Components before the last are resolved by `open_parent` (default: `open_beneath`;
    `locate_making` passes one that makes missing directories). With `follow`, a final symlink is followed while it
    stays beneath `dirfd`, whether or not its target exists: its text replaces the name and the lookup
    starts over (an absolute target, or one leading out, raises `EscapeError`); otherwise the link itself is
    the entry.
    """
    opener = open_parent or (lambda prefix: open_beneath(dirfd, prefix, DIRECTORY))
    for _ in range(MAX_SYMLINKS + 1):
        if not parts or parts[-1] == "..":
            fd = open_beneath(dirfd, parts, DIRECTORY)
            return Located(fd, ".", parts, os.fstat(fd))
        parent = opener(parts[:-1])
        name = parts[-1]
        try:
            st = lstat_or_none(parent, name)
            if st is None or not follow or not stat.S_ISLNK(st.st_mode):
                located, parent = Located(parent, name, parts, st), -1
                return located
            try:
                target = os.readlink(name, dir_fd=parent)
            except OSError as exc:
                if exc.errno != errno.EINVAL:
                    raise
                continue  # no longer a symlink: look again
        finally:
            if parent >= 0:
                os.close(parent)
        parts = parts[:-1] + _link_parts(target)
    raise OSError(errno.ELOOP, os.strerror(errno.ELOOP))


def make_dirs(dirfd: int, parts: list[str], made: list[list[str]]) -> int:
    """`mkdir -p` beneath `dirfd`, returning a handle on the last directory: each missing one is made with
    mkdirat in its resolved parent, then reopened from `dirfd`, so a directory swapped for a symlink cannot
    lead out. The components of each directory made are appended to `made`, outermost first."""
    try:
        return open_beneath(dirfd, parts, DIRECTORY)
    except FileNotFoundError:
        pass
    fd = open_beneath(dirfd, [], DIRECTORY)
    try:
        for k, comp in enumerate(parts):
            prefix = parts[:k + 1]
            try:
                nfd = open_beneath(dirfd, prefix, DIRECTORY)
            except FileNotFoundError:
                if comp == "..":
                    raise
                try:
                    os.mkdir(comp, 0o777, dir_fd=fd)
                    made.append(prefix)
                except FileExistsError:
                    pass  # made meanwhile, or a dangling symlink: the reopen decides
                nfd = open_beneath(dirfd, prefix, DIRECTORY)
            os.close(fd)
            fd = nfd
        return fd
    except BaseException:
        os.close(fd)
        raise


def undo_dirs(dirfd: int, made: list[list[str]]) -> None:
    """Remove the directories `make_dirs` created beneath `dirfd`, innermost first, if they are still empty."""
    for prefix in reversed(made):
        try:
            fd = open_beneath(dirfd, prefix[:-1], DIRECTORY)
        except OSError:
            continue
        with contextlib.suppress(OSError):
            os.rmdir(prefix[-1], dir_fd=fd)
        os.close(fd)
    made.clear()


def locate_making(dirfd: int, parts: list[str], *, follow: bool = True,
                  made: list[list[str]] | None = None) -> Located:
    """`locate`, making missing parent directories first (`make_dirs`). Those made are recorded in `made`
    (outermost first), for the caller to remove with `undo_dirs` if its change then fails; if the lookup
    itself fails they are removed before the error is raised."""
    made = [] if made is None else made
    try:
        return locate(dirfd, parts, follow=follow, open_parent=lambda prefix: make_dirs(dirfd, prefix, made))
    except BaseException:
        undo_dirs(dirfd, made)
        raise
