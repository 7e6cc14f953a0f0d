"""What the file tools never change: protected paths, and git's repositories. All the checks, in one place.

**Protected paths** are the files that turn a file write into code execution or a changed
agent setup: git hooks and config, `.mcp.json`, shell start-up files (the defaults in
`config.DEFAULT_PROTECTED_PATHS`; the operator changes the list with `protected_paths`).
Rules are root-relative globs: `*` and `?` stay within one path component, `**` spans any
number of components, `[...]` is a character class. A rule matches at any depth
(`.git/config` also protects `vendor/lib/.git/config`, since a root often holds several
repositories) unless it starts with `/`, which anchors it at the root. `dir/**` protects the
directory itself and everything below it. Matching ignores case, because on a
case-insensitive filesystem `.GIT/config` is `.git/config`.

**Repositories** (SPEC v2): git runs what a repository's configuration says
(`core.fsmonitor`, `core.hooksPath`, aliases, hooks, ...) whenever a user runs it in that
repository's working tree, and it finds that configuration through indirections plain files
can set up: a `.git` directory, or a `.git` *file* (`gitdir: elsewhere`), in the directory or a
parent; inside it `commondir`, `config.worktree`, `modules/*/config`, `info/`, `worktrees/*`;
and any directory shaped like a bare repository — `HEAD` plus `objects` and `refs`, or `HEAD`
plus a `commondir` file — is one, whose `config` git reads when run in it or below it. So the
file tools never create, change, remove or rename a `.git` entry (file, directory or symlink,
at any depth, in any letter case) or anything inside one, never complete a bare-repository
shape, and never change anything inside a directory that has one. Reading stays allowed, and
a whole folder that *holds* a repository may still be removed or moved. Git commands
(sandboxed) are how repositories change.

A path is checked by the spelling the agent gave, by its lexical form, and by where it really
leads (read from the handles), the root's own host path included: a client root narrowed to
`repo/.git` must not make `hooks/pre-commit` an ordinary path.
"""

from __future__ import annotations

import contextlib
import functools
import re
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from rootbound.errors import Kind, PathError
from rootbound.fs.handles import ancestors, lstat_or_none
from rootbound.fs.paths import lexical

__all__ = ["SHAPE_LOCK", "Guard", "Matcher", "Site", "bare_shaped", "is_dotgit", "matcher"]


# -- protected_paths rules -------------------------------------------------------------------------


def _component(glob: str) -> str:
    out, i = [], 0
    while i < len(glob):
        c = glob[i]
        if c == "*":
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif c == "[" and (end := glob.find("]", i + 2)) > 0:
            body = glob[i + 1:end]
            if body[0] in "!^":
                body = "^" + body[1:]
            out.append("[" + body.replace("\\", "\\\\").replace("/", "") + "]")
            i = end
        else:
            out.append(re.escape(c))
        i += 1
    return "".join(out)


def _translate(rule: str) -> str:
    anchored = rule.startswith("/")
    comps = [c for c in rule.strip("/").split("/") if c not in ("", ".")]
    regex = ""
    after_globstar = True  # no separator needed before the first component
    for n, comp in enumerate(comps):
        last = n == len(comps) - 1
        if comp == "**":
            if last:
                regex += "(?:/.*)?" if regex else ".*"
            else:
                regex += "(?:[^/]+/)*" if not regex else "/(?:[^/]+/)*"
            after_globstar = True
            continue
        regex += ("" if after_globstar else "/") + _component(comp)
        after_globstar = False
    return regex if anchored else "(?:[^/]+/)*" + regex


class Matcher:
    """The compiled rules; `rule_for(path)` names the first rule that protects `path`."""

    def __init__(self, rules: Sequence[str]) -> None:
        self.rules = [r for r in rules if r.strip("/")]
        self._compiled = [re.compile(_translate(r), re.IGNORECASE | re.DOTALL) for r in self.rules]

    def __bool__(self) -> bool:
        return bool(self.rules)

    def rule_for(self, path: str) -> str | None:
        """`path` is root-relative with "/" separators, no leading "/"."""
        for rule, regex in zip(self.rules, self._compiled, strict=True):
            if regex.fullmatch(path):
                return rule
        return None


@functools.lru_cache(maxsize=8)
def _cached(rules: tuple[str, ...]) -> Matcher:
    return Matcher(rules)


def matcher(rules: Sequence[str]) -> Matcher:
    """The compiled form of a configuration's `protected_paths` (compiled once per distinct list)."""
    return _cached(tuple(rules))


# -- where git finds a repository ------------------------------------------------------------------

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


def _dotgit_index(parts: Iterable[str]) -> int | None:
    """The position of the first `.git` component in `parts`, or None."""
    for i, part in enumerate(parts):
        if is_dotgit(part):
            return i
    return None


def _is_shape_name(name: str) -> bool:
    return name.casefold() in _SHAPE_NAMES


def _has(dirfd: int, name: str) -> bool:
    try:
        return lstat_or_none(dirfd, name) is not None
    except OSError:
        return False


def bare_shaped(dirfd: int, adding: str | None = None) -> bool:
    """Does the directory `dirfd` look like a bare repository to git (with the entry `adding` made in it)?

    Entries of any type count: git only tests that they exist or can be searched (`objects` may be
    an executable file). `adding` is compared case-insensitively, which refuses a little more than
    git would on a case-sensitive filesystem."""
    extra = adding.casefold() if adding is not None else None

    def has(name: str) -> bool:
        return extra == name.casefold() or _has(dirfd, name)

    return has("HEAD") and (has("commondir") or (has("objects") and has("refs")))


def _completes_shape(names: Iterable[str]) -> bool:
    """Would a directory holding exactly `names` be a bare repository? (for trees being copied)"""
    folded = {n.casefold() for n in names} & _SHAPE_NAMES
    return "head" in folded and ("commondir" in folded or {"objects", "refs"} <= folded)


def _shaped_ancestor(dirfd: int) -> bool:
    """Is `dirfd`, or a directory above it, shaped like a bare repository?

    The walk goes on above the root: a root that lies inside a bare repository is such a place too.
    `O_PATH` handles only look at names; nothing outside a root is opened for reading."""
    with contextlib.closing(ancestors(dirfd)) as up:
        return any(_has(fd, "HEAD") and bare_shaped(fd) for fd in up)


# -- the checks --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Site:
    """A root as the rules see it: its name, and its host path now as components."""

    root: str
    host: list[str]

    @property
    def host_path(self) -> str:
        return "/" + "/".join(self.host)


class Guard:
    """The rules of one writing call: git's repositories (always) and the operator's protected_paths.

    Every check raises a `PathError` of a denial kind, with the path as the agent will read it."""

    def __init__(self, rules: Sequence[str]) -> None:
        self.rules: Matcher = matcher(rules)

    def check(self, rel: str, shown: str, *, carried: str | None = None) -> None:
        """`rel` (root-relative, "/"-separated) is a path this call changes.

        `carried`: the part of `rel` inside a folder that is removed or moved as a whole; an
        entry of a repository that folder holds goes with it (its own path was checked already)."""
        if carried is not None and _dotgit_index(carried.split("/")) is not None:
            return
        parts = rel.split("/")
        at = _dotgit_index(parts)
        if at is not None:
            raise PathError("guard", shown, Kind.INSIDE_DOTGIT if at < len(parts) - 1 else Kind.IS_DOTGIT)
        rule = self.rules.rule_for(rel) if self.rules else None
        if rule is not None:
            raise PathError("guard", shown, Kind.PROTECTED, rule=rule)

    def check_real(self, site: Site, where: list[str], shown: str, *, carried: str | None = None) -> None:
        """Check a real location, relative to the root and also as a host path.

        (Anchored rules cannot match the host spelling: they stay root-relative.)"""
        self.check("/".join(where), shown, carried=carried)
        if _dotgit_index(site.host) is not None:
            raise PathError("guard", shown, Kind.ROOT_INSIDE_DOTGIT, root=site.root)
        if self.rules:
            self.check("/".join([*site.host, *where]), shown, carried=carried)

    def check_target(self, site: Site, given: list[str], real: list[str] | None, shown: str) -> None:
        """A target as given (`given`, its lexical form) and where it really is (`real`; None if unknown)."""
        self.check("/".join(given), shown)
        self.check("/".join(lexical(given)), shown)  # `.git/x/../config`, even where /proc cannot tell
        if real is not None:
            self.check_real(site, real, shown)
        elif _dotgit_index(site.host) is not None:
            raise PathError("guard", shown, Kind.ROOT_INSIDE_DOTGIT, root=site.root)

    def check_inside(self, site: Site, given: str, real: list[str] | None, shown: str, rel: str, *,
                     carried: bool) -> None:
        """An entry `rel` of a folder changed whole (`given`: its spelling, `real`: where it is, `shown`: as the
        agent reads it): removed, moved (`carried`: a repository inside goes with it), or copied into place."""
        if not self.rules:
            return  # only protected_paths rules can match inside: the folder's own path was checked
        where = f"{shown}/{rel}"
        self.check(f"{given}/{rel}", where, carried=rel if carried else None)
        if real is not None:
            self.check_real(site, [*real, rel], where, carried=rel if carried else None)

    def check_shape(self, dirfd: int, name: str, made_dirs: bool, shown: str, held: contextlib.ExitStack) -> None:
        """Refuse a change inside a directory git takes for a bare repository, and one that would make one.

        Entries that could complete the shape are checked and made under `SHAPE_LOCK`: parent
        folders made for this call exist already (so a racing call sees them), and a final entry
        with one of git's names is made before the lock is released (`held`)."""
        final = name != "." and _is_shape_name(name)
        with contextlib.ExitStack() as briefly:
            if final:
                held.enter_context(SHAPE_LOCK)
            elif made_dirs:
                briefly.enter_context(SHAPE_LOCK)
            if _shaped_ancestor(dirfd):
                raise PathError("guard", shown, Kind.INSIDE_BARE_REPOSITORY)
            if final and bare_shaped(dirfd, adding=name):
                raise PathError("guard", shown, Kind.MAKES_BARE_REPOSITORY)

    def check_copied(self, rel: str, names: set[str], shown: str) -> None:
        """Copying the entry `rel` (last of `names`, the entries of its folder so far) must not make a repository."""
        where = f"{shown}/{rel}"
        if is_dotgit(rel.rpartition("/")[2]):
            raise PathError("guard", where, Kind.COPIES_DOTGIT)
        if _completes_shape(names):
            raise PathError("guard", where, Kind.MAKES_BARE_REPOSITORY)
