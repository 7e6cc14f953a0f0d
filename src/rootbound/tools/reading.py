"""The read-only file tools: list_roots, list_folder, read_file, stat_file, hash_file, permissions_file."""

from __future__ import annotations

import base64
import grp
import pwd
import stat
from typing import Annotated, Literal, NotRequired

from pydantic import BaseModel, Field
from typing_extensions import TypedDict

from rootbound.catalogue import FILE_TOOLS
from rootbound.errors import Failure, Kind
from rootbound.fs import Kinds, content, display_path, file_type, split_path
from rootbound.tools.base import Args, CallContext, PathArgs, RelPath, RootName, ToolSpec, Work, iso_time, read_only

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
        RootInfo(name=r.name, allowed_tools=[t for t in FILE_TOOLS if t in r.allowed_tools])
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
    limit: Annotated[int, Field(ge=0, le=MAX_LIST_LIMIT, description=(
        f"Most entries to return (default {LIST_LIMIT:,}, at most {MAX_LIST_LIMIT:,}); truncated says whether "
        "more follow."))] = LIST_LIMIT
    offset: Annotated[int, Field(ge=0, description=(
        "Entries to skip first, in name order: the next page starts at offset + count."))] = 0


class ListFolderResult(BaseModel):
    path: str
    entries: list[Entry]
    count: int = Field(description="Entries returned in this page.")
    total: int = Field(description="Entries in the folder.")
    truncated: bool = Field(description="True when entries follow this page (read on with offset).")


def list_folder(ctx: CallContext, args: ListFolderArgs) -> ListFolderResult:
    root = ctx.roots.get_for(args.root, "list_folder")
    total, page = root.read_folder(args.path, args.offset, args.offset + args.limit)
    entries: list[Entry] = []
    for name, st, target in page:
        kind = file_type(st.st_mode)
        entry: Entry = {"name": printable(name), "type": kind, "size": st.st_size, "modified_at": iso_time(st.st_mtime)}
        if kind == "symlink":
            # Outside the root, dangling or a loop: either way not reachable through this root.
            entry["target_type"] = "external" if target is None else file_type(target.st_mode)
        entries.append(entry)
    # Built from plain dicts on purpose: per-entry validation would dominate a 10,000-entry listing.
    return ListFolderResult.model_construct(path=display_path(split_path(args.path)), entries=entries,
                                            count=len(entries), total=total, truncated=args.offset + args.limit < total)


# -- read_file ------------------------------------------------------------------------------------


class ReadFileArgs(Args):
    root: RootName = None
    path: RelPath
    offset_bytes: Annotated[int | None, Field(ge=0, description="Byte offset to start at (0-based).")] = None
    limit_bytes: Annotated[int | None, Field(ge=0, description="Maximum bytes to return.")] = None
    offset_lines: Annotated[int | None, Field(ge=1, description="First line to return (1-based).")] = None
    limit_lines: Annotated[int | None, Field(ge=0, description="Maximum lines to return.")] = None


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
    algorithm: Annotated[str, Field(description="One of md5, sha1, sha256.")] = "sha256"


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
        "List the roots (named directories) this server lets you work in, and the file tools each root "
        "allows. Call this first: every other file tool takes a `root` name from this list and a path "
        "relative to that root. Host paths are never shown.",
        NoArgs, ListRootsResult, read_only("List roots"), list_roots),
    ToolSpec(
        "list_folder", "List a folder",
        "List the immediate entries of a directory in a root, sorted by name: each with name, type "
        "(file, directory, symlink, ...), size in bytes and modified_at (ISO 8601). A symlink also has "
        "target_type: file or directory when it leads inside the root, external otherwise. Returns one page: "
        f"at most limit entries (default {LIST_LIMIT:,}) from offset; total counts the folder's entries and "
        "truncated says more follow. Not recursive: use glob for that.",
        ListFolderArgs, ListFolderResult, read_only("List a folder"), list_folder),
    ToolSpec(
        "read_file", "Read a file",
        "Read a file in a root. With no offset/limit the whole file is returned if it is at most "
        "max_full_read_size bytes (1 MiB by default); otherwise read a part: by bytes with "
        "offset_bytes/limit_bytes, or by lines with offset_lines (1-based) / limit_lines - not both kinds "
        "at once. UTF-8 text comes back as is; anything else as base64 (encoding says which). binary is "
        "true when the file's first 8 KiB hold a NUL byte; truncated is true when more of the file follows; "
        "lines_total counts the file's lines on full and line reads.",
        ReadFileArgs, ReadFileResult, read_only("Read a file"), read_file, work=_read_work),
    ToolSpec(
        "stat_file", "File metadata",
        "Metadata of a file, directory or symlink in a root: name, path, type, size, is_directory, "
        "is_symlink, modified_at. A symlink is described itself, with `target` saying what it leads to "
        "(type external when that is outside the root).",
        PathArgs, StatResult, read_only("File metadata"), stat_file),
    ToolSpec(
        "hash_file", "Hash a file",
        "Compute the md5, sha1 or sha256 (default) hex digest of a file in a root, streaming it, so any "
        "size works. Useful to check whether a file changed, or whether two files are identical.",
        HashArgs, HashResult, read_only("Hash a file"), hash_file),
    ToolSpec(
        "permissions_file", "File permissions",
        "Owner, group and permission bits of a file, directory or symlink in a root: mode as octal "
        '("0644") and mode_string as ls shows it ("-rw-r--r--"). Read only: permissions cannot be changed.',
        PathArgs, PermissionsResult, read_only("File permissions"), permissions_file),
]
