"""copy and move, within a root or between two roots (`Root.copy`, `Root.rename`).

Symlink policy for folder copies (seed OQ-004): nothing is ever read through a symlink.
A link inside a copied folder is recreated as a link (same text) when its relative
target, resolved lexically from the link's new place, stays inside the destination
root; an absolute link, or one that would lead outside, is skipped and listed. FIFOs,
sockets and devices are skipped too. A symlink given as the copy's *source* is followed
like read_file follows it (only while it stays in the source root).

If the destination is an existing folder, the source goes inside it under its own name.
A folder is copied into a hidden temporary folder beside the destination and renamed
into place at the end, so a failure midway leaves no partial copy (and a kill midway
leaves one only until the next start: see `recovery`). A move is a rename (atomic)
whenever source and destination are on the same filesystem — within a root or between
roots; otherwise it is copy-then-delete, refused up front if the copy would have to skip
anything, so nothing is lost, and recorded before it starts, so the next start finishes
or rolls back a move that a kill interrupted. A move carries links by their text, so it
is refused where a relative link would come to lead out of its root.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from rootbound.errors import Kind, PathError
from rootbound.fs import atomic, journaling, recovery, trees
from rootbound.fs.content import copy_fd
from rootbound.fs.files import Kinds
from rootbound.fs.guards import Guard, Site
from rootbound.fs.handles import is_inside
from rootbound.fs.paths import file_type, split_path, stays_inside

if TYPE_CHECKING:
    from rootbound.fs.root import Root, Target

__all__ = ["Copied", "Moved", "copy", "move"]


@dataclass
class Copied:
    destination: str  # where the copy now is, as the agent's path (inside the destination if that was a folder)
    is_dir: bool
    size: int
    files: int | None = None
    skipped: list[tuple[str, trees.Skip, str]] | None = None


@dataclass
class Moved:
    destination: str
    is_dir: bool
    method: Literal["rename", "copy"]


def _joined(base: str, name: str) -> str:
    return f"{base.rstrip('/')}/{name}" if split_path(base) else name


@contextlib.contextmanager
def _destination(root: Root, dest: str, name: str, guard: Guard, *, follow_final: bool, op: str
                 ) -> Iterator[tuple[Target, str]]:
    """The entry a copy or move writes: `dest`, or `dest/name` when `dest` is a folder; and its path as given.

    Whether `dest` is a folder is decided through in-root symlinks; the final entry
    itself is followed only for copy (a move renames over a symlink, never through it).
    """
    with root.target(dest, guard, make_parents=True, op=op) as target:
        if not target.is_dir:
            if follow_final:
                yield target, dest
            else:
                with root.target(dest, guard, follow=False, op=op) as link:
                    link.made = target.made  # the parents the outer lookup made: this entry's too
                    yield link, dest
            return
    inner = _joined(dest, name)
    with root.target(inner, guard, follow=follow_final, op=op) as target:
        yield target, inner


def _copy_folder(root: Root, src: int, sst: os.stat_result, target: Target, shown: str, guard: Guard, *,
                 refuse_skips: str | None = None, move: recovery.Move | None = None,
                 ready: journaling.Recording = journaling.NOTHING) -> trees.CopyStats:
    """Copy the folder open at `src` to the new entry `target`, all or nothing.

    Built in a temporary folder (recorded for recovery, so a kill leaves nothing behind
    after the next start) and renamed into place. With `refuse_skips` (the source's path,
    for a move), an entry that would be skipped makes the whole copy fail before anything
    appears at the destination; `move` is told the copy's inode before it is placed."""
    given, site = "/".join(split_path(shown)), root.site()
    carried = refuse_skips is not None  # a move: the folder goes whole, with any repository it holds
    names: dict[str, set[str]] = {}  # the entries of each folder of the copy so far

    def check(rel: str) -> None:
        if not carried:
            parent, _, name = rel.rpartition("/")
            seen = names.setdefault(parent, set())
            seen.add(name)
            guard.check_copied(rel, seen, shown)
        guard.check_inside(site, given, target.real, shown, rel, carried=carried)

    stats = trees.CopyStats()
    with trees.temp_dir(target.dirfd) as (tfd, tmp):
        if move is not None:
            move.made(os.fstat(tfd))
        try:
            trees.copy_tree(src, tfd, stats, check=check,
                            link_ok=lambda rel, text: stays_inside(target.real, rel, text))
        except trees.TreeError as exc:
            raise PathError("copy", shown, Kind.COPY_FAILED, rel=exc.rel, reason=exc.exc.strerror) from None
        except trees.TooDeep as exc:
            raise PathError("copy", shown, Kind.TOO_DEEP_TO_COPY, rel=exc.rel, levels=trees.MAX_DEPTH) from None
        if refuse_skips is not None and stats.skipped:
            raise PathError("rename", refuse_skips, Kind.CROSS_FS_SKIPS, skipped=stats.skipped)
        os.fchmod(tfd, stat.S_IMODE(sst.st_mode) & 0o777)
        recovery.kill_point("copied")
        ready.ready()  # the journal's entry, just before the copy appears
        try:
            atomic.rename_noreplace(target.dirfd, tmp, target.dirfd, target.name)
        except FileExistsError:
            raise PathError("copy", shown, Kind.EXISTS) from None
    return stats


# -- copy -----------------------------------------------------------------------------------------


def _source_name(root: Root, parts: list[str], fd: int) -> str:
    if parts and parts[-1] != "..":
        return parts[-1]
    real = root.where(fd)
    if real == []:
        return root.name  # the root itself: its copy is named after the root
    if real:
        return real[-1]
    raise PathError("copy", "/".join(parts), Kind.SOURCE_NAME_UNKNOWN)


def copy(src_root: Root, path: str, dst_root: Root, dest: str, guard: Guard) -> Copied:
    parts = split_path(path)
    try:
        source = src_root.open(path, Kinds.FILE | Kinds.DIRECTORY)
    except PathError as exc:
        if exc.kind is Kind.NOT_FOUND:
            raise PathError("copy", path, Kind.SOURCE_NOT_FOUND) from None
        raise
    with source:
        sst = source.st
        name = _source_name(src_root, parts, source.fd)
        with _destination(dst_root, dest, name, guard, follow_final=True, op="copy") as (target, shown):
            if stat.S_ISDIR(sst.st_mode):
                if target.st is not None:
                    raise PathError("copy", shown, Kind.NO_MERGE)
                if is_inside(target.dirfd, sst):
                    raise PathError("copy", path, Kind.INTO_ITSELF, dest=shown)
                with journaling.recording(dst_root) as rec:
                    rec.before_absent(target.rel, dirfd=target.dirfd, name=target.name)
                    rec.made_folders(target.made)
                    stats = _copy_folder(dst_root, source.fd, sst, target, shown, guard, ready=rec)
                    rec.commit()
                return Copied(shown, True, stats.bytes, stats.files, stats.skipped or None)
            if target.is_self:
                raise PathError("copy", shown, Kind.DESTINATION_IS_FOLDER)
            with target.locked():
                st = target.regular()
                size = target.write_atomic(lambda fd: copy_fd(source.fd, fd), like=st,
                                           new_mode=sst.st_mode & 0o777 & ~atomic.UMASK)
    return Copied(shown, False, size)


# -- move -----------------------------------------------------------------------------------------


def move(src_root: Root, source: str, dst_root: Root, dest: str, guard: Guard) -> Moved:
    if src_root.is_root(source):
        raise PathError("rename", source, Kind.IS_ROOT)
    # The source entry itself moves: a symlink is moved as a link, never followed.
    with src_root.target(source, guard, follow=False, op="rename") as src:
        if src.is_self:
            raise PathError("rename", source, Kind.ENDS_IN_DOTDOT)
        if src.st is None:
            raise PathError("rename", source, Kind.SOURCE_NOT_FOUND)
        sst = src.st
        is_dir = stat.S_ISDIR(sst.st_mode)
        inside, links = _contents(src, sst, guard)
        _check_tree(guard, src_root.site(), inside, source, src.real)  # moving a protected file away removes it
        with _destination(dst_root, dest, src.name, guard, follow_final=False, op="rename") as (target, shown):
            tst = target.lstat()
            if tst is not None and os.path.samestat(tst, sst):
                # Already there: the same entry (nothing to do), or a hard link of it (drop the source name).
                if not (os.path.samestat(os.fstat(target.dirfd), os.fstat(src.dirfd)) and target.name == src.name):
                    with journaling.recording(src_root) as rec:  # only the source's name goes
                        rec.before_file(src.dirfd, src.name, src.rel)
                        rec.ready()
                        os.unlink(src.name, dir_fd=src.dirfd)
                        rec.commit()
                return Moved(shown, is_dir, "rename")
            if tst is not None and (stat.S_ISDIR(tst.st_mode) or is_dir):
                raise PathError("rename", shown, Kind.REPLACES_ONLY_FILES, type=file_type(tst.st_mode))
            _check_tree(guard, dst_root.site(), inside, shown, target.real)  # nor may a folder plant one there
            _check_links(links, (src_root.site(), src.real), (dst_root.site(), target.real), is_dir, source)
            with journaling.recording(src_root) as rec:
                rec.before_move(src.dirfd, src.name, src.rel, target.dirfd, target.name, target.rel,
                                dst_root=dst_root)
                rec.made_folders(target.made)
                rec.ready()
                method = _rename(dst_root, src, sst, target, shown, guard, source, is_dir, rec)
                rec.commit()
    return Moved(shown, is_dir, method)


def _rename(dst_root: Root, src: Target, sst: os.stat_result, target: Target, shown: str, guard: Guard,
            source: str, is_dir: bool, rec: journaling.Recording) -> Literal["rename", "copy"]:
    try:
        if is_dir:
            atomic.rename_noreplace(src.dirfd, src.name, target.dirfd, target.name)
        else:
            os.rename(src.name, target.name, src_dir_fd=src.dirfd, dst_dir_fd=target.dirfd)
    except OSError as exc:
        if exc.errno == errno.EXDEV:  # another filesystem: copy, then delete
            try:
                _move_by_copy(dst_root, src, sst, target, shown, guard, source)
            except PathError as left:
                if left.kind is Kind.SOURCE_LEFT:
                    rec.commit()  # the copy is in place: that much happened
                raise
            return "copy"
        if exc.errno == errno.EINVAL:
            raise PathError("rename", source, Kind.INTO_ITSELF, dest=shown) from None
        if exc.errno in (errno.EEXIST, errno.ENOTEMPTY):
            raise PathError("rename", shown, Kind.EXISTS) from None
        raise
    return "rename"


def _check_tree(guard: Guard, site: Site, rels: list[str], base: str, real: list[str] | None) -> None:
    """The protected paths a folder moved whole carries (a repository it holds goes with it)."""
    given = "/".join(split_path(base))
    for rel in rels:
        guard.check_inside(site, given, real, base, rel, carried=True)


def _contents(src: Target, sst: os.stat_result, guard: Guard) -> tuple[list[str], list[tuple[str, str]]]:
    """What a move carries: the paths inside a folder (for the protected-path rules) and every
    symlink in it as (path inside, link text); a symlink source is the one link, at ""."""
    if stat.S_ISLNK(sst.st_mode):
        return [], [("", os.readlink(src.name, dir_fd=src.dirfd))]
    if not stat.S_ISDIR(sst.st_mode):
        return [], []
    inside: list[str] = []
    links: list[tuple[str, str]] = []
    for entry in src.walk():
        if guard.rules:
            inside.append(entry.path)
        if entry.kind == trees.SYMLINK and (text := entry.readlink()) is not None:
            links.append((entry.path, text))
    return inside, links


def _host_target(site: Site, base: list[str], rel: str, text: str) -> str:
    return os.path.normpath("/".join([site.host_path, *base, *rel.split("/")[:-1], text]))


def _check_links(links: list[tuple[str, str]], src: tuple[Site, list[str] | None],
                 dst: tuple[Site, list[str] | None], is_dir: bool, source: str) -> None:
    """A move carries links by their text, so a relative link's target moves with it. Refuse a move
    that would turn a link into one leading out of the destination root (somewhere it did not lead
    before). Absolute links lead where they always did, and the resolver refuses them anyway."""
    (src_site, sreal), (dst_site, dreal) = src, dst
    # The place a link's text is resolved from: the folder moved, or the link's own parent.
    sbase = sreal if is_dir or sreal is None else sreal[:-1]
    dbase = dreal if is_dir or dreal is None else dreal[:-1]
    for rel, text in links:
        if text.startswith("/"):
            continue
        rel = rel or "link"  # only the directory part of `rel` matters
        if stays_inside(dbase, rel, text):
            continue
        if sbase is not None and dbase is not None and \
                _host_target(src_site, sbase, rel, text) == _host_target(dst_site, dbase, rel, text):
            continue  # it already led out of the root, to the same place
        if is_dir:
            raise PathError("rename", source, Kind.FOLDER_LINK_LEADS_OUT, rel=rel)
        raise PathError("rename", source, Kind.LINK_LEADS_OUT)


def _move_by_copy(dst_root: Root, src: Target, sst: os.stat_result, target: Target, shown: str, guard: Guard,
                  source: str) -> None:
    """Copy, then delete the source, with a recovery record around both: a server killed at any point
    leaves the source whole (the partial copy is removed on the next start), or the copy in place and
    the source removed (the next start finishes removing it)."""
    mode = sst.st_mode
    if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode) or stat.S_ISLNK(mode)):
        raise PathError("rename", source, Kind.CROSS_FS_SPECIAL, type=file_type(mode))
    text = ""
    if stat.S_ISLNK(mode):
        text = os.readlink(src.name, dir_fd=src.dirfd)
        parent = target.real[:-1] if target.real else None
        if not stays_inside(parent, target.name, text):
            raise PathError("rename", source, Kind.CROSS_FS_LINK_LEADS_OUT)
    move = recovery.Move(src.dirfd, src.name, sst, target.dirfd, target.name)
    try:
        if stat.S_ISLNK(mode):
            _place_symlink(text, target, move)
        else:
            _copy_into_place(dst_root, src, sst, target, shown, guard, source, move)
        recovery.kill_point("move-renamed")
        move.placed()
        recovery.kill_point("move-placed")
        try:
            if stat.S_ISDIR(mode):
                trees.remove_tree(src.dirfd, src.name)
            else:
                os.unlink(src.name, dir_fd=src.dirfd)
        except OSError as exc:
            raise PathError("rename", source, Kind.SOURCE_LEFT, dest=shown, reason=exc.strerror) from None
    finally:
        move.done()


def _place_symlink(text: str, target: Target, move: recovery.Move) -> None:
    with contextlib.ExitStack() as records:
        _, tmp = atomic.make_temp(target.dirfd, records, lambda name: os.symlink(text, name, dir_fd=target.dirfd))
        try:
            move.made(os.stat(tmp, dir_fd=target.dirfd, follow_symlinks=False))
            os.rename(tmp, target.name, src_dir_fd=target.dirfd, dst_dir_fd=target.dirfd)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=target.dirfd)
            raise


def _copy_into_place(dst_root: Root, src: Target, sst: os.stat_result, target: Target, shown: str, guard: Guard,
                     source: str, move: recovery.Move) -> None:
    mode = sst.st_mode
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | (os.O_DIRECTORY if stat.S_ISDIR(mode) else 0)
    sfd = os.open(src.name, flags, dir_fd=src.dirfd)
    try:
        if not os.path.samestat(os.fstat(sfd), sst):
            raise PathError("rename", source, Kind.MOVED_MEANWHILE)
        if stat.S_ISREG(mode):
            atomic.write_file(target.dirfd, target.name, lambda fd: copy_fd(sfd, fd), replace=True,
                              perms=stat.S_IMODE(mode) & 0o777, owner=atomic.keep_owner(sst), made=move.made)
        else:
            if is_inside(target.dirfd, sst):
                raise PathError("rename", source, Kind.INTO_ITSELF, dest=shown)
            _copy_folder(dst_root, sfd, sst, target, shown, guard, refuse_skips=source, move=move)
    finally:
        os.close(sfd)
