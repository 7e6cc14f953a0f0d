"""The read-only file tools: list_roots, list_folder, read_file, stat_file, hash_file, permissions_file."""

from __future__ import annotations

import base64
import grp
import pwd
import stat
from typing import Annotated, Any, Literal, NotRequired

from pydantic import BaseModel, Field
from typing_extensions import TypedDict

from rootbound.catalogue import FILE_TOOLS, JOURNAL_TOOLS
from rootbound.errors import Failure, Kind
from rootbound.fs import Kinds, content, display_path, file_type, split_path
from rootbound.fs.paths import TYPE_NAMES
from rootbound.tools import render
from rootbound.tools.base import (
    Args,
    CallContext,
    PathArgs,
    PlainResult,
    RelPath,
    RootName,
    ToolSpec,
    Work,
    iso_time,
    loose_list,
    read_only,
)

__all__ = ["TOOLS"]



def printable(name: str) -> str:
    """File names that are not valid UTF-8 are shown with escapes instead of crashing the JSON encoder."""
    if name.isascii():  # the common case, checked in C without encoding
        return name
    try:
        name.encode("utf-8")
        return name
    except UnicodeEncodeError:
        return name.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


# -- list_roots -----------------------------------------------------------------------------------


class NoArgs(Args):
    pass


class RootInfo(BaseModel):
    name: str
    allowed_tools: list[str]


class ListRootsResult(BaseModel):
    roots: list[RootInfo]
    default_root: str | None = Field(default=None, description="The root a call without root works in.")


def list_roots(ctx: CallContext, _: NoArgs) -> ListRootsResult:
    return ListRootsResult(roots=[
        RootInfo(name=r.name, allowed_tools=[t for t in FILE_TOOLS + JOURNAL_TOOLS if t in r.allowed_tools])
        for r in ctx.roots.values()
    ], default_root=ctx.roots.default)


# -- list_folder ----------------------------------------------------------------------------------


class Entry(TypedDict):
    name: str
    type: str
    size: int
    modified_at: str
    target_type: NotRequired[str]


LIST_LIMIT = 1000
MAX_LIST_LIMIT = 100_000


class ListFolderArgs(Args):
    root: RootName = None
    path: RelPath
    limit: Annotated[int, Field(ge=0, le=MAX_LIST_LIMIT)] = LIST_LIMIT
    offset: Annotated[int, Field(ge=0, description="Entries to skip.")] = 0


class ListFolderResult(PlainResult):
    path: str
    entries: Annotated[list[Entry], loose_list(
        "Each entry: name, type (file, directory, symlink, ...), size (bytes), modified_at (ISO 8601) and, for a "
        "symlink, target_type (file, directory or external).")]
    count: int = Field(description="Entries returned in this page.")
    total: int = Field(description="Entries in the folder.")
    truncated: bool = Field(description="True when entries follow this page (read on with offset).")


def list_folder(ctx: CallContext, args: ListFolderArgs) -> ListFolderResult:
    root = ctx.roots.get_for(args.root, "list_folder")
    total, page = root.read_folder(args.path, args.offset, args.offset + args.limit)
    # The loop runs once per entry of a page of up to 100,000: plain dicts (no model, no validation: the
    # result is a PlainResult), and no function call that the common case does not need.
    entries: list[Entry] = []
    add, types, when = entries.append, TYPE_NAMES, iso_time
    for name, st, target in page:
        kind = types.get(st.st_mode & 0o170000, "unknown")
        entry: Entry = {"name": name if name.isascii() else printable(name), "type": kind, "size": st.st_size,
                        "modified_at": when(st.st_mtime)}
        if kind == "symlink":
            # Outside the root, dangling or a loop: either way not reachable through this root.
            entry["target_type"] = "external" if target is None else file_type(target.st_mode)
        add(entry)
    return ListFolderResult.model_construct(path=display_path(split_path(args.path)), entries=entries,
                                            count=len(entries), total=total, truncated=args.offset + args.limit < total)


# -- read_file ------------------------------------------------------------------------------------


class ReadFileArgs(Args):
    root: RootName = None
    path: RelPath
    offset_bytes: Annotated[int | None, Field(ge=0)] = None
    limit_bytes: Annotated[int | None, Field(ge=0)] = None
    offset_lines: Annotated[int | None, Field(ge=1, description="First line (1-based).")] = None
    limit_lines: Annotated[int | None, Field(ge=0)] = None
    line_numbers: Annotated[bool, Field(description="false: no line numbers in the text.")] = True


class ReadFileResult(BaseModel):
    path: str
    content: str = Field(description="The text, or base64 when encoding is base64.")
    encoding: Literal["utf-8", "base64"]
    size: int = Field(description="Size of the whole file in bytes.")
    lines_total: int | None = Field(default=None, description="Lines in the whole file (full and line reads).")
    truncated: bool = Field(description="True when more of the file follows what was returned.")
    binary: bool = Field(description="True when the file's first 8 KiB contain a NUL byte.")
    note: str | None = None


def _human(n: int) -> str:
    size = float(n)
    for unit in ("B", "KB", "MB", "GB"):
        if size < 1024 or unit == "GB":
            text = f"{size:.1f}".removesuffix(".0") if unit != "B" else str(n)
            return f"{text}{unit}"
        size /= 1024
    raise AssertionError("unreachable")


def _encode(data: bytes) -> tuple[str, Literal["utf-8", "base64"]]:
    try:
        return data.decode("utf-8"), "utf-8"
    except UnicodeDecodeError:
        return base64.b64encode(data).decode("ascii"), "base64"


def _read_work(args: ReadFileArgs) -> Work:
    # A byte range or a whole file is at most max_full_read_size; lines are found by scanning the file.
    return "heavy" if args.offset_lines is not None or args.limit_lines is not None else "quick"


def read_file(ctx: CallContext, args: ReadFileArgs) -> ReadFileResult:
    root = ctx.roots.get_for(args.root, "read_file")
    by_bytes = args.offset_bytes is not None or args.limit_bytes is not None
    by_lines = args.offset_lines is not None or args.limit_lines is not None
    if by_bytes and by_lines:
        raise Failure(Kind.BYTES_AND_LINES)
    cap = ctx.config.max_full_read_size
    with root.open(args.path, Kinds.FILE) as file:
        fd, size = file.fd, file.st.st_size
        binary = content.looks_binary(file.read_at(content.SNIFF, 0))
        lines_total: int | None = None
        note = None
        if by_bytes:
            offset = args.offset_bytes or 0
            want = cap if args.limit_bytes is None else min(args.limit_bytes, cap)
            data = file.read_at(want, offset) if offset < size else b""
            truncated = offset + len(data) < size
            if args.limit_bytes is not None and args.limit_bytes > cap and truncated:
                note = f"limit_bytes capped at max_full_read_size ({cap} bytes)"
        elif by_lines:
            first = args.offset_lines or 1
            data, truncated = content.read_lines(fd, first, args.limit_lines, cap)
            lines_total = content.count_lines(fd, size)
            if first > lines_total:
                note = f"offset_lines {first} is past the end of the file ({lines_total} lines)"
            elif truncated and (args.limit_lines is None or data.count(b"\n") < args.limit_lines):
                note = f"stopped at max_full_read_size ({cap} bytes); read on with a larger offset_lines"
        else:
            if size > cap:
                raise Failure(Kind.TOO_LARGE_TO_READ, size=_human(size), limit=_human(cap))
            data = file.read_at(cap + 1, 0)
            if len(data) > cap:  # grew since fstat
                raise Failure(Kind.GREW_TOO_LARGE_TO_READ, limit=_human(cap))
            truncated = False
            lines_total = data.count(b"\n") + (1 if data and not data.endswith(b"\n") else 0)
    text, encoding = _encode(data)
    return ReadFileResult(path=display_path(split_path(args.path)), content=text, encoding=encoding, size=size,
                          lines_total=lines_total, truncated=truncated, binary=binary, note=note)


def _read_text(args: ReadFileArgs, data: dict[str, Any]) -> str:
    """Line numbers unless the call asked for bytes or for none; numbered from the first line read."""
    by_bytes = args.offset_bytes is not None or args.limit_bytes is not None
    return render.file_read(data, first_line=args.offset_lines or 1, numbered=args.line_numbers and not by_bytes,
                            at_start=not args.offset_bytes)


# -- stat_file ------------------------------------------------------------------------------------


class TargetInfo(BaseModel):
    type: str = Field(description='file, directory, ... or "external" when it leads outside the root '
                                  "(or nowhere)")
    size: int | None = None
    modified_at: str | None = None


class StatResult(BaseModel):
    name: str
    path: str
    type: str
    size: int
    is_directory: bool
    is_symlink: bool
    modified_at: str
    created_at: str | None = Field(default=None, description="Birth time, where the filesystem records it.")
    target: TargetInfo | None = Field(default=None, description="For a symlink: what it points to.")


def stat_file(ctx: CallContext, args: PathArgs) -> StatResult:
    root = ctx.roots.get_for(args.root, "stat_file")
    parts = split_path(args.path)
    st = root.lstat(args.path)
    target = None
    if stat.S_ISLNK(st.st_mode):
        tst = root.link_target(args.path)
        target = TargetInfo(type="external") if tst is None else TargetInfo(
            type=file_type(tst.st_mode), size=tst.st_size, modified_at=iso_time(tst.st_mtime))
    return StatResult(
        name=printable(parts[-1]) if parts else ".",
        path=display_path(parts),
        type=file_type(st.st_mode),
        size=st.st_size,
        is_directory=stat.S_ISDIR(st.st_mode),
        is_symlink=stat.S_ISLNK(st.st_mode),
        modified_at=iso_time(st.st_mtime),
        target=target,
    )


# -- hash_file ------------------------------------------------------------------------------------

HASH_ALGORITHMS = ("md5", "sha1", "sha256")


class HashArgs(Args):
    root: RootName = None
    path: RelPath
    algorithm: Annotated[str, Field(json_schema_extra={"enum": list(HASH_ALGORITHMS)})] = "sha256"


class HashResult(BaseModel):
    path: str
    algorithm: str
    hash: str = Field(description="Hex digest.")
    size: int


def hash_file(ctx: CallContext, args: HashArgs) -> HashResult:
    root = ctx.roots.get_for(args.root, "hash_file")
    algorithm = args.algorithm.lower()
    if algorithm not in HASH_ALGORITHMS:
        raise Failure(Kind.UNSUPPORTED_HASH, algorithm=args.algorithm, supported=", ".join(HASH_ALGORITHMS))
    with root.open(args.path, Kinds.FILE) as file:
        digest, size = content.digest(file.fd, algorithm)
    return HashResult(path=display_path(split_path(args.path)), algorithm=algorithm, hash=digest, size=size)


# -- permissions_file -----------------------------------------------------------------------------


class PermissionsResult(BaseModel):
    path: str
    owner: str
    group: str
    mode: str = Field(description='Octal permission bits, e.g. "0644".')
    mode_string: str = Field(description='Symbolic form, e.g. "-rw-r--r--".')


def _owner(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def _group(gid: int) -> str:
    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return str(gid)


def permissions_file(ctx: CallContext, args: PathArgs) -> PermissionsResult:
    root = ctx.roots.get_for(args.root, "permissions_file")
    st = root.lstat(args.path)
    return PermissionsResult(path=display_path(split_path(args.path)), owner=_owner(st.st_uid),
                             group=_group(st.st_gid), mode=f"{stat.S_IMODE(st.st_mode):04o}",
                             mode_string=stat.filemode(st.st_mode))


TOOLS = [
    ToolSpec(
        "list_roots", "List roots",
        "List the roots (named directories) and the file tools each allows. Paths are relative to a root; "
        "default_root serves calls that name none.",
        NoArgs, ListRootsResult, read_only("List roots"), list_roots, text=lambda _, data: render.roots(data)),
    ToolSpec(
        "list_folder", "List a folder",
        "List a folder's entries by name with type, size and modified_at, limit at a time from offset. "
        "Not recursive: use glob.",
        ListFolderArgs, ListFolderResult, read_only("List a folder"), list_folder,
        text=lambda args, data: render.folder_listing(data, offset=args.offset)),
    ToolSpec(
        "read_file", "Read a file",
        "Read a file, whole (up to 1 MiB by default) or a part by lines or bytes. Content that is not UTF-8 "
        "comes back as base64.",
        ReadFileArgs, ReadFileResult, read_only("Read a file"), read_file, work=_read_work, text=_read_text),
    ToolSpec(
        "stat_file", "File metadata",
        "Metadata of a file, directory or symlink: type, size, modified_at; for a symlink, target says what it "
        "leads to.",
        PathArgs, StatResult, read_only("File metadata"), stat_file, text=lambda _, data: render.stat(data)),
    ToolSpec(
        "hash_file", "Hash a file",
        "Hex digest of a file, streamed (any size): to see whether it changed or two files are the same.",
        HashArgs, HashResult, read_only("Hash a file"), hash_file, text=lambda _, data: render.file_hash(data)),
    ToolSpec(
        "permissions_file", "File permissions",
        'Owner, group and mode ("0644", "-rw-r--r--") of a file, directory or symlink.',
        PathArgs, PermissionsResult, read_only("File permissions"), permissions_file,
        text=lambda _, data: render.permissions(data)),
]
