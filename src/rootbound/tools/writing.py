"""The writing file tools: write_file, remove_file, patch_file, create_folder, remove_folder.

Every change is made through directory handles beneath the root (`fsops`), and
every failure leaves the filesystem as it was: writes and patches replace the
file atomically, and parent folders made for a write that then fails are removed.
"""

from __future__ import annotations

import base64
import binascii
import os
import stat
from typing import Annotated

from pydantic import BaseModel, Field

from rootbound import fsops, patching
from rootbound.errors import ToolError
from rootbound.roots import display_path, file_type, split_path
from rootbound.tools.base import Args, CallContext, RelPath, RootName, ToolSpec, writes
from rootbound.tools.targets import (
    Guard,
    check_expected,
    current_sha256,
    keep_owner,
    read_current,
    regular_or_none,
    resolve,
    sha256,
    unchanged_since,
)

__all__ = ["TOOLS"]

WRITE_MODES = ("overwrite", "append", "create_only")
MAX_PATCH_SIZE = 64 * 1024 * 1024  # patch_file holds the file in memory

ExpectedSha = Annotated[str | None, Field(
    pattern=r"^[0-9a-fA-F]{64}$",
    description="Optional guard: the sha256 (hex) of the file as you last saw it (hash_file, or the sha256 of a "
                "previous write). The change is made only if the file still has exactly that content; otherwise "
                "nothing is written and the error gives the current hash.")]


# -- write_file -----------------------------------------------------------------------------------


class WriteFileArgs(Args):
    root: RootName
    path: RelPath
    content: Annotated[str, Field(description="The text to write (or base64 data, with encoding=base64).")]
    mode: Annotated[str, Field(
        description="overwrite (default): replace the file, or create it; append: add to its end, or create it; "
                    "create_only: create it, failing if it already exists.",
        json_schema_extra={"enum": list(WRITE_MODES)})] = "overwrite"
    encoding: Annotated[str, Field(description='"utf-8" (default) for text, "base64" for binary data.',
                                   json_schema_extra={"enum": ["utf-8", "base64"]})] = "utf-8"
    expected_sha256: ExpectedSha = None


class WriteFileResult(BaseModel):
    path: str
    size: int = Field(description="Bytes written by this call.")
    mode: str
    created: bool = Field(description="True when the file did not exist before.")
    sha256: str | None = Field(default=None, description="sha256 of the file now (overwrite and create_only); "
                                                         "pass it as expected_sha256 to a later change.")


def _content(args: WriteFileArgs) -> bytes:
    if args.encoding == "utf-8":
        try:
            return args.content.encode("utf-8")
        except UnicodeEncodeError:
            raise ToolError("content is not valid text (it holds a lone surrogate); send binary data with "
                            "encoding=base64") from None
    if args.encoding == "base64":
        try:
            return base64.b64decode(args.content, validate=True)
        except (binascii.Error, ValueError):
            raise ToolError("content is not valid base64") from None
    raise ToolError(f"invalid encoding: {args.encoding}; valid encodings: utf-8, base64")


def _no_trailing_slash(path: str) -> None:
    if path.endswith("/"):  # "notes/" names a folder; writing a file called "notes" would surprise
        raise ToolError(f"invalid path: a file path must not end with '/': {path}")


def write_file(ctx: CallContext, args: WriteFileArgs) -> WriteFileResult:
    root = ctx.roots.get_for(args.root, "write_file")
    if args.mode not in WRITE_MODES:
        raise ToolError(f"invalid mode: {args.mode}; valid modes: {', '.join(WRITE_MODES)}")
    data = _content(args)
    path = args.path
    if root.is_root(path):
        raise ToolError(f"path is the root directory, not a file: {path!r}; give a file path inside the root")
    _no_trailing_slash(path)
    with resolve(ctx, root, path, make_parents=True, guard=Guard(ctx)) as (loc, _):
        if loc.name == ".":
            raise ToolError(f"path is a directory, not a file: {path}")
        with fsops.target_lock(loc.dirfd, loc.name):
            st = regular_or_none(loc, path)
            if args.expected_sha256 is not None:
                check_expected(args.expected_sha256, current_sha256(loc) if st else None, path)
            if args.mode == "create_only" and st is not None:
                raise ToolError(f"file already exists: {path}; use overwrite mode to replace")
            digest: str | None = None
            if args.mode == "append":
                created = fsops.append(loc.dirfd, loc.name, data)
                if created:
                    digest = sha256(data)
            else:
                replace = args.mode == "overwrite"
                try:
                    fsops.write_file(
                        loc.dirfd, loc.name, lambda fd: fsops.write_all(fd, data), replace=replace,
                        perms=stat.S_IMODE(st.st_mode) if st else fsops.NEW_FILE_MODE,
                        owner=keep_owner(st),
                        before_commit=(lambda: unchanged_since(loc, st, path)) if args.expected_sha256 else None)
                except FileExistsError:  # another writer created it between our look and the link
                    raise ToolError(f"file already exists: {path}; use overwrite mode to replace") from None
                created = st is None
                digest = sha256(data)
    return WriteFileResult(path=display_path(split_path(path)), size=len(data), mode=args.mode, created=created,
                           sha256=digest)


# -- remove_file ----------------------------------------------------------------------------------


class PathArgs(Args):
    root: RootName
    path: RelPath


class RemovedResult(BaseModel):
    path: str
    removed: bool


def remove_file(ctx: CallContext, args: PathArgs) -> RemovedResult:
    root = ctx.roots.get_for(args.root, "remove_file")
    path = args.path
    if root.is_root(path):
        raise ToolError("cannot remove root directory")
    # The final component is not followed: removing a symlink removes the link, never its target.
    with resolve(ctx, root, path, follow=False, guard=Guard(ctx)) as (loc, _):
        if loc.st is None:
            raise ToolError(f"file not found: {path}")
        if stat.S_ISDIR(loc.st.st_mode):
            raise ToolError(f"path is a directory, not a file: {path}; use remove_folder to remove a directory")
        with fsops.target_lock(loc.dirfd, loc.name):
            os.unlink(loc.name, dir_fd=loc.dirfd)
    return RemovedResult(path=display_path(split_path(path)), removed=True)


# -- patch_file -----------------------------------------------------------------------------------


class PatchFileArgs(Args):
    root: RootName
    path: RelPath
    patch: Annotated[str, Field(description="A unified diff: optional ---/+++ header lines, then hunks, each an "
                                            "'@@ -old_start,count +new_start,count @@' line followed by ' ' "
                                            "context, '-' removed and '+' added lines.")]
    expected_sha256: ExpectedSha = None


class HunkResult(BaseModel):
    hunk: int
    line: int = Field(description="Line of the original file where the hunk applied (1-based).")
    offset: int | None = Field(default=None, description="How many lines away from its header's line number it "
                                                         "applied (0 = exactly there; absent for a header without "
                                                         "line numbers).")


class PatchFileResult(BaseModel):
    path: str
    hunks_applied: int
    hunks: list[HunkResult]
    created: bool = Field(description="True when the patch created the file.")
    size: int = Field(description="Size of the file after the patch, in bytes.")
    sha256: str = Field(description="sha256 of the file now; pass it as expected_sha256 to a later change.")


def patch_file(ctx: CallContext, args: PatchFileArgs) -> PatchFileResult:
    root = ctx.roots.get_for(args.root, "patch_file")
    path = args.path
    if root.is_root(path):
        raise ToolError(f"path is the root directory, not a file: {path!r}; give the path of the file to patch")
    _no_trailing_slash(path)
    try:
        fp = patching.select(patching.parse(args.patch), display_path(split_path(path)))
    except patching.PatchError as exc:
        raise ToolError(str(exc)) from None
    if fp.deletes:
        raise ToolError("the patch deletes the file (+++ /dev/null or *** Delete File); use remove_file to remove "
                        "a file")
    with resolve(ctx, root, path, make_parents=True, guard=Guard(ctx)) as (loc, _):
        if loc.name == ".":
            raise ToolError(f"path is a directory, not a file: {path}")
        with fsops.target_lock(loc.dirfd, loc.name):
            st = regular_or_none(loc, path)
            data, st = read_current(loc, MAX_PATCH_SIZE, path) if st else (b"", None)
            if args.expected_sha256 is not None:
                check_expected(args.expected_sha256, sha256(data) if st else None, path)
            if fp.creates and data:
                raise ToolError(f"the patch creates {path} (--- /dev/null), but that file already exists and is "
                                "not empty; nothing was changed")
            try:
                new, applied = patching.apply(data, fp)
            except patching.PatchError as exc:
                raise ToolError(str(exc)) from None
            if new != data or st is None:
                try:
                    fsops.write_file(
                        loc.dirfd, loc.name, lambda fd: fsops.write_all(fd, new), replace=st is not None,
                        perms=stat.S_IMODE(st.st_mode) if st else fsops.NEW_FILE_MODE,
                        owner=keep_owner(st), before_commit=lambda: unchanged_since(loc, st, path))
                except FileExistsError:
                    raise ToolError(f"{path} was created by someone else while this call ran; nothing was "
                                    "changed, try again") from None
    return PatchFileResult(
        path=display_path(split_path(path)), hunks_applied=len(applied),
        hunks=[HunkResult(hunk=a.hunk, line=a.line, offset=a.offset) for a in applied],
        created=st is None, size=len(new), sha256=sha256(new))


# -- create_folder --------------------------------------------------------------------------------


class CreatedResult(BaseModel):
    path: str
    created: bool = Field(description="False when the directory already existed (that is not an error).")


def create_folder(ctx: CallContext, args: PathArgs) -> CreatedResult:
    root = ctx.roots.get_for(args.root, "create_folder")
    path = args.path
    created = False
    with resolve(ctx, root, path, make_parents=True, guard=Guard(ctx)) as (loc, _):
        st = loc.st
        if st is None:
            try:
                os.mkdir(loc.name, 0o777, dir_fd=loc.dirfd)
                created = True
            except FileExistsError:
                st = fsops.lstat_or_none(loc.dirfd, loc.name)
        if st is not None and not stat.S_ISDIR(st.st_mode):
            kind = "a file" if stat.S_ISREG(st.st_mode) else f"a {file_type(st.st_mode)}"
            raise ToolError(f"path exists and is {kind}, not a directory: {path}")
    return CreatedResult(path=display_path(split_path(path)), created=created)


# -- remove_folder --------------------------------------------------------------------------------


class RemoveFolderResult(BaseModel):
    path: str
    removed: bool
    entries_removed: int = Field(description="Files, links and directories that were inside it.")


def remove_folder(ctx: CallContext, args: PathArgs) -> RemoveFolderResult:
    root = ctx.roots.get_for(args.root, "remove_folder")
    path = args.path
    if root.is_root(path):
        raise ToolError("cannot remove root directory")
    guard = Guard(ctx)
    with resolve(ctx, root, path, follow=False, guard=guard) as (loc, real):
        st = loc.st
        if loc.name == ".":
            raise ToolError(f"invalid path: must not end with '..': {path}")
        if st is None:
            raise ToolError(f"directory not found: {path}")
        if stat.S_ISLNK(st.st_mode):
            raise ToolError(f"path is a symlink, not a directory: {path}; use remove_file to remove the link")
        if not stat.S_ISDIR(st.st_mode):
            raise ToolError(f"path is a file, not a directory: {path}; use remove_file to remove a file")
        # Look before deleting anything: a protected file inside refuses the whole removal (a repository
        # the folder holds goes with it: removing a project is not changing its repository's internals).
        given, count = "/".join(split_path(path)), 0
        for rel in fsops.walk_names(loc.dirfd, loc.name):
            count += 1
            if guard:
                guard.check(f"{given}/{rel}", f"{path.rstrip('/')}/{rel}", carried=rel)
                if real is not None:
                    guard.check_real(root, [*real, rel], f"{path.rstrip('/')}/{rel}", carried=rel)
        try:
            fsops.remove_tree(loc.dirfd, loc.name)
        except OSError as exc:
            where = exc.filename if isinstance(exc.filename, str) else loc.name
            raise ToolError(f"could not remove all of {path}: {exc.strerror} at {where}; part of it may already "
                            "be removed") from None
    return RemoveFolderResult(path=display_path(split_path(path)), removed=True, entries_removed=count)


TOOLS = [
    ToolSpec(
        "write_file", "Write a file",
        "Write text to a file in a root. mode: overwrite (default) replaces the whole file or creates it; append "
        "adds to its end (creating it if missing); create_only creates it and fails if it already exists. Missing "
        "parent folders are created. Overwrites are atomic: readers see the old or the new file, never a mix. "
        "Give expected_sha256 (from hash_file or a previous write's sha256) to write only if nobody changed the "
        "file since you read it. Binary data: encoding=base64. Protected, so never written: .git and anything inside "
        "a .git directory, a file that would make its folder look like a bare git repository (HEAD with objects "
        "and refs), agent and editor settings (.mcp.json, .claude/settings.json, .vscode/tasks.json, ...) and "
        "shell start-up files. Git commands change repositories.",
        WriteFileArgs, WriteFileResult, writes("Write a file", destructive=True, idempotent=False), write_file),
    ToolSpec(
        "remove_file", "Remove a file",
        "Delete one file (or symlink: the link itself is removed, never what it points to) in a root. Fails for "
        "a directory (use remove_folder), for a missing file, and for protected paths (as for write_file).",
        PathArgs, RemovedResult, writes("Remove a file", destructive=True, idempotent=True), remove_file),
    ToolSpec(
        "patch_file", "Patch a file",
        "Apply a unified diff (as `diff -u` or `git diff` print it, or a '*** Begin Patch' patch) to one file in a "
        "root; all hunks or nothing. Context and '-' lines must match the file exactly (a context line's trailing "
        "whitespace aside); a hunk applies where they match, even if its line numbers are off, and where they "
        "match several places only at the line its header names (else the error lists them). The result reports "
        "each hunk's line and offset. A missing file is "
        "created (patch against empty content, e.g. '--- /dev/null' and '@@ -0,0 +1,3 @@'). If the diff covers "
        "several files, only the part whose ---/+++ name is `path` is used. On failure the file is unchanged and "
        "the error names the hunk and line. Optional expected_sha256 as for write_file. Protected paths as for "
        "write_file.",
        PatchFileArgs, PatchFileResult, writes("Patch a file", destructive=True, idempotent=False), patch_file),
    ToolSpec(
        "create_folder", "Create a folder",
        "Create a directory in a root, with any missing parents (like mkdir -p). Succeeds with created=false if it "
        "already exists; fails if a file is in the way. Never creates .git, anything inside a .git directory, or "
        "the objects/refs folder that would make a folder look like a bare git repository.",
        PathArgs, CreatedResult, writes("Create a folder", destructive=False, idempotent=True), create_folder),
    ToolSpec(
        "remove_folder", "Remove a folder",
        "Delete a directory and everything in it (like rm -rf) in a root. Symlinks inside are removed as links; "
        "their targets are never touched. Refuses the root itself, a file (use remove_file), a .git directory or "
        "anything inside one, and folders that hold other protected paths (e.g. .claude/settings.json); a folder "
        "that holds a git repository may be removed whole.",
        PathArgs, RemoveFolderResult, writes("Remove a folder", destructive=True, idempotent=True), remove_folder),
]
