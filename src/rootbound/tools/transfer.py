"""copy and move, within a root or between two roots (the tool must be allowed on both).

Symlink policy for recursive copies (seed OQ-004): nothing is ever read through
a symlink. A link inside a copied folder is recreated as a link (same text) when
its relative target, resolved lexically from the link's new place, stays inside
the destination root; an absolute link, or one that would lead outside, is
skipped and listed in `skipped`. FIFOs, sockets and devices are skipped too. A
symlink given as the copy's *source* is followed like read_file follows it (only
while it stays in the source root).

A folder is copied into a hidden temporary folder beside the destination and
renamed into place at the end, so a failure midway leaves no partial copy (and a
kill midway leaves one only until the next start: see `recovery`).
A move is a rename (atomic) whenever source and destination are on the same
filesystem — within a root or between roots; otherwise it is copy-then-delete,
refused up front if the copy would have to skip anything, so nothing is lost,
and recorded before it starts, so the next start finishes or rolls back a move
that a kill interrupted.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Iterator
from typing import Annotated, Literal

from pydantic import BaseModel, Field

from rootbound import fsops
from rootbound.errors import Denied, ToolError
from rootbound.fs import recovery
from rootbound.fs.beneath import open_beneath
from rootbound.roots import Root, display_path, file_type, split_path
from rootbound.tools.base import Args, CallContext, RelPath, ToolSpec, writes
from rootbound.tools.targets import (
    Guard,
    copy_would_create_repository,
    host_path,
    keep_owner,
    regular_or_none,
    resolve,
)

__all__ = ["TOOLS"]


class TransferArgs(Args):
    source_root: Annotated[str, Field(description="Root to copy/move from (see list_roots).")]
    source_path: RelPath
    dest_root: Annotated[str, Field(description="Root to copy/move to; may be the same as source_root.")]
    dest_path: Annotated[str, Field(description="Destination path relative to dest_root. If it is an existing "
                                                "folder, the source goes inside it under its own name.")]


class Skipped(BaseModel):
    path: str
    reason: str


class CopyResult(BaseModel):
    source: str
    destination: str = Field(description="Where the copy now is (inside dest_path if that was a folder).")
    is_directory: bool
    size: int = Field(description="Bytes copied (for a folder, the total of its files).")
    files_copied: int | None = Field(default=None, description="For a folder: files copied.")
    skipped: list[Skipped] | None = Field(default=None, description="For a folder: entries not copied "
                                                                    "(symlinks leading out of the root, FIFOs, ...).")


class MoveResult(BaseModel):
    source: str
    destination: str
    is_directory: bool
    method: Literal["rename", "copy"] = Field(description="rename: atomic; copy: copied across filesystems, "
                                                          "then the source was removed.")


def _joined(base: str, name: str) -> str:
    return f"{base.rstrip('/')}/{name}" if split_path(base) else name


def link_stays_inside(dest: list[str] | None, rel: str, text: str) -> bool:
    """Would symlink text `text`, placed at `rel` below the folder `dest` (root-relative), stay in the root?"""
    if dest is None or text.startswith("/"):
        return False
    where = [*dest, *rel.split("/")[:-1]]
    for comp in text.split("/"):
        if comp == "..":
            if not where:
                return False
            where.pop()
        elif comp not in ("", "."):
            where.append(comp)
    return True


@contextlib.contextmanager
def _destination(ctx: CallContext, root: Root, dest_path: str, name: str, guard: Guard, *, follow_final: bool
                 ) -> Iterator[tuple[fsops.Located, list[str] | None, str]]:
    """The entry a copy or move writes: `dest_path`, or `dest_path/name` when `dest_path` is a folder.

    Whether `dest_path` is a folder is decided through in-root symlinks; the final entry
    itself is followed only for copy (a move renames over a symlink, never through it).
    """
    with resolve(ctx, root, dest_path, make_parents=True, guard=guard) as (loc, real):
        if not loc.is_dir:
            if follow_final:
                yield loc, real, dest_path
            else:
                with resolve(ctx, root, dest_path, follow=False, guard=guard) as (loc2, real2):
                    yield loc2, real2, dest_path
            return
    inner = _joined(dest_path, name)
    with resolve(ctx, root, inner, follow=follow_final, guard=guard) as (loc, real):
        yield loc, real, inner


def _copy_folder(root: Root, sfd: int, sst: os.stat_result, loc: fsops.Located, real: list[str] | None, shown: str,
                 guard: Guard, *, refuse_skips: str | None = None, move: recovery.Move | None = None
                 ) -> fsops.CopyStats:
    """Copy the folder open at `sfd` to the new entry `loc`, all or nothing.

    Built in a temporary folder (recorded for recovery, so a kill leaves nothing behind
    after the next start) and renamed into place. With `refuse_skips` (the source's path,
    for a move), an entry that would be skipped makes the whole copy fail before anything
    appears at the destination; `move` is told the copy's inode before it is placed."""
    given = "/".join(split_path(shown))
    carried = refuse_skips is not None  # a move: the folder goes whole, with any repository it holds
    names: dict[str, set[str]] = {}  # the entries of each folder of the copy so far

    def check(rel: str) -> None:
        if not carried:
            parent, _, name = rel.rpartition("/")
            seen = names.setdefault(parent, set())
            seen.add(name)
            refused = copy_would_create_repository(shown, rel, seen)
            if refused is not None:
                raise Denied(refused)
        if guard:
            guard.check(f"{given}/{rel}", f"{shown}/{rel}", carried=rel if carried else None)
            if real is not None:
                guard.check_real(root, [*real, rel], f"{shown}/{rel}", carried=rel if carried else None)

    stats = fsops.CopyStats()
    with fsops.temp_dir(loc.dirfd) as (tfd, tmp):
        if move is not None:
            move.made(os.fstat(tfd))
        try:
            fsops.copy_tree(sfd, tfd, stats, check=check, link_ok=lambda rel, text: link_stays_inside(real, rel, text))
        except fsops.EntryError as exc:
            raise ToolError(f"copy failed at {exc.rel}: {exc.exc.strerror}; nothing was changed") from None
        if refuse_skips is not None and stats.skipped:
            listed = ", ".join(f"{p} ({r})" for p, r in stats.skipped[:5])
            raise ToolError(f"cannot move {refuse_skips} to another filesystem: {len(stats.skipped)} entries "
                            f"cannot be copied safely: {listed}; nothing was changed")
        os.fchmod(tfd, stat.S_IMODE(sst.st_mode) & 0o777)
        recovery.kill_point("copied")
        try:
            fsops.rename_noreplace(loc.dirfd, tmp, loc.dirfd, loc.name)
        except FileExistsError:
            raise ToolError(f"destination already exists: {shown}") from None
    return stats


def _skipped(stats: fsops.CopyStats) -> list[Skipped] | None:
    return [Skipped(path=p, reason=r) for p, r in stats.skipped] or None


# -- copy -----------------------------------------------------------------------------------------


def _source_name(root: Root, parts: list[str], fd: int) -> str:
    if parts and parts[-1] != "..":
        return parts[-1]
    real = fsops.real_relpath(fd, root.fd)
    if real == []:
        return root.name  # the root itself: its copy is named after the root
    if real:
        return real[-1]
    raise ToolError("cannot tell the source's name; give its path without a trailing '..'")


def _open_source(root: Root, parts: list[str], path: str) -> int:
    """Open a copy's source for reading: what its path leads to, through symlinks that stay in the root.

    Looked at through an O_PATH handle first, so a FIFO or device is refused without being
    opened (opening one can wake a waiting writer, or do what the device does on open)."""
    try:
        probe = open_beneath(root.fd, parts, os.O_PATH | os.O_CLOEXEC)
    except FileNotFoundError:
        raise ToolError(f"source file not found: {path}") from None
    except OSError as exc:
        raise root.os_error(exc, path) from None
    try:
        st = os.fstat(probe)
        if not stat.S_ISDIR(st.st_mode) and not stat.S_ISREG(st.st_mode):
            raise ToolError(f"not a regular file: {path} is a {file_type(st.st_mode)}")
        try:  # the inode the probe holds, not the path again
            return os.open(f"/proc/self/fd/{probe}", os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:  # no /proc: open the path again, and check it is the same entry
            fd = open_beneath(root.fd, parts, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
            if not os.path.samestat(os.fstat(fd), st):
                os.close(fd)
                raise ToolError(f"{path} changed while being opened; try again") from None
            return fd
    except OSError as exc:
        raise root.os_error(exc, path) from None
    finally:
        os.close(probe)


def copy(ctx: CallContext, args: TransferArgs) -> CopyResult:
    src_root = ctx.roots.get_for(args.source_root, "copy")
    dst_root = ctx.roots.get_for(args.dest_root, "copy")
    guard = Guard(ctx)
    parts = split_path(args.source_path)
    sfd = _open_source(src_root, parts, args.source_path)
    try:
        sst = os.fstat(sfd)
        is_dir = stat.S_ISDIR(sst.st_mode)
        name = _source_name(src_root, parts, sfd)
        with _destination(ctx, dst_root, args.dest_path, name, guard, follow_final=True) as (loc, real, shown):
            if is_dir:
                if loc.st is not None:
                    raise ToolError(f"destination already exists: {shown}; copy does not merge folders - remove "
                                    "it first or choose a new name")
                if fsops.is_inside(loc.dirfd, sst):
                    raise ToolError(f"cannot copy a folder into itself: {args.source_path} -> {shown}")
                stats = _copy_folder(dst_root, sfd, sst, loc, real, shown, guard)
                return CopyResult(source=display_path(parts), destination=display_path(split_path(shown)),
                                  is_directory=True, size=stats.bytes, files_copied=stats.files,
                                  skipped=_skipped(stats))
            if loc.name == ".":
                raise ToolError(f"destination already exists as a folder: {shown}")
            with fsops.target_lock(loc.dirfd, loc.name):
                st = regular_or_none(loc, shown)
                size = fsops.write_file(
                    loc.dirfd, loc.name, lambda fd: fsops.copy_fd(sfd, fd), replace=True,
                    perms=stat.S_IMODE(st.st_mode) if st else sst.st_mode & 0o777 & ~fsops.UMASK,
                    owner=keep_owner(st))
    finally:
        os.close(sfd)
    return CopyResult(source=display_path(parts), destination=display_path(split_path(shown)), is_directory=False,
                      size=size)


# -- move -----------------------------------------------------------------------------------------


def move(ctx: CallContext, args: TransferArgs) -> MoveResult:
    src_root = ctx.roots.get_for(args.source_root, "move")
    dst_root = ctx.roots.get_for(args.dest_root, "move")
    if src_root.is_root(args.source_path):
        raise ToolError("cannot move root directory")
    guard = Guard(ctx)
    source = args.source_path
    # The source entry itself moves: a symlink is moved as a link, never followed.
    with resolve(ctx, src_root, source, follow=False, guard=guard) as (sloc, sreal):
        if sloc.name == ".":
            raise ToolError(f"invalid path: must not end with '..': {source}")
        if sloc.st is None:
            raise ToolError(f"source file not found: {source}")
        sst = sloc.st
        is_dir = stat.S_ISDIR(sst.st_mode)
        inside, links = _contents(sloc, sst, guard)
        _check_tree(guard, src_root, inside, source, sreal)  # moving a protected file away removes it
        with _destination(ctx, dst_root, args.dest_path, sloc.name, guard, follow_final=False) as (loc, real, shown):
            tst = fsops.lstat_or_none(loc.dirfd, loc.name) if loc.name != "." else loc.st
            if tst is not None and os.path.samestat(tst, sst):
                # Already there: the same entry (nothing to do), or a hard link of it (drop the source name).
                if not (os.path.samestat(os.fstat(loc.dirfd), os.fstat(sloc.dirfd)) and loc.name == sloc.name):
                    os.unlink(sloc.name, dir_fd=sloc.dirfd)
                return MoveResult(source=display_path(split_path(source)),
                                  destination=display_path(split_path(shown)), is_directory=is_dir, method="rename")
            if tst is not None and (stat.S_ISDIR(tst.st_mode) or is_dir):
                raise ToolError(f"destination already exists: {shown} ({file_type(tst.st_mode)}); a move replaces "
                                "only a file with a file")
            _check_tree(guard, dst_root, inside, shown, real)  # nor may a folder plant one at its new place
            _check_links(links, (src_root, sreal), (dst_root, real), is_dir, source)
            method: Literal["rename", "copy"] = "rename"
            try:
                if is_dir:
                    fsops.rename_noreplace(sloc.dirfd, sloc.name, loc.dirfd, loc.name)
                else:
                    os.rename(sloc.name, loc.name, src_dir_fd=sloc.dirfd, dst_dir_fd=loc.dirfd)
            except OSError as exc:
                if exc.errno == errno.EXDEV:  # another filesystem: copy, then delete
                    method = "copy"
                    _move_by_copy(dst_root, sloc, sst, loc, real, shown, guard, source)
                elif exc.errno == errno.EINVAL:
                    raise ToolError(f"cannot move a folder into itself: {source} -> {shown}") from None
                elif exc.errno in (errno.EEXIST, errno.ENOTEMPTY):
                    raise ToolError(f"destination already exists: {shown}") from None
                else:
                    raise
    return MoveResult(source=display_path(split_path(source)), destination=display_path(split_path(shown)),
                      is_directory=is_dir, method=method)


def _check_tree(guard: Guard, root: Root, rels: list[str], base: str, real: list[str] | None) -> None:
    """The protected paths a folder moved whole carries (a repository it holds goes with it)."""
    given = "/".join(split_path(base))
    for rel in rels:
        guard.check(f"{given}/{rel}", f"{base}/{rel}", carried=rel)
        if real is not None:
            guard.check_real(root, [*real, rel], f"{base}/{rel}", carried=rel)


def _contents(sloc: fsops.Located, sst: os.stat_result, guard: Guard) -> tuple[list[str], list[tuple[str, str]]]:
    """What a move carries: the paths inside a folder (for the protected-path rules) and every
    symlink in it as (path inside, link text); a symlink source is the one link, at ""."""
    if stat.S_ISLNK(sst.st_mode):
        return [], [("", os.readlink(sloc.name, dir_fd=sloc.dirfd))]
    if not stat.S_ISDIR(sst.st_mode):
        return [], []
    inside: list[str] = []
    links: list[tuple[str, str]] = []
    for rel, text in fsops.walk_entries(sloc.dirfd, sloc.name):
        if guard:
            inside.append(rel)
        if text is not None:
            links.append((rel, text))
    return inside, links


def _host_target(root: Root, base: list[str], rel: str, text: str) -> str:
    return os.path.normpath("/".join([host_path(root), *base, *rel.split("/")[:-1], text]))


def _check_links(links: list[tuple[str, str]], src: tuple[Root, list[str] | None],
                 dst: tuple[Root, list[str] | None], is_dir: bool, source: str) -> None:
    """A move carries links by their text, so a relative link's target moves with it. Refuse a move
    that would turn a link into one leading out of the destination root (somewhere it did not lead
    before). Absolute links lead where they always did, and the resolver refuses them anyway."""
    (src_root, sreal), (dst_root, dreal) = src, dst
    # The place a link's text is resolved from: the folder moved, or the link's own parent.
    sbase = sreal if is_dir or sreal is None else sreal[:-1]
    dbase = dreal if is_dir or dreal is None else dreal[:-1]
    for rel, text in links:
        if text.startswith("/"):
            continue
        rel = rel or "link"  # only the directory part of `rel` matters
        if link_stays_inside(dbase, rel, text):
            continue
        if sbase is not None and dbase is not None and \
                _host_target(src_root, sbase, rel, text) == _host_target(dst_root, dbase, rel, text):
            continue  # it already led out of the root, to the same place
        what = f"symlink {source}" if not is_dir else f"{source}: its symlink {rel}"
        raise ToolError(f"cannot move {what} there: from its new place the link would lead outside the "
                        "destination root; nothing was changed")


def _move_by_copy(dst_root: Root, sloc: fsops.Located, sst: os.stat_result, loc: fsops.Located,
                  real: list[str] | None, shown: str, guard: Guard, source: str) -> None:
    """Copy, then delete the source, with a recovery record around both: a server killed at any point
    leaves the source whole (the partial copy is removed on the next start), or the copy in place and
    the source removed (the next start finishes removing it)."""
    mode = sst.st_mode
    if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode) or stat.S_ISLNK(mode)):
        raise ToolError(f"cannot move {source} to another filesystem: it is a {file_type(mode)}")
    text = ""
    if stat.S_ISLNK(mode):
        text = os.readlink(sloc.name, dir_fd=sloc.dirfd)
        parent = real[:-1] if real else None
        if not link_stays_inside(parent, loc.name, text):
            raise ToolError(f"cannot move symlink {source} to another filesystem: it would lead outside the "
                            "destination root; nothing was changed")
    move = recovery.Move(sloc.dirfd, sloc.name, sst, loc.dirfd, loc.name)
    try:
        if stat.S_ISLNK(mode):
            _place_symlink(text, loc, move)
        else:
            _copy_into_place(dst_root, sloc, sst, loc, real, shown, guard, source, move)
        recovery.kill_point("move-renamed")
        move.placed()
        recovery.kill_point("move-placed")
        try:
            if stat.S_ISDIR(mode):
                fsops.remove_tree(sloc.dirfd, sloc.name)
            else:
                os.unlink(sloc.name, dir_fd=sloc.dirfd)
        except OSError as exc:
            raise ToolError(f"{source} was copied to {shown}, but removing the source failed ({exc.strerror}); "
                            "both may now exist in part") from None
    finally:
        move.done()


def _place_symlink(text: str, loc: fsops.Located, move: recovery.Move) -> None:
    tmp = fsops.temp_name()
    with recovery.temp_entry(loc.dirfd, tmp):
        os.symlink(text, tmp, dir_fd=loc.dirfd)
        try:
            move.made(os.stat(tmp, dir_fd=loc.dirfd, follow_symlinks=False))
            os.rename(tmp, loc.name, src_dir_fd=loc.dirfd, dst_dir_fd=loc.dirfd)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=loc.dirfd)
            raise


def _copy_into_place(dst_root: Root, sloc: fsops.Located, sst: os.stat_result, loc: fsops.Located,
                     real: list[str] | None, shown: str, guard: Guard, source: str, move: recovery.Move) -> None:
    mode = sst.st_mode
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | (os.O_DIRECTORY if stat.S_ISDIR(mode) else 0)
    sfd = os.open(sloc.name, flags, dir_fd=sloc.dirfd)
    try:
        if not os.path.samestat(os.fstat(sfd), sst):
            raise ToolError(f"{source} changed while being moved; nothing was changed, try again")
        if stat.S_ISREG(mode):
            fsops.write_file(loc.dirfd, loc.name, lambda fd: fsops.copy_fd(sfd, fd), replace=True,
                             perms=stat.S_IMODE(mode) & 0o777, owner=keep_owner(sst), made=move.made)
        else:
            if fsops.is_inside(loc.dirfd, sst):
                raise ToolError(f"cannot move a folder into itself: {source} -> {shown}")
            _copy_folder(dst_root, sfd, sst, loc, real, shown, guard, refuse_skips=source, move=move)
    finally:
        os.close(sfd)


TOOLS = [
    ToolSpec(
        "copy", "Copy a file or folder",
        "Copy a file or a folder (recursively) to a path in the same or another root; copy must be allowed on "
        "both roots. If dest_path is an existing folder, the source is copied inside it under its own name. An "
        "existing destination file is replaced atomically; an existing destination folder is not merged (error). "
        "Missing parent folders are created. Inside a copied folder, symlinks are copied as links only when they "
        "stay inside the destination root; others (and FIFOs, sockets, devices) are skipped and listed. A folder "
        "holding a git repository (.git, or a bare repository) is not copied (use git clone), and nothing is "
        "copied into a .git directory or onto a protected path (as for write_file).",
        TransferArgs, CopyResult, writes("Copy a file or folder", destructive=True, idempotent=True), copy),
    ToolSpec(
        "move", "Move or rename",
        "Move or rename a file or folder, within a root or to another root; move must be allowed on both roots. "
        "If dest_path is an existing folder, the source moves inside it under its own name. An existing file at "
        "the destination is replaced; an existing folder is not. Atomic (a rename) on one filesystem; across "
        "filesystems it copies and then removes the source, and refuses beforehand if anything could not be "
        "copied. A symlink is moved as a link; a move that would make a relative link lead outside its root is "
        "refused. The root itself cannot be moved. A folder holding a git repository moves whole; .git itself, "
        "anything inside a .git directory, and protected paths (as for write_file) are not moved.",
        TransferArgs, MoveResult, writes("Move or rename", destructive=True, idempotent=False), move),
]
