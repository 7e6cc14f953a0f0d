"""`Root`: the capability object every file operation goes through.

A `Root` holds an open directory handle. Its methods take root-relative paths
from the agent and resolve them *beneath that handle* (see `beneath.py`), so
there is no window between checking a path and using it, and no host path ever
reaches a tool. Tools that need to act on a final name (unlink, rename, mkdir)
get `(parent directory handle, single name)` from `Root.parent` and use the
`*at` system calls.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import threading
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field

from rootbound.catalogue import FILE_TOOLS
from rootbound.errors import Denied, ToolError
from rootbound.fs.beneath import EscapeError, open_beneath
from rootbound.logs import log

__all__ = ["Root", "RootSet", "display_path", "split_path"]

_READ_FLAGS = os.O_RDONLY | os.O_NONBLOCK  # NONBLOCK: opening a FIFO must not hang the server
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY


def split_path(path: str) -> list[str]:
    """Split an agent's root-relative path into components, rejecting what no name may hold.

    A leading `/` is taken relative to the root (the root is the agent's `/`);
    `""`, `"."` and `"/"` all name the root. `..` is kept: the resolver decides
    whether it stays beneath. Nothing is normalised lexically, because `a/..`
    is not `.` when `a` is a symlink.
    """
    if "\x00" in path:
        raise Denied("invalid path: contains a null byte")
    parts = [p for p in path.split("/") if p not in ("", ".")]
    for part in parts:
        try:
            encoded = os.fsencode(part)
        except UnicodeEncodeError:  # a lone surrogate that no file name can hold
            raise ToolError(f"invalid path: not valid UTF-8: {path!r}") from None
        if len(encoded) > 255:
            raise ToolError(f"invalid path: component longer than 255 bytes in {path!r}")
    return parts


def display_path(parts: Iterable[str]) -> str:
    """The canonical root-relative spelling of a path for results: `a/b`, or `.` for the root."""
    joined = "/".join(parts)
    return joined or "."


@dataclass(frozen=True)
class Root:
    """A named directory the agent may reach, and which tools it may use there."""

    name: str
    real_path: str  # for the operator's eyes (check, logs at debug); never put in a result
    allowed_tools: frozenset[str]
    fd: int = field(repr=False)
    # Reopened at `real_path` when its directory was removed or replaced and a directory is there again:
    # true for roots opened from a host path (`at`); a client root opened beneath an operator root, or
    # the server's own spill directory, is not.
    reopens: bool = field(default=False, repr=False, compare=False)

    @classmethod
    def at(cls, name: str, path: str, allowed_tools: Iterable[str]) -> Root:
        """Open the directory at host `path` as root `name`; the handle is held until `close`."""
        real = os.path.realpath(path)
        fd = os.open(real, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        tools = set(allowed_tools)
        return cls(name, real, frozenset(FILE_TOOLS) if "*" in tools else frozenset(tools), fd, cls is Root)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self.fd)

    # -- a directory removed or replaced under us -------------------------------------------

    def _stale(self) -> bool:
        """Removed (no links left) or replaced (its path names another inode). A directory renamed away
        with nothing at its old path stays served through its handle."""
        st = os.fstat(self.fd)
        if st.st_nlink == 0:
            return True
        try:
            now = os.stat(self.real_path)
        except OSError:
            return False
        return (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino)

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
        os.dup2(new, self.fd, inheritable=False)
        os.close(new)
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
        if self.available():
            return
        how = ("it is served again as soon as a directory exists at its configured path" if self.reopens else
               "restart the server (for a client root: reconnect, or send the roots again) to serve it again")
        raise ToolError(f"root '{self.name}' is no longer available (its directory was removed or replaced); {how}")

    # -- policy -----------------------------------------------------------------------------

    def check_tool(self, tool: str) -> None:
        if tool not in self.allowed_tools:
            raise Denied(f"tool {tool} not allowed on root {self.name}")

    # -- resolution: the only doors ---------------------------------------------------------

    def open(self, path: str, flags: int = _READ_FLAGS, *, follow: bool = True) -> int:
        """Open `path` beneath the root; the caller owns the returned descriptor."""
        parts = split_path(path)
        try:
            return open_beneath(self.fd, parts, flags, follow=follow)
        except OSError as exc:
            raise self.os_error(exc, path) from None

    def open_file(self, path: str) -> tuple[int, os.stat_result]:
        """Open a regular file for reading; FIFOs, sockets and devices are refused without being opened.

        The path is first opened with O_PATH (no read access, so opening a device has no side
        effect and a FIFO cannot block), checked with fstat, and only then reopened for reading
        through the descriptor itself, so the file checked is the file read.
        """
        probe = self.open(path, os.O_PATH)
        try:
            st = os.fstat(probe)
            if stat.S_ISDIR(st.st_mode):
                raise ToolError(f"path is a directory, not a file: {path}")
            if not stat.S_ISREG(st.st_mode):
                raise ToolError(f"not a regular file: {path} is a {file_type(st.st_mode)}")
            try:
                fd = os.open(f"/proc/self/fd/{probe}", os.O_RDONLY | os.O_CLOEXEC)
            except FileNotFoundError:  # no /proc (some containers): a non-blocking open is the next best
                fd = self.open(path, _READ_FLAGS)
                os.set_blocking(fd, True)
            except OSError as exc:
                raise self.os_error(exc, path) from None
        finally:
            os.close(probe)
        if not os.path.samestat(os.fstat(fd), st):  # only possible on the fallback path
            os.close(fd)
            raise ToolError(f"file changed while being opened: {path}; try again")
        return fd, st

    def open_dir(self, path: str) -> int:
        """Open a directory for reading; anything else is refused without being opened.

        Looked at first through an O_PATH handle (a FIFO or device is never opened: that would
        wake a waiting writer, or do what the device does on open), then opened with O_DIRECTORY.
        """
        if not stat.S_ISDIR(self.stat(path).st_mode):
            raise ToolError(f"not a directory: {path}")
        return self.open(path, os.O_RDONLY | os.O_DIRECTORY)

    @contextlib.contextmanager
    def parent(self, path: str) -> Iterator[tuple[int, str]]:
        """Yield `(parent directory handle, final name)` for acting on the last component.

        The final component is never followed; earlier ones are followed while they
        stay beneath the root. The root itself has no parent here: callers that may
        be given the root check `is_root` first.
        """
        parts = split_path(path)
        if not parts or parts[-1] == "..":
            if self.is_root(path):
                raise ToolError(f"path names the root directory itself: {path!r}")
            raise ToolError(f"invalid path: must not end with '..': {path}")
        try:
            fd = open_beneath(self.fd, parts[:-1], _DIR_FLAGS)
        except OSError as exc:
            raise self.os_error(exc, path) from None
        try:
            yield fd, parts[-1]
        finally:
            os.close(fd)

    def is_root(self, path: str) -> bool:
        """True when `path` resolves to the root directory itself (any spelling: "", ".", "/", "a/..")."""
        parts = split_path(path)
        if not parts:
            return True
        if parts[-1] != "..":
            return False
        try:
            fd = open_beneath(self.fd, parts, os.O_PATH)
        except OSError:
            return False
        try:
            return os.path.samestat(os.fstat(fd), os.fstat(self.fd))
        finally:
            os.close(fd)

    def lstat(self, path: str) -> os.stat_result:
        """Stat `path` without following a final symlink."""
        parts = split_path(path)
        if not parts:
            return os.fstat(self.fd)
        if parts[-1] == "..":  # `a/..` names a directory, never a symlink: nothing to not-follow
            return self.stat(path)
        with self.parent(path) as (dirfd, name):
            try:
                return os.stat(name, dir_fd=dirfd, follow_symlinks=False)
            except OSError as exc:
                raise self.os_error(exc, path) from None

    def stat(self, path: str) -> os.stat_result:
        """Stat what `path` leads to, following in-root symlinks (an outside target is an escape)."""
        fd = self.open(path, os.O_PATH)
        try:
            return os.fstat(fd)
        finally:
            os.close(fd)

    def target_stat(self, parts: list[str]) -> os.stat_result | None:
        """Stat where the symlink at `parts` leads; None when outside the root, dangling or a loop."""
        try:
            fd = open_beneath(self.fd, parts, os.O_PATH)
        except OSError:
            return None
        try:
            return os.fstat(fd)
        finally:
            os.close(fd)

    # -- errors -----------------------------------------------------------------------------

    def os_error(self, exc: OSError, path: str) -> ToolError:
        """Turn an OS error met while resolving `path` into the agent-facing message."""
        if isinstance(exc, EscapeError) or exc.errno == errno.EXDEV:
            return Denied("path resolves outside root boundary")
        match exc.errno:
            case errno.ENOENT:
                return ToolError(f"file not found: {path}")
            case errno.ENOTDIR:
                return ToolError(f"not a directory: a component of {path} is a file")
            case errno.ELOOP:
                return ToolError(f"too many levels of symbolic links: {path}")
            case errno.EACCES | errno.EPERM:
                return ToolError(f"permission denied: {path}")
            case errno.ENAMETOOLONG:
                return ToolError(f"file name too long: {path}")
            case errno.ENXIO:
                return ToolError(f"not a regular file: {path}")
            case _:
                return ToolError(f"{exc.strerror or 'error'}: {path}")


_reopen_lock = threading.Lock()

_TYPE_NAMES = {stat.S_IFREG: "file", stat.S_IFDIR: "directory", stat.S_IFLNK: "symlink", stat.S_IFIFO: "fifo",
               stat.S_IFSOCK: "socket", stat.S_IFCHR: "device", stat.S_IFBLK: "device"}


def file_type(mode: int) -> str:
    """The seed's entry type names, plus the special kinds a root may hold."""
    return _TYPE_NAMES.get(stat.S_IFMT(mode), "unknown")


class RootSet(Mapping[str, Root]):
    """The roots in force, by name, in the order the operator gave them."""

    def __init__(self, roots: Iterable[Root]) -> None:
        self._roots: dict[str, Root] = {r.name: r for r in roots}

    def __getitem__(self, name: str) -> Root:
        return self._roots[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._roots)

    def __len__(self) -> int:
        return len(self._roots)

    def get_for(self, name: str, tool: str) -> Root:
        """The root called `name`, after checking that `tool` may run there."""
        root = self._roots.get(name)
        if root is None:
            raise ToolError(f"unknown root: {name}; roots: {', '.join(self._roots)}")
        root.check_tool(tool)
        root.check_available()
        return root

    def close(self) -> None:
        for root in self._roots.values():
            root.close()
