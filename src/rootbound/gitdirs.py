"""Where git looks for a repository, so that the file tools never create or change one.

git runs what a repository's configuration says (`core.fsmonitor`, `core.hooksPath`,
`core.pager`, aliases, hooks, ...) whenever a user runs it in that repository's
working tree, and it finds that configuration through indirections plain files can
set up: a `.git` directory, or a `.git` *file* (`gitdir: elsewhere`), in the
directory or a parent; inside it `commondir`, `config.worktree`, `modules/*/config`,
`info/`, `worktrees/*`; and any directory shaped like a bare repository — `HEAD` plus
`objects` and `refs`, or `HEAD` plus a `commondir` file — is one, whose `config` git
reads when run in it or below it.

So (SPEC v2) the file tools never create, change, remove or rename a `.git` entry (file,
directory or symlink, at any depth, in any letter case) or anything inside one, never
complete a bare-repository shape, and never change anything inside a directory that has
one. Reading stays allowed, and a whole folder that *holds* a repository may still be
removed or moved. Git commands (sandboxed) are how repositories change.
"""

from __future__ import annotations

import contextlib
import os
import re
import threading
from collections.abc import Generator, Iterable

__all__ = ["SHAPE_LOCK", "bare_shaped", "completes_shape", "dotgit_index", "is_dotgit", "is_shape_name",
           "shaped_ancestor"]

# Code points HFS+ ignores in names (git's is_hfs_dotgit): `.g\u200cit` is `.git` there.
_HFS_IGNORED = re.compile("[\u200c-\u200f\u202a-\u202e\u206a-\u206f\ufeff]")
_GIT_NAMES = ("HEAD", "objects", "refs", "commondir")  # the names git tests (exactly, or case-folded by the FS)
_SHAPE_NAMES = frozenset(n.casefold() for n in _GIT_NAMES)

# Held while a bare-repository shape is checked and the entry that could complete it is made, so that
# two calls cannot each add half (`objects` in one, `refs` in the other).
SHAPE_LOCK = threading.RLock()


def is_dotgit(name: str) -> bool:
    """Is `name` `.git` as some filesystem or git itself may see it? Case-insensitive (macOS, Windows,
    casefold ext4); HFS+ ignorable code points; NTFS trailing dots and spaces and the 8.3 name `git~1`."""
    folded = _HFS_IGNORED.sub("", name).casefold().rstrip(". ")
    return folded in (".git", "git~1")


def dotgit_index(parts: Iterable[str]) -> int | None:
    """The position of the first `.git` component in `parts`, or None."""
    for i, part in enumerate(parts):
        if is_dotgit(part):
            return i
    return None


def is_shape_name(name: str) -> bool:
    return name.casefold() in _SHAPE_NAMES


def _has(dirfd: int, name: str) -> bool:
    try:
        os.stat(name, dir_fd=dirfd, follow_symlinks=False)
    except OSError:
        return False
    return True


def bare_shaped(dirfd: int, adding: str | None = None) -> bool:
    """Does the directory `dirfd` look like a bare repository to git (with the entry `adding` made in it)?

    Entries of any type count: git only tests that they exist or can be searched (`objects` may be
    an executable file). `adding` is compared case-insensitively, which refuses a little more than
    git would on a case-sensitive filesystem."""
    extra = adding.casefold() if adding is not None else None

    def has(name: str) -> bool:
        return extra == name.casefold() or _has(dirfd, name)

    return has("HEAD") and (has("commondir") or (has("objects") and has("refs")))


def completes_shape(names: Iterable[str]) -> bool:
    """Would a directory holding exactly `names` be a bare repository? (for trees being copied)"""
    folded = {n.casefold() for n in names} & _SHAPE_NAMES
    return "head" in folded and ("commondir" in folded or {"objects", "refs"} <= folded)


def _up(fd: int) -> Generator[int, None, None]:
    """`fd` and each directory above it up to `/` (handles, closed as the walk moves on)."""
    cur = os.open(".", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=fd)
    try:
        for _ in range(4096):
            yield cur
            try:
                up = os.open("..", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=cur)
            except OSError:  # an ancestor above a root we may not search: nothing of ours to find there
                return
            if os.path.samestat(os.fstat(up), os.fstat(cur)):  # `/`
                os.close(up)
                return
            os.close(cur)
            cur = up
    finally:
        with contextlib.suppress(OSError):
            os.close(cur)


def shaped_ancestor(dirfd: int) -> int | None:
    """How many levels above `dirfd` (0: itself) the nearest bare-repository-shaped directory is; None if none.

    The walk goes on above the root: a root that lies inside a bare repository is such a place too.
    `O_PATH` handles only look at names; nothing outside a root is opened for reading."""
    with contextlib.closing(_up(dirfd)) as walk:
        for level, fd in enumerate(walk):
            if _has(fd, "HEAD") and bare_shaped(fd):
                return level
    return None
