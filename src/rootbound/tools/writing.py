"""The writing file tools: write_file, remove_file, patch_file, create_folder, remove_folder.

Every change is made by the root (`Root.target` and its `Target`, `Root.mkdir`, ...),
through directory handles beneath it, and every failure leaves the filesystem as it
was: writes and patches replace the file atomically, and parent folders made for a
write that then fails are removed.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import hashlib
from collections.abc import Iterator
from typing import Annotated

from pydantic import BaseModel, Field

from rootbound import patching
from rootbound.errors import Failure, Kind, PathError, ToolError
from rootbound.fs import Root, display_path, split_path
from rootbound.fs.guards import Guard
from rootbound.fs.root import Target
from rootbound.tools import render
from rootbound.tools.base import Args, CallContext, PathArgs, RelPath, RootName, ToolSpec, writes

__all__ = ["TOOLS", "changing_file", "check_expected", "check_file_path", "guard", "sha256"]

WRITE_MODES = ("overwrite", "append", "create_only")
MAX_PATCH_SIZE = 64 * 1024 * 1024  # patch_file holds the file in memory

ExpectedSha = Annotated[str | None, Field(
    pattern=r"^[0-9a-fA-F]{64}$", description="Change only if the file's sha256 is still this.")]


# -- write_file -----------------------------------------------------------------------------------


class WriteFileArgs(Args):
    root: RootName = None
    path: RelPath
    content: str
    mode: Annotated[str, Field(json_schema_extra={"enum": list(WRITE_MODES)})] = "overwrite"
    encoding: Annotated[str, Field(json_schema_extra={"enum": ["utf-8", "base64"]})] = "utf-8"
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
            raise Failure(Kind.NOT_TEXT) from None
    if args.encoding == "base64":
        try:
            return base64.b64decode(args.content, validate=True)
        except (binascii.Error, ValueError):
            raise Failure(Kind.BAD_BASE64) from None
    raise Failure(Kind.INVALID_ENCODING, encoding=args.encoding)


def guard(ctx: CallContext) -> Guard:
    """The rules every writing call is held to: git's repositories and the operator's protected_paths."""
    return Guard(ctx.config.protected_paths)


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def check_expected(expected: str | None, current: str | None, path: str) -> None:
    """The compare-and-swap guard: refuse when the file is not the version the agent last saw."""
    if expected is None:
        return
    if current is None:
        raise PathError("write", path, Kind.EXPECTED_MISSING, expected=expected)
    if current != expected.lower():
        raise PathError("write", path, Kind.SHA_MISMATCH, current=current, expected=expected.lower())


def check_file_path(root: Root, path: str, op: str) -> None:
    """A write, patch or edit names a file: not the root, not a folder's spelling."""
    if root.is_root(path):
        raise PathError(op, path, Kind.IS_ROOT)
    if path.endswith("/"):  # "notes/" names a folder; writing a file called "notes" would surprise
        raise PathError(op, path, Kind.TRAILING_SLASH)


@contextlib.contextmanager
def changing_file(ctx: CallContext, root: Root, path: str, op: str, *, make_parents: bool = True) -> Iterator[Target]:
    """The file a write, patch or edit changes, held under this server's lock for the file."""
    with root.target(path, guard(ctx), make_parents=make_parents, op=op) as target:
        if target.is_self:
            raise PathError(op, path, Kind.IS_DIR)
        with target.locked():
            yield target


def write_file(ctx: CallContext, args: WriteFileArgs) -> WriteFileResult:
    root = ctx.roots.get_for(args.root, "write_file")
    if args.mode not in WRITE_MODES:
        raise Failure(Kind.INVALID_MODE, mode=args.mode, modes=", ".join(WRITE_MODES))
    data = _content(args)
    path = args.path
    check_file_path(root, path, "write")
    with changing_file(ctx, root, path, "write") as target:
        st = target.regular()
        if args.expected_sha256 is not None:
            check_expected(args.expected_sha256, target.sha256() if st else None, path)
        digest: str | None = None
        if args.mode == "append":
            created = target.append(data)
            if created:
                digest = sha256(data)
        else:
            if args.mode == "create_only" and st is not None:
                raise PathError("create", path, Kind.EXISTS)
            unchanged = (lambda: target.unchanged_since(st)) if args.expected_sha256 else None
            digest = sha256(data)
            target.write_atomic(data, like=st, replace=args.mode == "overwrite", before_commit=unchanged,
                                op="create" if args.mode == "create_only" else "write", digest=digest)
            created = st is None
    return WriteFileResult(path=display_path(split_path(path)), size=len(data), mode=args.mode, created=created,
                           sha256=digest)


# -- remove_file ----------------------------------------------------------------------------------


class RemovedResult(BaseModel):
    path: str
    removed: bool


def remove_file(ctx: CallContext, args: PathArgs) -> RemovedResult:
    root = ctx.roots.get_for(args.root, "remove_file")
    root.remove(args.path, guard(ctx))  # a symlink is removed itself, never its target
    return RemovedResult(path=display_path(split_path(args.path)), removed=True)


# -- patch_file -----------------------------------------------------------------------------------


class PatchFileArgs(Args):
    root: RootName = None
    path: RelPath
    patch: str
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
    check_file_path(root, path, "patch")
    try:
        fp = patching.select(patching.parse(args.patch), display_path(split_path(path)))
    except patching.PatchError as exc:
        raise ToolError(str(exc)) from None
    if fp.deletes:
        raise Failure(Kind.PATCH_DELETES)
    with changing_file(ctx, root, path, "patch") as target:
        st = target.regular()
        data, st = target.read(MAX_PATCH_SIZE) if st else (b"", None)
        if args.expected_sha256 is not None:
            check_expected(args.expected_sha256, sha256(data) if st else None, path)
        if fp.creates and data:
            raise PathError("patch", path, Kind.PATCH_CREATES_EXISTING)
        try:
            new, applied = patching.apply(data, fp)
        except patching.PatchError as exc:
            raise ToolError(str(exc)) from None
        digest = sha256(new)
        if new != data or st is None:
            target.write_atomic(new, like=st, replace=st is not None, before_commit=lambda: target.unchanged_since(st),
                                digest=digest)
    return PatchFileResult(
        path=display_path(split_path(path)), hunks_applied=len(applied),
        hunks=[HunkResult(hunk=a.hunk, line=a.line, offset=a.offset) for a in applied],
        created=st is None, size=len(new), sha256=digest)


# -- create_folder --------------------------------------------------------------------------------


class CreatedResult(BaseModel):
    path: str
    created: bool = Field(description="False when the directory already existed (that is not an error).")


def create_folder(ctx: CallContext, args: PathArgs) -> CreatedResult:
    root = ctx.roots.get_for(args.root, "create_folder")
    created = root.mkdir(args.path, guard(ctx))
    return CreatedResult(path=display_path(split_path(args.path)), created=created)


# -- remove_folder --------------------------------------------------------------------------------


class RemoveFolderResult(BaseModel):
    path: str
    removed: bool
    entries_removed: int = Field(description="Files, links and directories that were inside it.")


def remove_folder(ctx: CallContext, args: PathArgs) -> RemoveFolderResult:
    root = ctx.roots.get_for(args.root, "remove_folder")
    count = root.remove_tree(args.path, guard(ctx))
    return RemoveFolderResult(path=display_path(split_path(args.path)), removed=True, entries_removed=count)


TOOLS = [
    ToolSpec(
        "write_file", "Write a file",
        "Create or replace a whole file atomically (append adds to it); missing folders are made. To change "
        "part of a file, use edit_file.",
        WriteFileArgs, WriteFileResult, writes("Write a file", destructive=True, idempotent=False), write_file,
        text=lambda _, data: render.written(data)),
    ToolSpec(
        "remove_file", "Remove a file",
        "Delete a file, or a symlink itself (never its target). Folders: remove_folder.",
        PathArgs, RemovedResult, writes("Remove a file", destructive=True, idempotent=True), remove_file,
        text=lambda _, data: render.removed(data)),
    ToolSpec(
        "patch_file", "Patch a file",
        "Apply a unified diff (diff -u, git diff or *** Begin Patch) to one file, all hunks or none; hunks are "
        "placed by their context lines.",
        PatchFileArgs, PatchFileResult, writes("Patch a file", destructive=True, idempotent=False), patch_file,
        text=lambda _, data: render.patched(data)),
    ToolSpec(
        "create_folder", "Create a folder",
        "Create a directory and any missing parents (mkdir -p); created is false if it was there.",
        PathArgs, CreatedResult, writes("Create a folder", destructive=False, idempotent=True), create_folder,
        text=lambda _, data: render.folder_created(data)),
    ToolSpec(
        "remove_folder", "Remove a folder",
        "Delete a directory and everything in it (rm -rf); symlinks inside are removed as links.",
        PathArgs, RemoveFolderResult, writes("Remove a folder", destructive=True, idempotent=True), remove_folder,
        text=lambda _, data: render.folder_removed(data)),
]
