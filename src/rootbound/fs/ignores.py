"""What a search leaves out: `.git/`, and what `.gitignore`, `.ignore` and `.git/info/exclude` say, as ripgrep
reads them.

The search walk (`trees.walk(..., ignores=...)`) enters each directory and reads its
ignore files through the directory's own handle, each one final name opened with
O_NOFOLLOW (`trees.open_file`): a symlinked ignore file is passed by, so an ignore
file is only ever a file inside the root, and a rule can only leave entries out —
never add a path or lead the walk anywhere. The directories above the search's start,
up to the root (never beyond it), are read through `Root.open`.

Precedence follows ripgrep: `.ignore` rules beat `.gitignore` rules, which beat the
repository's `.git/info/exclude`; within each, the deeper directory wins, and
within one file the last matching line (a `!negation` re-includes). A directory
left out is not entered, so nothing beneath it comes back (as in git). The rules are
gitignore's, by `pathspec` (a maintained implementation of git's wildmatch). Hidden
files are searched like any other; `.gitignore` is honoured whether or not the tree is
a git checkout (ripgrep's `--no-require-git`: a root is often a part of a repository
whose top it cannot see).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Final

from rootbound.errors import PathError
from rootbound.fs.files import Kinds
from rootbound.fs.trees import open_file

if TYPE_CHECKING:
    from rootbound.fs.root import Root

__all__ = ["GIT_DIR", "Ignores"]

GIT_DIR: Final = ".git"
# Precedence order: the first that decides wins.
_FILES: Final = ((".ignore",), (".gitignore",), (GIT_DIR, "info", "exclude"))
_MAX_SIZE: Final = 1 << 20  # an ignore file bigger than this is not one anybody wrote; it is passed by
_DIR_FLAGS: Final = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC

if TYPE_CHECKING:
    from pathspec import GitIgnoreSpec as Spec
_Specs = tuple["Spec | None", "Spec | None", "Spec | None"]
_NONE: Final[_Specs] = (None, None, None)


def _read(dir_fd: int, names: tuple[str, ...]) -> bytes | None:
    """The file at `names` beneath `dir_fd`, every step O_NOFOLLOW; None if it is not a regular file there."""
    opened: list[int] = []
    try:
        fd = dir_fd
        for name in names[:-1]:
            fd = os.open(name, _DIR_FLAGS, dir_fd=fd)
            opened.append(fd)
        got = open_file(fd, names[-1])
        if got is None:
            return None
        file_fd, st = got
        opened.append(file_fd)
        return os.pread(file_fd, _MAX_SIZE, 0) if st.st_size <= _MAX_SIZE else None
    except OSError:
        return None  # unreadable or gone: it says nothing
    finally:
        for fd in opened:
            os.close(fd)


def _spec(data: bytes) -> Spec | None:
    from pathspec import GitIgnoreSpec  # (imported by the first search that reads a rule: it brings RE2 and more)

    lines = data.decode("utf-8", "replace").splitlines()
    try:
        spec = GitIgnoreSpec.from_lines(lines)
    except ValueError:  # a line git would ignore as invalid: keep the others
        good = []
        for line in lines:
            with contextlib.suppress(ValueError):
                GitIgnoreSpec.from_lines([line])
                good.append(line)
        spec = GitIgnoreSpec.from_lines(good)
    return spec if len(spec) else None


def _specs(dir_fd: int, listed: Callable[[str], bool] | None = None) -> _Specs:
    """The rules of the directory `dir_fd`; `listed` (its listing) spares the opens of files it does not hold."""
    found: list[Spec | None] = []
    for names in _FILES:
        data = _read(dir_fd, names) if listed is None or listed(names[0]) else None
        found.append(_spec(data) if data else None)
    return found[0], found[1], found[2]


class _Level:
    """The rules of one directory: a path relative to the walk's start becomes `add + path[strip:]` for them."""

    __slots__ = ("add", "specs", "strip")

    def __init__(self, strip: int, add: str, specs: _Specs) -> None:
        self.strip, self.add, self.specs = strip, add, specs


class Ignores:
    """The rules in force at the walk's current directory: one level per directory from the root down."""

    def __init__(self) -> None:
        self._levels: list[_Level] = []
        self._active: list[_Level] = []  # the levels that have rules, deepest last

    @classmethod
    def above(cls, root: Root, top: int) -> Ignores:
        """The rules of the directories between `root` and the open directory `top` (a search's start), which
        the walk beneath `top` does not see itself. None beyond the root."""
        rules = cls()
        where = root.where(top)
        for depth in range(len(where or ())):
            assert where is not None
            try:
                opened = root.open("/".join(where[:depth]) or ".", Kinds.DIRECTORY)
            except PathError:
                continue  # moved or gone meanwhile: its rules are not known
            with opened:
                specs = _specs(opened.fd)
            if specs != _NONE:
                rules._active.append(_Level(0, "/".join(where[depth:]) + "/", specs))
        rules._levels = list(rules._active)
        return rules

    def enter(self, dir_fd: int, prefix: str, listed: Callable[[str], bool] | None = None) -> None:
        """The walk entered the directory `dir_fd`, at `prefix` ("" or "a/b/") below its start; `listed` says
        whether a name is in the directory's listing."""
        specs = _specs(dir_fd, listed)
        level = _Level(len(prefix), "", specs)
        self._levels.append(level)
        if specs != _NONE:
            self._active.append(level)

    def leave(self) -> None:
        """The walk is done with the directory it entered last."""
        level = self._levels.pop()
        if self._active and self._active[-1] is level:
            self._active.pop()

    def ignored(self, path: str, name: str, is_dir: bool) -> bool:
        """Whether the entry at `path` (below the walk's start) is left out."""
        if name == GIT_DIR:
            return True
        if not self._active:
            return False
        suffix = "/" if is_dir else ""
        for kind in range(len(_FILES)):
            for level in reversed(self._active):
                spec = level.specs[kind]
                if spec is None:
                    continue
                verdict = spec.check_file(level.add + path[level.strip:] + suffix).include
                if verdict is not None:
                    return verdict
        return False
