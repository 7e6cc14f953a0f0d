"""`Root`: the capability object, and the only door to the files beneath it (the model is Go's `os.Root`).

A `Root` holds an open directory handle, privately. Its methods take root-relative paths
from the agent and resolve them beneath that handle (`beneath.py`), so there is no window
between checking a path and using it, and no host path reaches a tool:

* `open(path, kinds)` — what a path leads to, opened for reading when it is one of `kinds`
  (a file, a directory); anything else is refused without being opened;
* `stat`, `lstat`, `link_target`, `is_root`, `read_folder` — looking;
* `target(path, guard)` — the entry a change acts on (Go's `doInRoot`): the directory that
  holds it and its name there, checked against the protected paths and git's repositories,
  held open for a block in which `Target`'s methods make the change with `*at` calls;
* `mkdir`, `remove`, `remove_tree`, `rename`, `copy` — each a few lines over `target`;
* `open_root(path)` — a root beneath this one (a client root);
* `handle()` — the descriptor itself, for the sandbox, which binds it by number.

Failures are `PathError`s: data (the operation, the agent's path, a `Kind`), worded at the
tool edge. A root whose directory was removed or replaced is refused (`check_available`),
or reopened at its configured path when one opened from a host path finds a directory there
again.
"""

from __future__ import annotations

import bisect
import contextlib
import errno
import hashlib
import os
import stat
import threading
from collections.abc import Callable, Iterable, Iterator

from rootbound.catalogue import FILE_TOOLS
from rootbound.errors import Failure, Kind, PathError
from rootbound.fs import atomic, journaling, onloop, transfer, trees
from rootbound.fs.beneath import DIRECTORY, EscapeError, locate, locate_making, open_beneath, undo_dirs
from rootbound.fs.bounds import checkpoint
from rootbound.fs.content import digest, read_all, write_all
from rootbound.fs.files import File, Kinds
from rootbound.fs.guards import Guard, Site
from rootbound.fs.handles import fd_path, lstat_or_none, real_relpath
from rootbound.fs.paths import file_type, split_path
from rootbound.logs import log

__all__ = ["Root", "Target", "host_directory", "path_error"]

_READ = os.O_RDONLY | os.O_NONBLOCK  # NONBLOCK: opening a FIFO must not hang the server
_ENTRY = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC  # an entry itself, never through a link


def host_directory(path: str) -> str | None:
    """The canonical form (symlinks resolved) of a host path that names a directory; None if it names none.

    For the host paths an operator or a client gives (config roots, client roots), never an agent's path."""
    real = os.path.realpath(path)
    return real if os.path.isdir(real) else None


def path_error(op: str, path: str, exc: OSError) -> PathError:
    """What an OS error met while resolving or acting on `path` means for the agent."""
    if isinstance(exc, EscapeError) or exc.errno == errno.EXDEV:
        return PathError(op, path, Kind.ESCAPE)
    kind = _ERRNO_KINDS.get(exc.errno or 0)
    if kind is None:
        return PathError(op, path, Kind.OS_ERROR, reason=exc.strerror or "error")
    return PathError(op, path, kind)


_ERRNO_KINDS = {errno.ENOENT: Kind.NOT_FOUND, errno.ENOTDIR: Kind.THROUGH_FILE, errno.ELOOP: Kind.LOOP,
                errno.EACCES: Kind.ACCESS, errno.EPERM: Kind.ACCESS, errno.ENAMETOOLONG: Kind.NAME_TOO_LONG,
                errno.ENXIO: Kind.UNOPENABLE}
_reopen_lock = threading.Lock()
_IFMT = 0o170000
Listed = tuple[str, os.stat_result, os.stat_result | None]  # a folder's entry: name, lstat, where a symlink leads


def _identity(fd: int) -> tuple[int, int] | None:
    """The (st_dev, st_ino) of the directory `fd` holds; None if the filesystem does not answer."""
    try:
        st = os.fstat(fd)
    except OSError:
        return None
    return st.st_dev, st.st_ino


class Root:
    """A named directory the agent may reach, and which tools it may use there."""

    def __init__(self, name: str, real_path: str, allowed_tools: Iterable[str], fd: int, *,
                 reopens: bool = False, spelling: str | None = None) -> None:
        tools = set(allowed_tools)
        self.name = name
        self.real_path = real_path  # for the operator's eyes (check, logs at debug); never put in a result
        # The host spellings of this root an agent's absolute path may start with (`host_relative`): its real
        # path, and the path the operator configured when that differs (a symlink, `..`).
        self._prefixes = [_components(real_path)]
        if spelling is not None and _components(spelling) not in self._prefixes:
            self._prefixes.append(_components(spelling))
        # "*": every file tool; the journal's tools (history, undo) only when named.
        self.allowed_tools = frozenset(FILE_TOOLS) | (tools - {"*"}) if "*" in tools else frozenset(tools)
        self._fd = fd
        self._identity = _identity(fd)  # the handle's directory: set here and by `_reopen` only, with the handle
        self.local = onloop.local_filesystem(fd)  # quick looks may run on the event loop (fs/onloop.py)
        # Reopened at `real_path` when its directory was removed or replaced and a directory is there again:
        # true for roots opened from a host path (`at`); a client root opened beneath an operator root, or the
        # server's own spill directory, is not.
        self.reopens = reopens

    def __repr__(self) -> str:
        return f"Root({self.name!r}, {self.real_path!r})"

    @classmethod
    def at(cls, name: str, path: str, allowed_tools: Iterable[str]) -> Root:
        """Open the directory at host `path` as root `name`; the handle is held until `close`."""
        real = os.path.realpath(path)
        fd = os.open(real, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        return cls(name, real, allowed_tools, fd, reopens=cls is Root, spelling=os.path.abspath(path))

    def open_root(self, name: str, path: str, allowed_tools: Iterable[str]) -> Root:
        """The directory `path` leads to beneath this root, as a root of its own (Go's `OpenRoot`)."""
        parts = split_path(path)
        try:
            fd = open_beneath(self._fd, parts, DIRECTORY)
        except OSError as exc:
            raise path_error("open_root", path, exc) from None
        where = fd_path(fd) or os.path.join(self.real_path, *parts)
        return Root(name, where, allowed_tools, fd)

    def handle(self) -> int:
        """The root's directory descriptor, borrowed (it stays the root's): for the sandbox, which hands it to
        bubblewrap and Landlock by number, and for the start-up recovery. Nothing opens paths through it."""
        return self._fd

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self._fd)

    # -- a directory removed or replaced under us -------------------------------------------------

    def _stale(self) -> bool:
        """Removed (no links left) or replaced (its path names another inode). A directory renamed away
        with nothing at its old path stays served through its handle. A handle the filesystem no longer answers
        for (ENOTCONN from a FUSE daemon that died, EIO) is as good as gone: it broke every command, of every root.

        Asked before every call: one `stat` of the path when it still names the handle's directory (a directory
        with a name was not removed, and while the handle holds it no other can have its inode number)."""
        try:
            now: os.stat_result | None = os.stat(self.real_path)
        except OSError:
            now = None
        if now is not None and (now.st_dev, now.st_ino) == self._identity:
            return False
        try:
            st = os.fstat(self._fd)
        except OSError:
            return True
        if st.st_nlink == 0:
            return True
        return now is not None and (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino)

    def _reopen(self) -> bool:
        """Open the directory now at `real_path` onto this root's descriptor number (dup2: atomic, so a call
        using the old handle meanwhile sees one or the other, never a closed or reused number). The path is
        walked from `/` without following any symlink: start-up resolved it to a path without any."""
        parts = [p for p in self.real_path.split("/") if p]
        fd = os.open("/", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            for part in parts:
                nfd = os.open(part, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
                os.close(fd)
                fd = nfd
            new = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=fd)
        except OSError:
            return False
        finally:
            os.close(fd)
        identity = _identity(new)
        os.dup2(new, self._fd, inheritable=False)
        self._identity = identity
        os.close(new)
        self.local = onloop.local_filesystem(self._fd)
        log.warning("root reopened: its directory had been removed or replaced", extra={"root": self.name})
        return True

    def available(self) -> bool:
        """False when the root's directory is gone and cannot be reopened (`check_available` says why)."""
        if not self._stale():
            return True
        with _reopen_lock:
            return not self._stale() or (self.reopens and self._reopen())

    def check_available(self) -> None:
        """Refuse to serve a root whose directory was removed or replaced (and is not back)."""
        self._on_loop_here()  # its stat could wait on a remote filesystem: not on the event loop
        if not self.available():
            raise Failure(Kind.ROOT_GONE if self.reopens else Kind.ROOT_GONE_FOR_GOOD, root=self.name)

    def check_tool(self, tool: str) -> None:
        if tool not in self.allowed_tools:
            raise Failure(Kind.TOOL_NOT_ALLOWED, tool=tool, root=self.name)

    def host_relative(self, path: str) -> str | None:
        """`path` relative to this root when it is an absolute host path inside it (one a command printed),
        else None (and a leading `/` keeps meaning the root's own top).

        Only the spelling is matched, component by component (`/x/ws-evil` is not inside `/x/ws`), against the
        root's real path or its configured spelling: what follows is resolved beneath the handle like any
        path, so `..` or a symlink cannot lead out, and nothing outside the root becomes reachable."""
        if not path.startswith("/"):
            return None
        given = [p for p in path.split("/") if p not in ("", ".")]
        for prefix in self._prefixes:
            # A root served at / has nothing to strip (a leading / means the same either way), and must not claim
            # every absolute path another root's agent meant root-relative.
            if prefix and given[:len(prefix)] == prefix:
                return "/".join(given[len(prefix):])
        return None

    # -- looking ----------------------------------------------------------------------------------

    def _on_loop_here(self) -> None:
        """On the event loop, only a local filesystem is looked at (fs/onloop.py)."""
        if not self.local and onloop.active():
            raise onloop.Offload

    def _resolve(self, op: str, path: str, parts: list[str], flags: int, *, follow: bool = True) -> int:
        self._on_loop_here()
        try:
            return open_beneath(self._fd, parts, flags, follow=follow)
        except OSError as exc:
            if isinstance(exc, BlockingIOError) and onloop.active():  # a leased file: a worker may wait (see `open`)
                raise onloop.Offload from None
            raise path_error(op, path, exc) from None

    def open(self, path: str, kinds: Kinds = Kinds.FILE) -> File:
        """Open what `path` leads to, through in-root symlinks, when it is one of `kinds`: a regular file or a
        directory for reading; anything else (with `Kinds.OTHER`) as an O_PATH handle, which cannot read.

        It is first opened with O_PATH (no read access, so opening a device has no side effect and a FIFO
        cannot block), checked with fstat, and only then reopened for reading through that descriptor, so the
        file checked is the file read. Anything not in `kinds` is refused without being opened.
        """
        parts = split_path(path)
        probe = self._resolve("open", path, parts, os.O_PATH)
        try:
            st = os.fstat(probe)
            kind = Kinds.DIRECTORY if stat.S_ISDIR(st.st_mode) else Kinds.FILE if stat.S_ISREG(st.st_mode) \
                else Kinds.OTHER
            if kind not in kinds:
                raise PathError("open", path, _refusal(kinds, kind), type=file_type(st.st_mode))
            if kind is Kinds.OTHER:
                opened, probe = File(probe, st), -1
                return opened
            on_loop = onloop.active()
            if kind is Kinds.FILE:
                onloop.check_size(st.st_size)
            try:  # the inode the probe holds, not the path again
                # On the event loop the open must not wait: a file another process holds a lease on makes it wait
                # for the holder (up to /proc/sys/fs/lease-break-time, 45 s), which a worker may, the loop not.
                fd = os.open(f"/proc/self/fd/{probe}", os.O_RDONLY | os.O_CLOEXEC | (os.O_NONBLOCK if on_loop else 0))
            except BlockingIOError as exc:
                if on_loop:
                    raise onloop.Offload from None
                raise path_error("open", path, exc) from None
            except FileNotFoundError:  # no /proc (some containers): a non-blocking open is the next best
                fd = self._resolve("open", path, parts, _READ)
                os.set_blocking(fd, True)
                if not os.path.samestat(os.fstat(fd), st):
                    os.close(fd)
                    raise PathError("open", path, Kind.FILE_CHANGED if kinds == Kinds.FILE else Kind.CHANGED) from None
            except OSError as exc:
                raise path_error("open", path, exc) from None
            return File(fd, st)
        finally:
            if probe >= 0:
                os.close(probe)

    def _stat(self, parts: list[str], *, follow: bool = True) -> os.stat_result:
        self._on_loop_here()
        fd = open_beneath(self._fd, parts, os.O_PATH, follow=follow)
        try:
            return os.fstat(fd)
        finally:
            os.close(fd)

    def stat(self, path: str) -> os.stat_result:
        """Stat what `path` leads to, following in-root symlinks (an outside target is an escape)."""
        try:
            return self._stat(split_path(path))
        except OSError as exc:
            raise path_error("stat", path, exc) from None

    def lstat(self, path: str) -> os.stat_result:
        """Stat `path` without following a final symlink."""
        parts = split_path(path)
        if onloop.active():  # the entry itself, opened with NO_XDEV: a mount point there is not entered
            try:
                return self._stat(parts, follow=False)
            except OSError as exc:
                raise path_error("lstat", path, exc) from None
        try:
            fd, _, _, st = locate(self._fd, parts, follow=False)
        except OSError as exc:
            raise path_error("lstat", path, exc) from None
        os.close(fd)
        if st is None:
            raise PathError("lstat", path, Kind.NOT_FOUND)
        return st

    def _stat_or_none(self, parts: list[str]) -> os.stat_result | None:
        try:
            return self._stat(parts)
        except OSError:
            return None

    def link_target(self, path: str) -> os.stat_result | None:
        """Stat where the symlink at `path` leads; None when outside the root, dangling or a loop."""
        return self._stat_or_none(split_path(path))

    def is_root(self, path: str) -> bool:
        """True when `path` resolves to the root directory itself (any spelling: "", ".", "/", "a/..")."""
        parts = split_path(path)
        if not parts:
            return True
        if parts[-1] != "..":
            return False
        st = self._stat_or_none(parts)
        return st is not None and os.path.samestat(st, os.fstat(self._fd))

    def read_folder(self, path: str, start: int, stop: int) -> tuple[int, list[Listed]]:
        """The folder at `path`: how many entries it has, and those from `start` to `stop` in name order,
        each `(name, lstat, where a symlink leads or None)`. The server's temporary entries are not listed."""
        parts = split_path(path)
        with self.open(path, Kinds.DIRECTORY) as folder:
            # All the names, to sort and count them; only the page's entries are stat'ed (a 100k-entry folder
            # took 79 s and 28 MB when every entry was).
            names = os.listdir(folder.fd)  # one C call: a loop per name cost 10,000 entries 7 ms more
            checkpoint()
            names.sort()
            # Our temporary entries (a write in progress, or one a kill left: removed at the next start) sort
            # together: found by bisection, not by a test per name.
            at = bisect.bisect_left(names, atomic.TEMP_PREFIX)
            while at < len(names) and names[at].startswith(atomic.TEMP_PREFIX):
                if atomic.is_temp_name(names[at]):
                    del names[at]
                else:
                    at += 1
            page: list[Listed] = []
            add = page.append  # (the loop runs once per entry of a page of up to 100,000: kept lean)
            for name in names[start:stop]:
                try:
                    st = os.stat(name, dir_fd=folder.fd, follow_symlinks=False)
                except FileNotFoundError:
                    continue  # removed while we listed
                add((name, st, self._stat_or_none([*parts, name]) if st.st_mode & _IFMT == stat.S_IFLNK else None))
        return len(names), page

    # -- changing ---------------------------------------------------------------------------------

    def site(self) -> Site:
        """This root as the protected-path rules see it (its host path now: it may have been renamed)."""
        return Site(self.name, [p for p in (fd_path(self._fd) or self.real_path).split("/") if p])

    @contextlib.contextmanager
    def target(self, path: str, guard: Guard, *, follow: bool = True, make_parents: bool = False,
               op: str = "target") -> Iterator[Target]:
        """The entry `path` names, for a change made in the block (Go's doInRoot, held open).

        With `follow`, a final symlink is followed while it stays beneath the root; otherwise the link
        itself is the target. `make_parents` creates missing parent directories; if the block then
        fails, they are removed again, so an error changes nothing. `guard` refuses protected paths and
        git's repositories, by the spelling given and by where the path really leads. OS errors in the
        block become `PathError`s for `path`.
        """
        if onloop.active():  # changes never run on the event loop (fs/onloop.py)
            raise onloop.Offload
        parts = split_path(path)
        guard.check("/".join(parts), path)
        made: list[list[str]] = []
        try:
            dirfd, name, where, st = locate_making(self._fd, parts, follow=follow, made=made) if make_parents \
                else locate(self._fd, parts, follow=follow)
        except OSError as exc:
            raise path_error(op, path, exc) from None
        target = Target(self, path, dirfd, name, where, st, bool(made), self._made_rels(made))
        ok = False
        try:
            with contextlib.ExitStack() as held:
                guard.check_target(self.site(), parts, target.real, path)
                guard.check_shape(dirfd, name, bool(made), path, held)
                yield target
                ok = True
        except OSError as exc:
            raise path_error(op, path, exc) from None
        finally:
            if not ok:
                undo_dirs(self._fd, made)
            os.close(dirfd)

    def _made_rels(self, made: list[list[str]]) -> tuple[str, ...]:
        """The folders `make_dirs` made, innermost first, as the journal records paths (where each really is)."""
        rels = []
        for prefix in reversed(made):
            try:
                fd = open_beneath(self._fd, prefix, DIRECTORY)
            except OSError:
                continue  # gone already: nothing for an undo to remove
            try:
                real = self.where(fd)
            finally:
                os.close(fd)
            rels.append("/".join(real if real is not None else prefix))
        return tuple(rels)

    def mkdir(self, path: str, guard: Guard) -> bool:
        """Make the directory `path` with any missing parents (mkdir -p); False when it was already there."""
        with self.target(path, guard, make_parents=True, op="mkdir") as target:
            return target.mkdir()

    def remove(self, path: str, guard: Guard) -> None:
        """Remove the file (or symlink: the link itself, never its target) at `path`."""
        if self.is_root(path):
            raise PathError("remove", path, Kind.IS_ROOT)
        with self.target(path, guard, follow=False, op="remove") as target:
            target.remove()

    def remove_tree(self, path: str, guard: Guard) -> int:
        """Remove the folder at `path` and everything in it; return how many entries were inside.

        Looked through first: a protected path inside refuses the whole removal (a repository the folder
        holds goes with it: removing a project is not changing its repository's internals)."""
        if self.is_root(path):
            raise PathError("remove_tree", path, Kind.IS_ROOT)
        with self.target(path, guard, follow=False, op="remove_tree") as target:
            return target.remove_tree(guard, path)

    def rename(self, path: str, dst_root: Root, dst: str, guard: Guard) -> transfer.Moved:
        """Move the entry at `path` (a symlink moves as a link) to `dst` in `dst_root` (this root or another)."""
        return transfer.move(self, path, dst_root, dst, guard)

    def copy(self, path: str, dst_root: Root, dst: str, guard: Guard) -> transfer.Copied:
        """Copy the file or folder `path` leads to, to `dst` in `dst_root` (this root or another)."""
        return transfer.copy(self, path, dst_root, dst, guard)

    def where(self, fd: int) -> list[str] | None:
        """Where the directory `fd` (opened beneath this root) really is, as root-relative components."""
        return real_relpath(fd, self._fd)


def _components(host_path: str) -> list[str]:
    return [p for p in host_path.split("/") if p not in ("", ".")]


def _refusal(kinds: Kinds, kind: Kinds) -> Kind:
    if kinds == Kinds.DIRECTORY:
        return Kind.NOT_DIR
    return Kind.IS_DIR if kind is Kinds.DIRECTORY else Kind.NOT_REGULAR


class Target:
    """The entry a change acts on: a handle on the directory holding it, and its name there.

    The name is "." when the path names a directory itself (the root, or a path ending in
    `..`): the handle is then that directory. `st` is the entry's lstat when it was resolved
    (None: it does not exist); `real` is where it really is, root-relative (None if unknown).
    Valid only inside `Root.target`'s block; every method works on the name with `*at` calls.
    """

    def __init__(self, root: Root, path: str, dirfd: int, name: str, parts: list[str], st: os.stat_result | None,
                 made_dirs: bool, made: tuple[str, ...] = ()) -> None:
        self.root = root
        self.path = path
        self.dirfd = dirfd
        self.name = name
        self.parts = parts
        self.st = st
        self.made_dirs = made_dirs
        self.made = made  # the parent folders made for this entry (root-relative, innermost first)
        real = root.where(dirfd)
        self.real = real if real is None or name == "." else [*real, name]

    @property
    def is_self(self) -> bool:
        """The path names a directory itself (the root, or a path ending in `..`), not an entry in one."""
        return self.name == "."

    @property
    def is_dir(self) -> bool:
        return self.st is not None and stat.S_ISDIR(self.st.st_mode)

    @property
    def rel(self) -> str:
        """The entry's root-relative path as the journal records it: where it really is, when known."""
        return "/".join(self.real) if self.real is not None else "/".join(self.parts)

    def lstat(self) -> os.stat_result | None:
        """The entry's status now (None: gone)."""
        return self.st if self.is_self else lstat_or_none(self.dirfd, self.name)

    def locked(self) -> contextlib.AbstractContextManager[None]:
        """Serialise this server's read-modify-writes of the entry (patch, expected_sha256, append)."""
        return atomic.target_lock(self.dirfd, self.name)

    def regular(self) -> os.stat_result | None:
        """The entry's status now if it is a regular file, None if absent; anything else is refused."""
        st = self.lstat()
        if st is None:
            return None
        if stat.S_ISDIR(st.st_mode):
            raise PathError("write", self.path, Kind.IS_DIR)
        if stat.S_ISLNK(st.st_mode):
            raise PathError("write", self.path, Kind.SWAPPED_FOR_SYMLINK)
        if not stat.S_ISREG(st.st_mode):
            raise PathError("write", self.path, Kind.NOT_REGULAR, type=file_type(st.st_mode))
        return st

    def _open(self) -> int:
        return os.open(self.name, _ENTRY, dir_fd=self.dirfd)

    def read(self, limit: int) -> tuple[bytes, os.stat_result]:
        """The whole content of the regular file here (at most `limit` bytes), and its status."""
        fd = self._open()
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise PathError("read", self.path, Kind.NOT_REGULAR, type=file_type(st.st_mode))
            if st.st_size > limit:
                raise PathError("read", self.path, Kind.TOO_LARGE_TO_PATCH, size=st.st_size, limit=limit)
            return read_all(fd), st
        finally:
            os.close(fd)

    def sha256(self) -> str:
        fd = self._open()
        try:
            return digest(fd)[0]
        finally:
            os.close(fd)

    def unchanged_since(self, before: os.stat_result | None) -> None:
        """Raise if the entry was created, replaced or modified since `before` (by someone outside this server)."""
        now = lstat_or_none(self.dirfd, self.name)
        same = (now is None and before is None) or (
            now is not None and before is not None and (now.st_ino, now.st_size, now.st_mtime_ns)
            == (before.st_ino, before.st_size, before.st_mtime_ns))
        if not same:
            raise PathError("write", self.path, Kind.CHANGED_MEANWHILE)

    def write_atomic(self, data: bytes | Callable[[int], int], *, like: os.stat_result | None, replace: bool = True,
                     new_mode: int = atomic.NEW_FILE_MODE, before_commit: Callable[[], None] | None = None,
                     op: str = "write", digest: str | None = None) -> int:
        """Put `data` (or what the function writes to the new file) here, atomically; return its size.

        The file keeps the mode and owner of the one it replaces (`like`), else gets `new_mode`.
        `replace=False` fails (EXISTS) if the name exists meanwhile; `before_commit` may still refuse.
        `digest`: the sha256 of `data` when the caller has it (the journal records it; else it is computed)."""
        fill = data if callable(data) else (lambda fd: write_all(fd, data))
        perms = stat.S_IMODE(like.st_mode) if like is not None else new_mode
        with journaling.recording(self.root) as rec:
            rel = self.rel
            rec.before_file(self.dirfd, self.name, rel)
            rec.made_folders(self.made)

            def ready() -> None:  # the caller's last look first: a refused write leaves no entry
                if before_commit is not None:
                    before_commit()
                rec.ready()

            try:
                size = atomic.write_file(self.dirfd, self.name, fill, replace=replace, perms=perms,
                                         owner=atomic.keep_owner(like),
                                         before_commit=ready if rec.on else before_commit, replacing=like is not None)
            except FileExistsError:  # created by another writer between our look and the link
                raise PathError(op, self.path, Kind.EXISTS) from None
            rec.commit({rel: digest or hashlib.sha256(data).hexdigest()} if rec.on and not callable(data) else None)
        return size

    def append(self, data: bytes) -> bool:
        """Append `data` to the file here, creating it if missing; True if it was created."""
        with journaling.recording(self.root) as rec:
            rec.before_file(self.dirfd, self.name, self.rel)  # an append changes the whole file, for an undo
            rec.made_folders(self.made)
            rec.ready()
            created = atomic.append(self.dirfd, self.name, data)
            rec.commit()
        return created

    def mkdir(self) -> bool:
        """Make a directory here; False when one is already there (anything else in the way is refused)."""
        st = self.st
        if st is None:
            try:
                with journaling.recording(self.root) as rec:
                    rec.before_absent(self.rel, dirfd=self.dirfd, name=self.name)
                    rec.made_folders(self.made)
                    rec.ready()
                    os.mkdir(self.name, 0o777, dir_fd=self.dirfd)
                    rec.commit()
                return True
            except FileExistsError:
                st = lstat_or_none(self.dirfd, self.name)
        if st is not None and not stat.S_ISDIR(st.st_mode):
            raise PathError("mkdir", self.path, Kind.NOT_A_FOLDER, type=file_type(st.st_mode))
        return False

    def remove(self) -> None:
        """Remove the file or link here."""
        if self.st is None:
            raise PathError("remove", self.path, Kind.NOT_FOUND)
        if stat.S_ISDIR(self.st.st_mode):
            raise PathError("remove", self.path, Kind.IS_DIR)
        with self.locked(), journaling.recording(self.root) as rec:
            rec.before_file(self.dirfd, self.name, self.rel)  # a symlink is recorded as its text
            rec.ready()
            os.unlink(self.name, dir_fd=self.dirfd)
            rec.commit()

    def folder(self, op: str) -> os.stat_result:
        """The entry must be a folder (not a link to one) that exists: its status."""
        if self.is_self:
            raise PathError(op, self.path, Kind.ENDS_IN_DOTDOT)
        st = self.st
        if st is None:
            raise PathError(op, self.path, Kind.NO_SUCH_FOLDER)
        if stat.S_ISLNK(st.st_mode):
            raise PathError(op, self.path, Kind.FOLDER_IS_SYMLINK)
        if not stat.S_ISDIR(st.st_mode):
            raise PathError(op, self.path, Kind.FOLDER_IS_FILE)
        return st

    def walk(self) -> Iterator[trees.Entry]:
        """Every entry below the folder here (a strict walk: see `trees`); too deep a tree is refused."""
        fd = os.open(self.name, _ENTRY | os.O_DIRECTORY, dir_fd=self.dirfd)
        try:
            yield from trees.walk(fd, strict=True)
        except trees.TooDeep:
            raise PathError("walk", self.path, Kind.TOO_DEEP, name=self.name, levels=trees.MAX_DEPTH) from None
        except trees.TreeError as exc:
            raise exc.exc from None  # about the folder as a whole: the caller's path
        finally:
            os.close(fd)

    def remove_tree(self, guard: Guard, shown: str) -> int:
        """Remove the folder here whole, after checking every entry in it against `guard`."""
        self.folder("remove_tree")
        given, count, site = "/".join(split_path(self.path)), 0, self.root.site()
        for entry in self.walk():
            count += 1
            guard.check_inside(site, given, self.real, shown.rstrip("/"), entry.path, carried=True)
        with journaling.recording(self.root) as rec:
            rec.before_tree(self.dirfd, self.name, self.rel)
            rec.ready()
            try:
                trees.remove_tree(self.dirfd, self.name)
            except OSError as exc:
                rec.commit()  # part of it is gone: recorded as what it is now
                where = exc.filename if isinstance(exc.filename, str) else self.name
                raise PathError("remove_tree", self.path, Kind.REMOVED_IN_PART, reason=exc.strerror,
                                where=where) from None
            rec.commit()
        return count
