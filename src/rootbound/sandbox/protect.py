"""Protected paths (`protected_paths`) made read-only for commands, in bubblewrap's mount namespace.

For each rule, at the top of each writable root, the concrete path is resolved
beneath the root's handle and turned into binds:

* the path itself is bound read-only over itself ("freeze"): it cannot be written,
  truncated, removed or renamed (a mount point is busy);
* every directory between the root and it is bound over itself read-write ("keep"):
  it stays usable, but as a mount point it cannot be renamed or removed, so
  `mv .git .git-old && mkdir -p .git/hooks` cannot undo the protection;
* a path that does not exist yet is held by an empty read-only placeholder
  (created here, beneath the root handle, removed again when the last command that
  needed it ends), so it cannot be created either; a missing directory level is
  held the same way, which makes everything below it impossible to create;
* an ancestor that is not a directory (a worktree's `.git` file) is frozen itself.

Limits (reported by `rootbound check`): only the top of each root is covered, not
deeper copies such as `vendor/x/.git/config` (the file tools do cover those);
a component that is an in-root symlink is followed and its target protected, but
the link itself can be replaced; rules with `**` before their last component are
not enforced for commands.
"""

from __future__ import annotations

import contextlib
import errno
import fnmatch
import os
import stat
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field

from rootbound.beneath import open_beneath
from rootbound.roots import Root

__all__ = ["Guards", "guard_root", "unenforced_rules"]

_GLOB = frozenset("*?[")
_PLACEHOLDER_FILE_MODE = 0o444
_PLACEHOLDER_DIR_MODE = 0o555
_MARK = "user.rootbound.placeholder"


@dataclass
class Guards:
    """The binds for one command, and the placeholders it holds (released by `release`)."""

    keep: dict[str, None] = field(default_factory=dict)  # host paths bound read-write over themselves
    freeze: dict[str, None] = field(default_factory=dict)  # host paths bound read-only over themselves
    held: list[_Key] = field(default_factory=list)

    def release(self) -> None:
        for key in self.held:
            _REGISTRY.release(key)
        self.held.clear()


@dataclass(frozen=True)
class _Key:
    root: Root
    parts: tuple[str, ...]


class _Registry:
    """Placeholders shared by concurrent commands in the same root, removed by the last one."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._count: dict[tuple[str, tuple[str, ...]], tuple[int, int, int]] = {}  # -> (users, dev, ino)

    def ours(self, root: Root, parts: tuple[str, ...], st: os.stat_result) -> bool:
        with self._lock:
            known = self._count.get((root.real_path, parts))
            return known is not None and (st.st_dev, st.st_ino) == known[1:]

    def acquire(self, root: Root, parts: tuple[str, ...], parent: int, directory: bool) -> bool | None:
        """Hold the placeholder at `parts`: ours already (one more user), or created now beneath `parent`.
        False when a real file is there (it appeared meanwhile); None when nobody can create it."""
        name, key = parts[-1], (root.real_path, parts)
        with self._lock:
            st = _lstat(parent, name)
            known = self._count.get(key)
            if known is not None:
                if st is not None and (st.st_dev, st.st_ino) == known[1:]:
                    self._count[key] = (known[0] + 1, *known[1:])
                    return True
                del self._count[key]  # replaced by someone else: no longer ours to remove
            if st is not None:
                if not _stale_placeholder(parent, name, st):
                    return False
                self._count[key] = (1, st.st_dev, st.st_ino)  # left by a server that died: adopt it
                return True
            try:
                if directory:
                    os.mkdir(name, _PLACEHOLDER_DIR_MODE, dir_fd=parent)
                else:
                    os.close(os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                                     _PLACEHOLDER_FILE_MODE, dir_fd=parent))
            except FileExistsError:
                return False
            except OSError as exc:
                # A directory even the server cannot write in (read-only file system, immutable, not its own):
                # a command, with no more rights than the server, cannot create the path either.
                if exc.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
                    return None
                raise
            with contextlib.suppress(OSError):  # a mark, so a server that dies cannot leave it behind for good
                os.setxattr(f"/proc/self/fd/{parent}/{name}", _MARK, b"1", follow_symlinks=False)
            st = os.stat(name, dir_fd=parent, follow_symlinks=False)
            self._count[key] = (1, st.st_dev, st.st_ino)
            return True

    def release(self, key: _Key) -> None:
        with self._lock:
            entry_key = (key.root.real_path, key.parts)
            known = self._count.get(entry_key)
            if known is None:
                return
            if known[0] > 1:
                self._count[entry_key] = (known[0] - 1, *known[1:])
                return
            del self._count[entry_key]
            with contextlib.suppress(OSError):
                parent = open_beneath(key.root.fd, list(key.parts[:-1]), os.O_RDONLY | os.O_DIRECTORY)
                try:
                    st = _lstat(parent, key.parts[-1])
                    if st is None or (st.st_dev, st.st_ino) != known[1:]:
                        return
                    if stat.S_ISDIR(st.st_mode):
                        os.rmdir(key.parts[-1], dir_fd=parent)  # only if still empty
                    elif st.st_size == 0:
                        os.unlink(key.parts[-1], dir_fd=parent)
                finally:
                    os.close(parent)


_REGISTRY = _Registry()


def _stale_placeholder(parent: int, name: str, st: os.stat_result) -> bool:
    """An empty file or directory carrying our mark, that no command of this server holds."""
    if stat.S_ISREG(st.st_mode) and st.st_size != 0:
        return False
    if not stat.S_ISREG(st.st_mode) and not stat.S_ISDIR(st.st_mode):
        return False
    try:
        if os.getxattr(f"/proc/self/fd/{parent}/{name}", _MARK, follow_symlinks=False) != b"1":
            return False
        return not stat.S_ISDIR(st.st_mode) or not os.listdir(f"/proc/self/fd/{parent}/{name}")
    except OSError:
        return False


def _lstat(parent: int, name: str) -> os.stat_result | None:
    try:
        return os.stat(name, dir_fd=parent, follow_symlinks=False)
    except (FileNotFoundError, NotADirectoryError):
        return None


def _components(rule: str) -> tuple[list[str], bool] | None:
    """(literal-or-glob components, whole subtree?) for a rule; None when `**` comes before the end."""
    comps = [c for c in rule.strip("/").split("/") if c not in ("", ".")]
    subtree = bool(comps) and comps[-1] == "**"
    if subtree:
        comps = comps[:-1]
    if not comps or "**" in comps:
        return None
    return comps, subtree


def unenforced_rules(rules: Sequence[str]) -> list[str]:
    return [r for r in rules if r.strip("/") and _components(r) is None]


def _canonical(fd: int) -> str:
    return os.readlink(f"/proc/self/fd/{fd}")


def _expand(parent: int, comp: str) -> list[str]:
    if not _GLOB & set(comp):
        return [comp]
    with contextlib.suppress(OSError):
        return sorted(n for n in os.listdir(parent) if fnmatch.fnmatch(n.lower(), comp.lower()))
    return []


def _walk(root: Root, guards: Guards, parent: int, base: str, done: tuple[str, ...], comps: list[str],
          subtree: bool) -> None:
    comp, rest = comps[0], comps[1:]
    for name in _expand(parent, comp):
        path, parts = f"{base}/{name}", (*done, name)
        st = _lstat(parent, name)
        if (st is None and not _GLOB & set(comp)) or (st is not None and (_REGISTRY.ours(root, parts, st) or
                                                                          _stale_placeholder(parent, name, st))):
            held = _REGISTRY.acquire(root, parts, parent, directory=bool(rest) or subtree)
            if held:
                guards.held.append(_Key(root, parts))
                guards.freeze[path] = None
                continue
            if held is None:
                continue
            st = _lstat(parent, name)  # a real file appeared meanwhile: protect it as it is
        if st is None:
            continue
        try:
            # Resolved from the root, so an in-root symlink (even one using "..") is followed.
            fd = open_beneath(root.fd, list(parts), os.O_PATH, follow=True)
        except OSError:
            continue  # a symlink leading out of the root (or nowhere): not ours to protect
        try:
            target = _canonical(fd)
            if not target.startswith(root.real_path.rstrip("/") + "/"):
                continue
            if not stat.S_ISDIR(os.fstat(fd).st_mode) or not rest:
                guards.freeze[target] = None  # the protected path, or a non-directory standing in for one
                continue
            guards.keep[target] = None
            sub = os.open(f"/proc/self/fd/{fd}", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            try:
                _walk(root, guards, sub, target, parts, rest, subtree)
            finally:
                os.close(sub)
        finally:
            os.close(fd)


def guard_root(root: Root, rules: Sequence[str], guards: Guards) -> None:
    """Add the binds protecting `rules` at the top of the writable `root` to `guards`."""
    for rule in rules:
        parsed = _components(rule)
        if parsed is None:
            continue
        comps, subtree = parsed
        try:
            _walk(root, guards, root.fd, root.real_path.rstrip("/"), (), comps, subtree)
        except OSError as exc:
            if exc.errno not in (errno.ENOENT, errno.ENOTDIR, errno.EACCES):
                raise
    # A path frozen by one rule is never merely kept by another.
    for path in guards.freeze:
        guards.keep.pop(path, None)
