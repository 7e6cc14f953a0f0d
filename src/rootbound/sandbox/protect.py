"""Git's redirection points and `protected_paths`, made read-only for commands in bubblewrap's mount namespace.

At the top of each writable root, each guarded path is looked up beneath the root's handle
one component at a time, never following a symbolic link, and becomes:

* frozen: bound read-only over itself, so it cannot be written, truncated, removed or
  renamed (a mount point is busy);
* kept: a directory on the way (`.git`) is bound read-write over itself: usable, but as a
  mount point it cannot be renamed or replaced, so `mv .git x && mkdir -p .git/hooks`
  cannot undo the rest;
* missing: nothing is created for it (nothing a user or git could see); once the command
  has ended, whatever it put there is removed beneath the root handle and reported
  (`Guards.sweep`); a missing directory level takes with it only the protected path below
  it, except a missing `.git`, which is removed whole;
* made by a running command: a path that was missing when another command still running
  started (so that command may have made it) counts as missing for this one too. A mount
  follows the entry it covers, and a mount point in one namespace is none in another's:
  were it bound, the command that made it could rename it away, the bind would follow, and
  this command would find the name free to make its own, which its sweep would leave (the
  path was there when it started). So nothing is bound there, and what stands there once
  this command has ended is removed, as that command's sweep removes it;
* a symbolic link: its own place cannot be bound over (a mount follows it), so the command
  is refused, naming the link (`GuardError`).

Git's redirection points are guarded whatever `protected_paths` says: the `.git` entry (a
directory is kept, a `.git` file frozen) and, in a `.git` directory, `GIT_ENTRIES`.

Everything is bound by descriptor (`--bind-fd`), so bubblewrap resolves no source path
again; it still resolves each destination inside the namespace, so the launcher there
checks every bind landed where it was meant to before it runs the command (`exec.py`).

Limits (reported by `rootbound check`): only the top of each root (another root nested in
it stops the walk: it keeps its own mode); rules with `**` before their last component are
not enforced; a wildcard freezes what matches, but a new match a command makes stays.
"""

from __future__ import annotations

import contextlib
import fnmatch
import functools
import os
import stat
import threading
import weakref
from collections import Counter
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field

from rootbound.errors import Denied
from rootbound.fs import Root, display_path
from rootbound.fs.removal import remove_tree

__all__ = ["GIT_ENTRIES", "Bind", "GuardError", "Guards", "close_binds", "guard_root", "identity", "unenforced_rules"]

GIT_ENTRIES = ("config", "config.worktree", "commondir", "hooks", "info", "modules", "worktrees")
_GLOB = frozenset("*?[")
_OPEN = os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC


class GuardError(Denied):
    """A guarded path is a symbolic link: the command is refused."""


@dataclass(frozen=True)
class Bind:
    fd: int  # what is bound: an O_PATH descriptor
    path: str  # where: the same path on the host and in the sandbox
    writable: bool


def close_binds(binds: Sequence[Bind]) -> None:
    for bind in binds:
        with contextlib.suppress(OSError):
            os.close(bind.fd)


def identity(fd: int) -> tuple[int, int]:
    """(st_dev, st_ino) of what `fd` is open on."""
    st = os.fstat(fd)
    return st.st_dev, st.st_ino


@dataclass
class Guards:
    """One command's guard binds (it owns their descriptors), and the protected paths missing when it started."""

    binds: dict[str, Bind] = field(default_factory=dict)
    # (root, the path's components, how many of them existed): what a command creates there is removed after it
    missing: list[tuple[Root, tuple[str, ...], int]] = field(default_factory=list)
    # Our own handle on each root with a missing path, by its path (the root's own handle may be closed, and its
    # number reused, before the command ends).
    handles: dict[str, int] = field(default_factory=dict)
    # What it counts in _MISSING, and what takes it out again: close(), or the garbage collector for a Guards
    # dropped without close() (no path may stay counted as missing for ever).
    _counted: list[tuple[str, tuple[str, ...]]] = field(default_factory=list, init=False, repr=False)
    _uncount: weakref.finalize[[list[tuple[str, tuple[str, ...]]]], Guards] | None = field(
        default=None, init=False, repr=False)

    def note_missing(self, root: Root, paths: Sequence[tuple[tuple[str, ...], int]]) -> None:
        """`paths` of `root` were missing: each its components and how many of them existed."""
        if not paths:
            return
        if root.real_path not in self.handles:
            self.handles[root.real_path] = os.dup(root.handle())
        self.missing.extend((root, parts, existed) for parts, existed in paths)
        # each missing level
        levels = [(root.real_path, parts[:k]) for parts, existed in paths for k in range(existed + 1, len(parts) + 1)]
        with _LOCK:
            _MISSING.update(levels)
            self._counted.extend(levels)
            if self._uncount is None:
                self._uncount = weakref.finalize(self, _forget, self._counted)

    def add(self, bind: Bind) -> int:
        """Take `bind` (and its descriptor); return the descriptor now held for its path."""
        known = self.binds.get(bind.path)
        if known is not None and (bind.writable or not known.writable):  # frozen by one rule beats kept by another
            os.close(bind.fd)
            return known.fd
        if known is not None:
            os.close(known.fd)
        self.binds[bind.path] = bind
        return bind.fd

    def close(self) -> None:
        """Release the descriptors; its missing paths no longer count for commands starting from now on (call it
        after `sweep`)."""
        if self._uncount is not None:
            self._uncount()  # (once: a finalizer runs at most once)
        for fd in (*(b.fd for b in self.binds.values()), *self.handles.values()):
            with contextlib.suppress(OSError):
                os.close(fd)
        self.binds.clear()
        self.handles.clear()

    def sweep(self) -> list[str]:
        """Remove what now exists at the paths that were missing (run once the command's processes are gone);
        return them as `root:path`."""
        removed: list[str] = []
        absent: dict[tuple[str, tuple[str, ...]], bool] = {}
        for root, parts, existed in self.missing:
            handle = self.handles[root.real_path]
            # Most stay missing: one look at the first missing level, shared by the rules below it, tells. (What
            # the walk below would remove lies at or beneath that level, reached through real directories, which
            # `_absent` walks the same way.)
            key = (root.real_path, parts[:existed + 1])
            if key not in absent:
                absent[key] = _absent(handle, key[1])
            if absent[key]:
                continue
            with contextlib.suppress(OSError):
                _sweep(handle, (), list(parts), existed, removed, root.name)
        return list(dict.fromkeys(removed))


# Every level of a protected path that was missing when a command still running started, by (root's real path,
# components), counted once per command (from its guards until its sweep is done): one lookup per level walked,
# however many commands run.
_MISSING: Counter[tuple[str, tuple[str, ...]]] = Counter()
# (Guards are made and swept on the event loop or in worker threads; reentrant: a finalizer may run, from the
# garbage collector, in a thread that holds it.)
_LOCK = threading.RLock()


def _forget(levels: list[tuple[str, tuple[str, ...]]]) -> None:
    with _LOCK:
        _MISSING.subtract(levels)
        for level in set(levels):
            if _MISSING[level] <= 0:
                del _MISSING[level]


def _missing_for_a_running_command(root: Root, here: tuple[str, ...]) -> bool:
    """Was `here` missing when a command still running started (this one included: what was missing when it
    started and is there now was made meanwhile)?"""
    with _LOCK:
        return _MISSING[(root.real_path, here)] > 0


def _components(rule: str) -> list[str] | None:
    """The components of a rule (`dir/**` is `dir`: freezing it covers everything below); None when `**`
    comes before the end (not enforceable at a fixed place)."""
    comps = [c for c in rule.strip("/").split("/") if c not in ("", ".")]
    if comps and comps[-1] == "**":
        comps = comps[:-1]
    if not comps or "**" in comps or ".." in comps:  # (config refuses `..`: a walk must never leave the root)
        return None
    return comps


def unenforced_rules(rules: Sequence[str]) -> list[str]:
    return [r for r in rules if r.strip("/") and _components(r) is None]


def _expand(parent: int, comp: str) -> list[str]:
    if not _GLOB & set(comp):
        return [comp]
    with contextlib.suppress(OSError):
        listing = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=parent)
        try:
            return sorted(n for n in os.listdir(listing) if fnmatch.fnmatch(n.lower(), comp.lower()))
        finally:
            os.close(listing)
    return []


def _open(parent: int, name: str) -> tuple[int, os.stat_result] | None:
    """The entry itself (never a symlink's target), or None when it is not there."""
    try:
        fd = os.open(name, _OPEN, dir_fd=parent)
    except (FileNotFoundError, NotADirectoryError, PermissionError):
        return None  # (a directory the server cannot search: commands, with no more rights, cannot either)
    return fd, os.fstat(fd)


def _link_error(root: Root, parts: tuple[str, ...]) -> GuardError:
    return GuardError(f"commands are refused: {root.name}:{display_path(parts)} is a symbolic link where a protected "
                      "path (or git's configuration) must be, and the place of a link cannot be made read-only for "
                      "commands. Replace the link with what it points to, or remove it. Nothing was run")


@dataclass
class _Place:
    """A place the rules name, in a tree of them (`_rule_tree`): each place is looked up once per command, however
    many rules pass through it."""

    children: dict[str, _Place] = field(default_factory=dict)  # by component (a glob too)
    end: bool = False  # a rule ends here: what stands here is frozen
    below: list[tuple[str, ...]] = field(default_factory=list)  # each rule from here down, this component first


@functools.lru_cache(maxsize=16)
def _rule_tree(rules: tuple[str, ...]) -> _Place:
    """Git's redirection points and the enforceable `rules`, as a tree of places."""
    top = _Place()
    for comps in (*((".git", name) for name in GIT_ENTRIES), *filter(None, map(_components, rules))):
        place = top
        for depth, comp in enumerate(comps):
            place = place.children.setdefault(comp, _Place())
            if tuple(comps[depth:]) not in place.below:
                place.below.append(tuple(comps[depth:]))
        place.end = True
    return top


def _walk(root: Root, guards: Guards, parent: int, done: tuple[str, ...], place: _Place,
          stop: Collection[tuple[int, int]], missing: list[tuple[tuple[str, ...], int]]) -> None:
    for comp, child in place.children.items():
        glob = bool(_GLOB & set(comp))
        for name in _expand(parent, comp):
            here = (*done, name)
            found = _open(parent, name)
            if found is None:
                if not glob:  # (a glob freezes what matches; nothing is noted for no match)
                    _note(missing, here, child)
                continue
            fd, st = found
            if stat.S_ISLNK(st.st_mode):
                os.close(fd)
                raise _link_error(root, here)
            if _missing_for_a_running_command(root, here):
                os.close(fd)
                _note(missing, here, child)
                continue
            if (st.st_dev, st.st_ino) in stop:
                os.close(fd)  # another root nested here: it keeps its own mode (a read-only one stays read-only)
                continue
            deeper = bool(child.children) and stat.S_ISDIR(st.st_mode)
            # Kept (bound read-write) on the way to a rule's end; frozen where one ends, and where a non-directory
            # stands where a directory is expected (a worktree's `.git` file).
            held = guards.add(Bind(fd, f"{root.real_path.rstrip('/')}/{'/'.join(here)}",
                                   writable=deeper and not child.end))
            if deeper:
                _walk(root, guards, held, here, child, stop, missing)


def _note(missing: list[tuple[tuple[str, ...], int]], here: tuple[str, ...], place: _Place) -> None:
    """Every rule through `here`, which is missing (or counts as missing): what a command makes there is removed.
    A missing `.git` is removed whole, whatever is made in it."""
    if here == (".git",):
        missing.append((here, 0))
        return
    missing.extend(((*here, *rule[1:]), len(here) - 1) for rule in place.below)


def guard_root(root: Root, rules: Sequence[str], guards: Guards, *, stop: Collection[tuple[int, int]] = ()) -> None:
    """Add the binds guarding git's redirection points and `rules` at the top of the writable `root` to `guards`.

    `stop`: (st_dev, st_ino) of the other roots, where the walk ends. Raises `GuardError` for a symbolic link.
    Git's redirection points: the `.git` entry (a directory is kept, a `.git` file frozen) and, in a `.git`
    directory, `GIT_ENTRIES`; a missing `.git` is removed whole if a command makes one.
    """
    missing: list[tuple[tuple[str, ...], int]] = []
    _walk(root, guards, root.handle(), (), _rule_tree(tuple(rules)), stop, missing)
    guards.note_missing(root, missing)


def _absent(handle: int, parts: tuple[str, ...]) -> bool:
    """Is nothing at `parts` (the levels before the last existed when the command started)? Each level is entered
    without following a link: where one is no longer a directory, the sweep's walk would remove nothing below it
    either (it is not the command's doing), and nothing outside the root is ever looked at."""
    fds: list[int] = []
    try:
        for name in parts[:-1]:
            fds.append(os.open(name, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC,
                               dir_fd=fds[-1] if fds else handle))
        os.stat(parts[-1], dir_fd=fds[-1] if fds else handle, follow_symlinks=False)
    except (FileNotFoundError, NotADirectoryError):
        return True
    except OSError:
        return False  # (the walk decides)
    finally:
        for fd in fds:
            os.close(fd)
    return False


def _sweep(parent: int, done: tuple[str, ...], comps: list[str], existed: int, removed: list[str],
           root_name: str) -> None:
    comp, rest = comps[0], comps[1:]
    # Up to the first missing level the components are names the walk found (or a rule's literal ones): matched as
    # they are, never as patterns (a folder named `cfg[1]` is not `cfg1`; one named `cfg*` is not every `cfg…`).
    for name in [comp] if len(done) <= existed else _expand(parent, comp):
        try:
            st = os.stat(name, dir_fd=parent, follow_symlinks=False)
        except (FileNotFoundError, NotADirectoryError):
            continue
        here = (*done, name)
        if rest and stat.S_ISDIR(st.st_mode):
            sub = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=parent)
            try:
                _sweep(sub, here, rest, existed, removed, root_name)
            finally:
                os.close(sub)
        elif len(done) < existed:
            continue  # a level that was there at the start (a mount point for the command) changed: not its doing
        elif not rest or stat.S_ISLNK(st.st_mode):  # the path itself, or a link that would lead it elsewhere
            if stat.S_ISDIR(st.st_mode):
                remove_tree(parent, name)
            else:
                os.unlink(name, dir_fd=parent)
            removed.append(f"{root_name}:{display_path(here)}")
        # (A file where a directory level was missing: nothing can exist below it.)
