"""Trees beneath a directory handle: the one walker, and what is built on it (copy, remove).

`walk` is how every recursive operation sees a subtree — the look before a folder is
removed or moved, a folder's copy, and grep and glob through `search_walk` (the same
walk with its rules, specialised for a search):

* every directory is listed with `os.scandir(fd)` and its entries typed from the
  directory itself (`d_type`, or `lstat` where the filesystem gives no type) —
  symlinks are never followed to decide what an entry is;
* a subdirectory is opened with `openat(parent_fd, name, O_NOFOLLOW|O_DIRECTORY)`,
  so an entry swapped for a symlink after it was listed fails to open (ELOOP or
  ENOTDIR) instead of leading anywhere;
* iteratively, one handle per level (os.fwalk recurses, and a tree a thousand
  levels deep crashed it), at most `MAX_DEPTH` levels, so the descriptors stay
  well inside the process's limit.

Symlinks are reported, never entered: following in-root links would visit the
same files twice and could loop, and following outside ones is the escape the walk
exists to prevent. (A path the agent names is resolved by `Root`, which does follow
in-root symlinks.) Entries come in a stable order: each directory's entries sorted by
name, each subdirectory's contents right after it (pre-order).

Two ways to walk. A search (`strict=False`) takes what it can: unreadable or
vanished parts are skipped, the server's temporary entries hidden, deeper levels
left out, and `expired()` ends it quietly. A change (`strict=True`: a folder
about to be removed, moved or copied) must see everything or nothing: it lists
temporary entries too, checks the call's bound (`bounds.checkpoint`), re-checks each
directory it enters against what was listed, and fails with `TooDeep` or `TreeError`
rather than act on part of a tree.
"""

from __future__ import annotations

import bisect
import contextlib
import errno
import operator
import os
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Final

from rootbound.fs import recovery
from rootbound.fs.atomic import TEMP_PREFIX, is_temp_name, make_temp
from rootbound.fs.bounds import checkpoint
from rootbound.fs.content import copy_fd
from rootbound.fs.handles import lstat_or_none
from rootbound.fs.paths import file_type
from rootbound.fs.removal import remove_tree

if TYPE_CHECKING:
    from rootbound.fs.ignores import Ignores

__all__ = ["DIRECTORY", "FILE", "MAX_DEPTH", "OTHER", "SYMLINK", "CopyStats", "Entry", "Found", "Skip", "TooDeep",
           "TreeError", "copy_tree", "find", "open_file", "remove_tree", "search_walk", "temp_dir", "walk"]

FILE: Final = "file"
DIRECTORY: Final = "directory"
SYMLINK: Final = "symlink"
OTHER: Final = "other"  # fifo, socket, device: listed, never opened

MAX_DEPTH: Final = 256

_DIR_FLAGS: Final = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_FILE_FLAGS: Final = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
# What a search skips: entries that vanish, turn into symlinks or are unreadable mid-walk.
_SKIP_ERRNOS: Final = frozenset({errno.ENOENT, errno.ENOTDIR, errno.ELOOP, errno.EACCES, errno.EPERM,
                                 errno.ENXIO, errno.EISDIR})
# What a change skips: a directory removed, or replaced by a file or a link, since it was listed.
_GONE_ERRNOS: Final = frozenset({errno.ENOENT, errno.ENOTDIR, errno.ELOOP})


class TooDeep(Exception):
    """A strict walk met a directory `rel` deeper than MAX_DEPTH levels."""

    def __init__(self, rel: str) -> None:
        super().__init__(rel)
        self.rel = rel


class TreeError(Exception):
    """An OS error on one entry of a strict walk or a copy, with the entry's path relative to the tree."""

    def __init__(self, rel: str, exc: OSError) -> None:
        super().__init__(rel, exc)
        self.rel = rel
        self.exc = exc


class Entry:
    """One entry met by the walk.

    `path` is relative to the directory the walk started in, `/`-separated, with the
    names as the OS gave them. `dir_fd` is the handle of the directory holding the
    entry: it is valid only until the walk moves past that directory, so use it (or
    `lstat`) before asking for the next entry, or `os.dup` it to keep it. For a
    directory that was listed but could not be entered in a strict walk, `missed`
    says why ("removed" or "changed").
    """

    __slots__ = ("_dirent", "depth", "dir_fd", "kind", "missed", "parent", "path")

    def __init__(self, parent: str, depth: int, kind: str, dir_fd: int, dirent: os.DirEntry[str]) -> None:
        self.parent = parent  # the directory's path with a trailing "/" ("" for the start directory)
        self.path = parent + dirent.name
        self.depth = depth  # 1 for entries directly inside the start directory
        self.kind = kind
        self.dir_fd = dir_fd
        self._dirent = dirent
        self.missed: str | None = None

    @property
    def name(self) -> str:
        return self._dirent.name

    def lstat(self) -> os.stat_result:
        """The entry's own metadata (a symlink's, not its target's)."""
        return self._dirent.stat(follow_symlinks=False)

    def readlink(self) -> str | None:
        """A symlink's text; None when it is gone or no longer a link."""
        try:
            return os.readlink(self.name, dir_fd=self.dir_fd)
        except OSError:
            return None


def _kind(de: os.DirEntry[str]) -> str:
    # follow_symlinks=False: a symlink is neither a file nor a directory here, whatever it points to.
    if de.is_file(follow_symlinks=False):
        return FILE
    if de.is_dir(follow_symlinks=False):
        return DIRECTORY
    if de.is_symlink():
        return SYMLINK
    return OTHER


_name = operator.attrgetter("name")


def _listing(fd: int, strict: bool) -> list[os.DirEntry[str]]:
    if strict:
        with os.scandir(fd) as it:  # scandir works on a duplicate; `fd` stays ours
            return sorted(it, key=_name)
    try:
        with os.scandir(fd) as it:
            listing = sorted(it, key=_name)
    except OSError as exc:
        if exc.errno in _SKIP_ERRNOS:
            return []
        raise
    # The server's own temporary entries (writes in progress) are not part of what a search sees. Sorted, the
    # names with their prefix are one run: found by bisection, not by a test of every name.
    lo = bisect.bisect_left(listing, TEMP_PREFIX, key=_name)
    hi = lo
    while hi < len(listing) and listing[hi].name.startswith(TEMP_PREFIX):
        hi += 1
    if hi > lo:
        listing[lo:hi] = [de for de in listing[lo:hi] if not is_temp_name(de.name)]
    return listing


def _lister(listing: list[os.DirEntry[str]]) -> Callable[[str], bool]:
    """Whether a name is in a directory's sorted listing (by bisection)."""
    def listed(name: str) -> bool:
        i = bisect.bisect_left(listing, name, key=_name)
        return i < len(listing) and listing[i].name == name
    return listed


def _enter(fd: int, de: os.DirEntry[str], entry: Entry, strict: bool) -> int:
    """Open the subdirectory `de` of `fd` to walk it; -1 when the walk passes it by."""
    try:
        sub = os.open(de.name, _DIR_FLAGS, dir_fd=fd)
    except OSError as exc:
        if exc.errno in (_GONE_ERRNOS if strict else _SKIP_ERRNOS):
            entry.missed = "removed" if exc.errno == errno.ENOENT else "changed"
            return -1  # swapped for a symlink or a file, removed, or unreadable: not ours to follow
        if strict:
            raise TreeError(entry.path, exc) from None
        raise
    if strict and not os.path.samestat(os.fstat(sub), entry.lstat()):  # replaced since it was listed
        os.close(sub)
        entry.missed = "changed"
        return -1
    return sub


def _sub_listing(sub: int, entry: Entry, strict: bool) -> list[os.DirEntry[str]]:
    try:
        return _listing(sub, strict)
    except OSError as exc:
        if strict:
            raise TreeError(entry.path, exc) from None
        raise


def _never() -> bool:
    return False


# One frame per open directory: (handle, path prefix, depth, its entries still to visit).
Frame = tuple[int, str, int, Iterator[os.DirEntry[str]]]


def _first_frame(top_fd: int, max_depth: int | None, strict: bool, ignores: Ignores | None
                 ) -> tuple[int, list[Frame]]:
    """A walk's depth limit and its first frame, the start directory's (none below depth 1), whose ignore files
    are read now."""
    limit = MAX_DEPTH if max_depth is None else min(max_depth, MAX_DEPTH)
    if limit < 1:
        return limit, []
    top_listing = _listing(top_fd, strict)
    if ignores is not None:
        ignores.enter(top_fd, "", _lister(top_listing))
    return limit, [(top_fd, "", 1, iter(top_listing))]


def _leave(frames: list[Frame], fd: int, ignores: Ignores | None) -> None:
    """The walk is done with the last frame's directory (`fd`): its rules go, and its handle unless it is the
    start's (borrowed)."""
    frames.pop()
    if ignores is not None:
        ignores.leave()
    if frames:
        os.close(fd)


def _close_frames(frames: list[Frame]) -> None:
    """A walk ended early: close the handles its frames still hold (all but the start's)."""
    for fd, *_ in frames[1:]:
        os.close(fd)


def walk(top_fd: int, *, max_depth: int | None = None, expired: Callable[[], bool] = _never,
         strict: bool = False, ignores: Ignores | None = None) -> Iterator[Entry]:
    """Yield every entry beneath the directory `top_fd` (borrowed, not closed).

    `max_depth` follows find/ripgrep: 1 lists only the start directory's own entries, 2 also
    those of its subdirectories, and so on. `expired` is polled before each directory is
    entered; when it returns True the walk ends. `strict`: see the module's docstring.
    `ignores` (a search's): the entries its rules leave out are neither yielded nor entered, and
    each directory's ignore files are read as the walk enters it.
    """
    limit, frames = _first_frame(top_fd, max_depth, strict, ignores)
    seen = 0
    try:
        while frames:
            fd, prefix, depth, entries = frames[-1]
            for de in entries:  # resumes where it left off when we come back from a subdirectory
                if strict:
                    seen += 1
                    if seen & 63 == 0:
                        checkpoint()  # a walk of a huge tree stops at the call's time bound
                try:
                    kind = _kind(de)
                except OSError:
                    continue  # vanished between listing and typing
                entry = Entry(prefix, depth, kind, fd, de)
                if ignores is not None and ignores.ignored(entry.path, de.name, kind == DIRECTORY):
                    continue
                sub = -1
                if kind == DIRECTORY:
                    if depth >= limit:
                        if strict:
                            raise TooDeep(entry.path)
                    elif expired():
                        return
                    else:
                        sub = _enter(fd, de, entry, strict)
                if sub < 0:
                    yield entry
                    continue
                frames.append((sub, entry.path + "/", depth + 1, iter(())))  # held by the frames from now on
                listing = None
                if ignores is not None:
                    # Left when its frame is popped. Its ignore files are read only if listed: most folders
                    # have none, and three failed opens per folder were a tenth of a search's time.
                    listing = _sub_listing(sub, entry, strict)
                    ignores.enter(sub, entry.path + "/", _lister(listing))
                yield entry
                if listing is None:  # listed once the entry is yielded, as ever, when no rules need it before
                    listing = _sub_listing(sub, entry, strict)
                frames[-1] = (sub, entry.path + "/", depth + 1, iter(listing))
                break
            else:
                _leave(frames, fd, ignores)
    finally:
        _close_frames(frames)


def search_walk(top_fd: int, test: Callable[[str], object], *, on_path: bool = False,
                max_depth: int | None = None, expired: Callable[[], bool] = _never,
                ignores: Ignores | None = None) -> Iterator[tuple[int, str, os.DirEntry[str], bool]]:
    """`walk(top_fd, max_depth=..., expired=..., ignores=...)` specialised for a search of a big tree: yield
    only the entries `test` accepts — given each entry's name, or with `on_path` its path — as (the handle of
    its directory, valid until the next step; its directory's path prefix, one string per visit of it; the
    entry; whether it is a directory), in `walk`'s order.

    An entry that is neither a directory nor accepted costs a name test and nothing else (no `Entry`, no
    generator step, no path string, no ignore rule): glob's walk took half the time. Every rule of `walk`
    holds: directories opened beneath their parent's handle with O_NOFOLLOW, symlinks listed and never
    entered, temporary names hidden, what the ignore rules leave out neither yielded nor entered, and
    `expired()` polled before each directory (and every 32 entries) ends the walk.
    """
    limit, frames = _first_frame(top_fd, max_depth, False, ignores)
    seen = 0
    try:
        while frames:
            fd, prefix, depth, entries = frames[-1]
            for de in entries:  # resumes where it left off when we come back from a subdirectory
                seen += 1
                if seen & 31 == 0 and expired():
                    return
                name = de.name
                try:
                    is_dir = de.is_dir(follow_symlinks=False)
                except OSError:
                    continue  # vanished between listing and typing
                hit = test(prefix + name if on_path else name)
                if not (hit or is_dir):
                    continue
                if ignores is not None and ignores.ignored(prefix + name, name, is_dir):
                    continue
                if not is_dir or depth >= limit:
                    if hit:
                        yield fd, prefix, de, is_dir
                    continue
                if expired():
                    return
                try:
                    sub = os.open(name, _DIR_FLAGS, dir_fd=fd)
                except OSError as exc:  # swapped for a symlink or a file, removed, or unreadable: not entered
                    if exc.errno not in _SKIP_ERRNOS:
                        raise
                    if hit:
                        yield fd, prefix, de, is_dir
                    continue
                path = prefix + name + "/"
                frames.append((sub, path, depth + 1, iter(())))  # held by the frames from now on
                if hit:
                    yield fd, prefix, de, is_dir
                listing = _listing(sub, False)
                if ignores is not None:
                    ignores.enter(sub, path, _lister(listing))  # left when its frame is popped
                frames[-1] = (sub, path, depth + 1, iter(listing))
                break
            else:
                _leave(frames, fd, ignores)
    finally:
        _close_frames(frames)


Found = tuple[str, str, os.stat_result]  # path relative to the start, kind (FILE, ...), its own lstat


def find(top_fd: int, test: Callable[[str], object], *, on_path: bool = False, kind: str | None = None,
         max_depth: int | None = None, max_results: int, expired: Callable[[], bool] = _never,
         ignores: Ignores | None = None) -> tuple[list[Found], bool]:
    """The entries `search_walk` yields, of `kind` if given, each with its lstat (one gone meanwhile is left
    out); and whether there were more than `max_results` (only that many are returned)."""
    found: list[Found] = []
    for _, prefix, de, is_dir in search_walk(top_fd, test, on_path=on_path, max_depth=max_depth, expired=expired,
                                             ignores=ignores):
        try:
            entry_kind = DIRECTORY if is_dir else FILE if de.is_file(follow_symlinks=False) else _kind(de)
            if kind is not None and entry_kind != kind:
                continue
            st = de.stat(follow_symlinks=False)
        except OSError:
            continue  # gone since it was listed
        found.append((prefix + de.name, entry_kind, st))
        if len(found) > max_results:
            del found[max_results:]
            return found, True
    return found, False


def open_file(dir_fd: int, name: str) -> tuple[int, os.stat_result] | None:
    """Open the file `name` listed in `dir_fd` for reading, or None if it is no longer a regular file.

    Relative to the directory's handle with O_NOFOLLOW: a file swapped for a symlink
    since it was listed fails with ELOOP and is skipped; O_NONBLOCK keeps a FIFO
    swapped in from blocking the open, and the `fstat` check refuses it.
    """
    try:
        fd = os.open(name, _FILE_FLAGS, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno in _SKIP_ERRNOS:
            return None
        raise
    try:
        st = os.fstat(fd)
    except BaseException:
        os.close(fd)
        raise
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        return None
    return fd, st


# -- removing -------------------------------------------------------------------------------------




@contextlib.contextmanager
def temp_dir(dirfd: int) -> Iterator[tuple[int, str]]:
    """A new private directory with a temporary name in `dirfd`, and a handle on it, for the block.

    The name is recorded for recovery before the directory exists. The block renames it
    into place; if it is still there when the block ends (an error), it is removed."""
    with contextlib.ExitStack() as records:
        _, name = make_temp(dirfd, records, lambda name: os.mkdir(name, 0o700, dir_fd=dirfd))
        fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dirfd)
        try:
            yield fd, name
        finally:
            made = os.fstat(fd)
            os.close(fd)
            left = lstat_or_none(dirfd, name)
            if left is not None and os.path.samestat(left, made):
                with contextlib.suppress(OSError):
                    remove_tree(dirfd, name)


# -- copying --------------------------------------------------------------------------------------


class Skip(StrEnum):
    """Why an entry of a folder was not copied (tools/messages.py words it)."""

    LINK_LEADS_OUT = "link_leads_out"
    SPECIAL = "special"  # a fifo, socket or device: its `type` goes with it
    REMOVED = "removed"
    CHANGED = "changed"


@dataclass
class CopyStats:
    files: int = 0
    dirs: int = 0
    bytes: int = 0
    skipped: list[tuple[str, Skip, str]] = field(default_factory=list)  # (relative path, why, the entry's type)


def copy_tree(src: int, dst: int, stats: CopyStats, *, check: Callable[[str], None],
              link_ok: Callable[[str, str], bool]) -> None:
    """Copy the contents of directory `src` into the empty directory `dst`, by descriptor.

    Nothing is dereferenced: a symlink is recreated (its text, not its target's content)
    only when `link_ok(relative path, link text)` says so, else skipped and reported, as
    are FIFOs, sockets and devices. `check(relative path)` may veto an entry by raising.
    An OS error on an entry raises `TreeError`; a tree too deep, `TooDeep`.
    """
    # The destination directory of each level being copied, with its source's mode (applied once it is full).
    made: list[tuple[int, int]] = [(dst, -1)]
    try:
        for entry in walk(src, strict=True):
            checkpoint()
            while len(made) > entry.depth:
                _finish(made.pop(), stats)
            parent = made[-1][0]
            rel = entry.path
            try:
                st = entry.lstat()
                check(rel)
                if entry.kind == DIRECTORY:
                    if entry.missed is not None:
                        stats.skipped.append((rel, Skip.REMOVED if entry.missed == "removed" else Skip.CHANGED, ""))
                        continue
                    os.mkdir(entry.name, 0o700, dir_fd=parent)
                    made.append((os.open(entry.name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC,
                                         dir_fd=parent), stat.S_IMODE(st.st_mode) & 0o777))
                elif stat.S_ISREG(st.st_mode):
                    _copy_regular(entry, parent, st, stats)
                elif stat.S_ISLNK(st.st_mode):
                    text = os.readlink(entry.name, dir_fd=entry.dir_fd)
                    if link_ok(rel, text):
                        os.symlink(text, entry.name, dir_fd=parent)
                    else:
                        stats.skipped.append((rel, Skip.LINK_LEADS_OUT, "symlink"))
                else:
                    stats.skipped.append((rel, Skip.SPECIAL, file_type(st.st_mode)))
            except FileNotFoundError:
                stats.skipped.append((rel, Skip.REMOVED, ""))
            except OSError as exc:
                raise TreeError(rel, exc) from None
        while len(made) > 1:
            _finish(made.pop(), stats)
    finally:
        for fd, _ in made[1:]:
            os.close(fd)


def _finish(level: tuple[int, int], stats: CopyStats) -> None:
    """A copied directory is full: give it its source's mode (it was made private while being filled)."""
    fd, mode = level
    try:
        os.fchmod(fd, mode)
    finally:
        os.close(fd)
    stats.dirs += 1


def _copy_regular(entry: Entry, dst: int, st: os.stat_result, stats: CopyStats) -> None:
    sfd = os.open(entry.name, _FILE_FLAGS, dir_fd=entry.dir_fd)
    try:
        if not os.path.samestat(os.fstat(sfd), st):
            stats.skipped.append((entry.path, Skip.CHANGED, ""))
            return
        dfd = os.open(entry.name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600,
                      dir_fd=dst)
        try:
            stats.bytes += copy_fd(sfd, dfd)
            os.fchmod(dfd, stat.S_IMODE(st.st_mode) & 0o777)
        finally:
            os.close(dfd)
        stats.files += 1
        recovery.kill_point("copied-file")
    finally:
        os.close(sfd)
