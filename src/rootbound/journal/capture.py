"""Reading the state of a path through the directory handle the caller holds, and storing its content.

Nothing here opens a host path: every entry is reached as (directory descriptor, single name) with
O_NOFOLLOW, and folders are walked descriptor by descriptor, symlinks listed, never entered.

`Idents` remembers, per process, the sha256 of files the journal has seen by their identity (device,
inode, size, mtime and ctime, which any change of the content moves). A file this server wrote a moment
ago is then neither read nor hashed again when the next change replaces it, and since it was fsynced
by the write that made it, linking it needs nothing more. Any other file that is linked has its data
written out first (`Blobs.settle_data`), so its content is durable no later than the change.
"""

from __future__ import annotations

import contextlib
import os
import stat
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Final

from rootbound.errors import ToolError
from rootbound.fs.bounds import checkpoint
from rootbound.fs.content import digest
from rootbound.fs.handles import lstat_or_none
from rootbound.journal.model import ABSENT, State, fingerprint, link_digest
from rootbound.journal.store import Store

__all__ = ["Capturer", "Idents", "digest_now", "walk"]

_DIR: Final = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_READ: Final = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_MAX_DEPTH: Final = 256
_IDENTS_MAX: Final = 4096


@dataclass(frozen=True)
class _Known:
    key: tuple[int, int, int, int]  # size, mtime_ns, ctime_ns, mode
    sha256: str
    synced: bool


class Idents:
    """sha256 of files by identity, for this process (bounded; see the module docstring)."""

    def __init__(self) -> None:
        self._known: dict[tuple[int, int], _Known] = {}
        self._lock = threading.Lock()

    @staticmethod
    def _key(st: os.stat_result) -> tuple[int, int, int, int]:
        return st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_mode

    def get(self, st: os.stat_result) -> _Known | None:
        known = self._known.get((st.st_dev, st.st_ino))
        return known if known is not None and known.key == self._key(st) else None

    def put(self, st: os.stat_result, sha256: str, synced: bool = False) -> None:
        with self._lock:
            if len(self._known) >= _IDENTS_MAX:
                self._known.clear()
            self._known[(st.st_dev, st.st_ino)] = _Known(self._key(st), sha256, synced)


def _special(mode: int) -> str:
    return "fifo" if stat.S_ISFIFO(mode) else "socket" if stat.S_ISSOCK(mode) else "device"


def walk(dirfd: int, name: str) -> Iterator[tuple[int, str, str, os.stat_result]]:
    """Every entry below directory `name` as (its directory's descriptor, its name, path relative to the
    folder, lstat), sorted by name at each level, depth first. Symlinks are listed, never entered."""
    top = os.open(name, _DIR, dir_fd=dirfd)
    stack: list[tuple[int, str, Iterator[os.DirEntry[str]]]] = []
    try:
        with os.scandir(top) as it:
            stack.append((top, "", iter(sorted(it, key=lambda e: e.name))))
        while stack:
            fd, prefix, entries = stack[-1]
            for de in entries:
                checkpoint()
                rel = prefix + de.name
                try:
                    st = de.stat(follow_symlinks=False)
                except FileNotFoundError:
                    continue
                yield fd, de.name, rel, st
                if stat.S_ISDIR(st.st_mode):
                    if len(stack) >= _MAX_DEPTH:
                        raise ToolError(f"folder too deep to journal: more than {_MAX_DEPTH} levels")
                    try:
                        sub = os.open(de.name, _DIR, dir_fd=fd)
                    except (FileNotFoundError, NotADirectoryError):
                        continue
                    stack.append((sub, rel + "/", iter(())))  # stacked first: closed by `finally` if listing fails
                    with os.scandir(sub) as it:
                        stack[-1] = (sub, rel + "/", iter(sorted(it, key=lambda e: e.name)))
                    break
            else:
                stack.pop()
                os.close(fd)
    finally:
        for fd, _, _ in stack:
            os.close(fd)


def _listing_item(dirfd: int, name: str, rel: str, st: os.stat_result) -> dict[str, Any]:
    """An entry of a folder as the fingerprint sees it (no content)."""
    mode = st.st_mode
    if stat.S_ISREG(mode):
        return {"rel": rel, "kind": "file", "mode": stat.S_IMODE(mode), "size": st.st_size,
                "mtime_ns": st.st_mtime_ns}
    if stat.S_ISDIR(mode):
        return {"rel": rel, "kind": "dir", "mode": stat.S_IMODE(mode)}
    if stat.S_ISLNK(mode):
        try:
            text = os.readlink(name, dir_fd=dirfd)
        except OSError:
            text = ""
        return {"rel": rel, "kind": "symlink", "text": text}
    return {"rel": rel, "kind": "special", "type": _special(mode)}


def tree_fingerprint(dirfd: int, name: str, st: os.stat_result) -> str:
    items = [_listing_item(fd, n, rel, est) for fd, n, rel, est in walk(dirfd, name)]
    return fingerprint(items, stat.S_IMODE(st.st_mode))


def digest_now(dirfd: int, name: str, idents: Idents | None = None) -> str:
    """The digest of what stands at `name` in `dirfd` now (see model.py)."""
    st = lstat_or_none(dirfd, name)
    if st is None:
        return "absent"
    if stat.S_ISLNK(st.st_mode):
        return link_digest(os.readlink(name, dir_fd=dirfd))
    if stat.S_ISDIR(st.st_mode):
        return "tree:" + tree_fingerprint(dirfd, name, st)
    if not stat.S_ISREG(st.st_mode):
        return "special"
    fd = os.open(name, _READ, dir_fd=dirfd)
    try:
        st = os.fstat(fd)
        known = idents.get(st) if idents is not None else None
        if known is not None:
            return f"file:{known.sha256}"
        sha = digest(fd)[0]
        if idents is not None:
            idents.put(st, sha)
        return f"file:{sha}"
    finally:
        os.close(fd)


@dataclass
class Capturer:
    """Captures before-states into one store, collecting what the entry must record about blobs."""

    store: Store
    max_file_size: int
    max_bytes: int
    idents: Idents
    rows: list[tuple[str, int, int, str]] = field(default_factory=list)  # new blobs: hash, size, stored, codec
    refs: set[str] = field(default_factory=set)  # blobs the entry needs
    unsynced: bool = False  # a blob name that only an fsync of the blob directory makes durable

    def at(self, dirfd: int, name: str) -> State:
        """The state of whatever stands at `name` in `dirfd`, its content stored."""
        st = lstat_or_none(dirfd, name)
        if st is None:
            return dict(ABSENT)
        if stat.S_ISLNK(st.st_mode):
            return {"kind": "symlink", "text": os.readlink(name, dir_fd=dirfd)}
        if stat.S_ISDIR(st.st_mode):
            return self.tree(dirfd, name, st)
        if not stat.S_ISREG(st.st_mode):
            return {"kind": "special", "type": _special(st.st_mode)}
        fd = os.open(name, _READ, dir_fd=dirfd)
        try:
            return self.file(fd, os.fstat(fd))
        finally:
            os.close(fd)

    def file(self, fd: int, st: os.stat_result, *, keep: bool = True) -> State:
        state: State = {"kind": "file", "size": st.st_size, "mode": stat.S_IMODE(st.st_mode),
                        "mtime_ns": st.st_mtime_ns}
        known = self.idents.get(st)
        if not keep or st.st_size > self.max_file_size:
            state.update(sha256=known.sha256 if known else digest(fd)[0], kept=False)
            return state
        blobs = self.store.blobs
        sha = known.sha256 if known is not None else None
        if sha is None or not blobs.has(sha):
            if sha is None:
                sha = digest(fd)[0]
                self.idents.put(st, sha)
            if blobs.has(sha):
                pass
            elif blobs.link(fd, st, sha):
                if known is None or not known.synced:
                    blobs.settle_data(fd)  # written by someone else: its content on disk before the change
                self.rows.append((sha, st.st_size, st.st_blocks * 512, "link"))
                self.unsynced = self.unsynced or not blobs.ordered
            else:
                copied, stored = blobs.copy(fd)
                if copied != sha:  # changed while we read it: record what we stored
                    sha = copied
                self.rows.append((sha, st.st_size, stored, "zlib"))
                self.unsynced = True
        state.update(sha256=sha, kept=True)
        self.refs.add(sha)
        return state

    def tree(self, dirfd: int, name: str, st: os.stat_result) -> State:
        items: list[dict[str, Any]] = []
        total, kept = 0, True
        for fd, entry, rel, est in walk(dirfd, name):
            item = _listing_item(fd, entry, rel, est)
            if item["kind"] == "file":
                total += est.st_size
                kept = kept and total <= self.max_bytes  # past the whole journal's size: listed, not kept
                with contextlib.suppress(FileNotFoundError):
                    ffd = os.open(entry, _READ, dir_fd=fd)
                    try:
                        fst = os.fstat(ffd)
                        if os.path.samestat(fst, est):
                            got = self.file(ffd, fst, keep=kept)
                            item.update(sha256=got["sha256"], kept=got["kept"])
                    finally:
                        os.close(ffd)
                item.setdefault("kept", False)
            items.append(item)
        mode = stat.S_IMODE(st.st_mode)
        return {"kind": "tree", "mode": mode, "items": items, "fingerprint": fingerprint(items, mode), "kept": kept}
