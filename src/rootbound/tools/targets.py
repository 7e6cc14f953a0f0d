"""Where a writing tool acts: a path in a root resolved for change, with the guard rails applied.

Shared by the writing and transfer tools: resolves beneath the root's handle
(`fsops.locate`), refuses git's repository internals (`gitdirs.py`) and protected
paths (by the spelling the agent gave and by where the path really leads, the
root's own host path included), turns OS errors into agent-facing messages, and
removes the parent directories it created when the operation then fails — so an
error changes nothing.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import stat
from collections.abc import Iterator

from rootbound import fsops, gitdirs
from rootbound.errors import Denied, ToolError
from rootbound.protected import Matcher, matcher
from rootbound.roots import Root, file_type, split_path
from rootbound.tools.base import CallContext

__all__ = ["Guard", "check_expected", "copy_would_create_repository", "current_sha256", "host_path", "keep_owner",
           "read_current", "real_parts", "regular_or_none", "resolve", "sha256", "unchanged_since"]


class Guard:
    """The rules of one writing call: git's repository internals (always; `gitdirs.py`) and the
    operator's protected_paths. `bool(guard)`: are there protected_paths rules to walk folders for?"""

    def __init__(self, ctx: CallContext) -> None:
        self.rules: Matcher = matcher(ctx.config.protected_paths)

    def __bool__(self) -> bool:
        return bool(self.rules)

    def check(self, rel: str, shown: str, *, carried: str | None = None) -> None:
        """`rel` (root-relative, "/"-separated) is a path this call changes.

        `carried`: the part of `rel` inside a folder that is removed or moved as a whole; an
        entry of a repository that folder holds goes with it (its own path was checked already)."""
        if carried is not None and gitdirs.dotgit_index(carried.split("/")) is not None:
            return
        parts = rel.split("/")
        at = gitdirs.dotgit_index(parts)
        if at is not None:
            raise Denied(_inside_git(shown) if at < len(parts) - 1 else
                         f"protected path: {shown} is a git directory or file (.git); {_NEVER_GITDIR}")
        rule = self.rules.rule_for(rel) if self.rules else None
        if rule is not None:
            raise Denied(f"protected path: {shown} matches the protected_paths rule {rule!r}; the file tools may "
                         "not write, patch, remove or move onto it (the operator can change protected_paths)")

    def check_real(self, root: Root, where: list[str], shown: str, *, carried: str | None = None) -> None:
        """Check a real location, relative to the root and also as a host path.

        The host path matters when the root itself lies inside a protected tree: a client
        root narrowed to `repo/.git` must not make `hooks/pre-commit` an ordinary path.
        (Anchored rules cannot match the host spelling: they stay root-relative.)
        """
        self.check("/".join(where), shown, carried=carried)
        host = _host_parts(root)
        if gitdirs.dotgit_index(host) is not None:
            raise Denied(_inside_git(shown, root))
        if self.rules:
            self.check("/".join([*host, *where]), shown, carried=carried)

    def check_located(self, root: Root, loc: fsops.Located, given: list[str], shown: str) -> list[str] | None:
        """Check the given spelling and the real location; return the real root-relative path (None if unknown)."""
        self.check("/".join(given), shown)
        self.check("/".join(_lexical(given)), shown)  # `.git/x/../config`, even where /proc cannot tell
        where = real_parts(root, loc)
        if where is not None:
            self.check_real(root, where, shown)
        elif gitdirs.dotgit_index(_host_parts(root)) is not None:
            raise Denied(_inside_git(shown, root))
        return where

    def check_shape(self, loc: fsops.Located, shown: str, held: contextlib.ExitStack) -> None:
        """Refuse a change inside a directory git takes for a bare repository, and one that would make one.

        Entries that could complete the shape are checked and made under `gitdirs.SHAPE_LOCK`:
        parent folders made for this call exist already (so a racing call sees them), and a
        final entry with one of git's names is made before the lock is released (`held`)."""
        final = loc.name != "." and gitdirs.is_shape_name(loc.name)
        with contextlib.ExitStack() as briefly:
            if final:
                held.enter_context(gitdirs.SHAPE_LOCK)
            elif loc.made:
                briefly.enter_context(gitdirs.SHAPE_LOCK)
            if gitdirs.shaped_ancestor(loc.dirfd) is not None:
                raise Denied(f"protected path: {shown} is inside a directory that git treats as a bare repository "
                             f"(it holds HEAD and objects and refs, or HEAD and commondir); {_NEVER_INTERNALS}")
            if final and gitdirs.bare_shaped(loc.dirfd, adding=loc.name):
                raise Denied(_makes_bare(shown))


_NEVER_INTERNALS = "the file tools never change a repository's internals (git commands do that)"
_NEVER_GITDIR = "the file tools never create, change, remove or move one, nor anything inside it (git commands do that)"


def _inside_git(shown: str, root: Root | None = None) -> str:
    where = f" (root {root.name} lies inside one)" if root is not None else ""
    return f"protected path: {shown} is inside a git directory{where}; {_NEVER_INTERNALS}"


def _makes_bare(shown: str) -> str:
    parent = shown.rstrip("/").rpartition("/")[0] or "the root"
    return (f"protected path: {shown} would make {parent} a directory that git treats as a bare repository (HEAD "
            "and objects and refs, or HEAD and commondir), whose config git would obey; the file tools never "
            "create a repository (git init does)")


def copy_would_create_repository(shown: str, rel: str, names: set[str]) -> str | None:
    """Why copying the entry `rel` (last of `names`, the entries of its folder so far) makes a repository."""
    name = rel.rpartition("/")[2]
    if gitdirs.is_dotgit(name):
        return (f"protected path: {shown}/{rel} is a git directory or file (.git): copying it would create a "
                "repository; copy the folder without it, or use git clone")
    if gitdirs.completes_shape(names):
        return _makes_bare(f"{shown}/{rel}")
    return None


def host_path(root: Root) -> str:
    """The root's host path now (it may have been renamed since it was opened)."""
    return fsops.fd_path(root.fd) or root.real_path


def _host_parts(root: Root) -> list[str]:
    return [p for p in host_path(root).split("/") if p]


def _lexical(parts: list[str]) -> list[str]:
    """`parts` with each `..` cancelling the name before it (a spelling to match rules on, never to open)."""
    out: list[str] = []
    for part in parts:
        if part != "..":
            out.append(part)
        elif out:
            out.pop()
    return out


@contextlib.contextmanager
def resolve(ctx: CallContext, root: Root, path: str, *, follow: bool = True, make_parents: bool = False,
            guard: Guard | None = None) -> Iterator[tuple[fsops.Located, list[str] | None]]:
    """Yield `(located target, its real root-relative parts or None)`; OS errors become agent messages.

    On any failure inside the block, parent directories made for the target are removed again.
    """
    parts = split_path(path)
    if guard is not None:
        guard.check("/".join(parts), path)
    try:
        loc = fsops.locate(root.fd, parts, follow=follow, make_parents=make_parents)
    except OSError as exc:
        raise root.os_error(exc, path) from None
    ok = False
    try:
        with contextlib.ExitStack() as held:
            if guard is not None:
                real = guard.check_located(root, loc, parts, path)
                guard.check_shape(loc, path, held)
            else:
                real = real_parts(root, loc)
            yield loc, real
            ok = True
    except OSError as exc:
        raise root.os_error(exc, path) from None
    finally:
        if not ok:
            fsops.undo_dirs(root.fd, loc.made)
        loc.close()


def real_parts(root: Root, loc: fsops.Located) -> list[str] | None:
    """Where the target really is, relative to the root (through symlinks and `..`); None if unknown."""
    real = fsops.real_relpath(loc.dirfd, root.fd)
    if real is None:
        return None
    return real if loc.name == "." else [*real, loc.name]


def regular_or_none(loc: fsops.Located, path: str) -> os.stat_result | None:
    """The target's current lstat if it is a regular file, None if absent; anything else is an error."""
    st = fsops.lstat_or_none(loc.dirfd, loc.name) if loc.name != "." else loc.st
    if st is None:
        return None
    if stat.S_ISDIR(st.st_mode):
        raise ToolError(f"path is a directory, not a file: {path}")
    if stat.S_ISLNK(st.st_mode):
        raise ToolError(f"{path} was replaced by a symlink while being written; nothing was changed, try again")
    if not stat.S_ISREG(st.st_mode):
        raise ToolError(f"not a regular file: {path} is a {file_type(st.st_mode)}")
    return st


def read_current(loc: fsops.Located, limit: int, path: str) -> tuple[bytes, os.stat_result]:
    """The whole content of the regular file at `loc` (at most `limit` bytes)."""
    fd = os.open(loc.name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=loc.dirfd)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ToolError(f"not a regular file: {path} is a {file_type(st.st_mode)}")
        if st.st_size > limit:
            raise ToolError(f"file too large to patch: {path} is {st.st_size} bytes, the limit is {limit}")
        chunks, offset = [], 0
        while chunk := os.pread(fd, 1024 * 1024, offset):
            chunks.append(chunk)
            offset += len(chunk)
        return b"".join(chunks), st
    finally:
        os.close(fd)


def current_sha256(loc: fsops.Located) -> str:
    fd = os.open(loc.name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=loc.dirfd)
    try:
        return fsops.sha256_fd(fd)
    finally:
        os.close(fd)


def check_expected(expected: str | None, current: str | None, path: str) -> None:
    """The compare-and-swap guard: refuse when the file is not the version the agent last saw."""
    if expected is None:
        return
    if current is None:
        raise ToolError(f"file changed: {path} does not exist, but expected_sha256 {expected} was given; "
                        "nothing was written")
    if current != expected.lower():
        raise ToolError(f"file changed since you last read it: {path} has sha256 {current}, not the expected "
                        f"{expected.lower()}; nothing was written — read it again, then retry")


def unchanged_since(loc: fsops.Located, before: os.stat_result | None, path: str) -> None:
    """Raise if the target was created, replaced or modified since `before` (by someone outside this server)."""
    now = fsops.lstat_or_none(loc.dirfd, loc.name)
    same = (now is None and before is None) or (
        now is not None and before is not None and (now.st_ino, now.st_size, now.st_mtime_ns)
        == (before.st_ino, before.st_size, before.st_mtime_ns))
    if not same:
        raise ToolError(f"{path} was changed by someone else while this call ran; nothing was written, try again")


def keep_owner(st: os.stat_result | None) -> tuple[int, int] | None:
    """The owner to give a replacement of a file with status `st`, when it is not us (we run as root)."""
    if st is None or (st.st_uid, st.st_gid) == (os.geteuid(), os.getegid()):
        return None
    return st.st_uid, st.st_gid


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
