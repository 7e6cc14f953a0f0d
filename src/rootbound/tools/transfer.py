"""copy and move, within a root or between two roots (the tool must be allowed on both).

The work is the roots' (`Root.copy`, `Root.rename`: see `fs/transfer.py` for the symlink
policy, the all-or-nothing folder copy and crash-safe moves across filesystems); these
handlers check the tool on both roots and shape the result.
"""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

from pydantic import BaseModel, Field

from rootbound.fs import display_path, split_path
from rootbound.tools import render
from rootbound.tools.base import Args, CallContext, RootName, ToolSpec, writes
from rootbound.tools.messages import skip_reason
from rootbound.tools.writing import guard

__all__ = ["TOOLS"]


class TransferArgs(Args):
    PLACES: ClassVar[tuple[tuple[str, str], ...]] = (("source_root", "source_path"), ("dest_root", "dest_path"))

    source_root: RootName = None
    source_path: str
    dest_root: Annotated[str | None, Field(description="Default: source_root.")] = None
    dest_path: str


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


def copy(ctx: CallContext, args: TransferArgs) -> CopyResult:
    src_root = ctx.roots.get_for(args.source_root, "copy")
    dst_root = ctx.roots.get_for(args.dest_root, "copy")
    done = src_root.copy(args.source_path, dst_root, args.dest_path, guard(ctx))
    skipped = [Skipped(path=p, reason=skip_reason(why, kind)) for p, why, kind in done.skipped or ()]
    return CopyResult(source=display_path(split_path(args.source_path)),
                      destination=display_path(split_path(done.destination)), is_directory=done.is_dir,
                      size=done.size, files_copied=done.files, skipped=skipped or None)


def move(ctx: CallContext, args: TransferArgs) -> MoveResult:
    src_root = ctx.roots.get_for(args.source_root, "move")
    dst_root = ctx.roots.get_for(args.dest_root, "move")
    done = src_root.rename(args.source_path, dst_root, args.dest_path, guard(ctx))
    return MoveResult(source=display_path(split_path(args.source_path)),
                      destination=display_path(split_path(done.destination)), is_directory=done.is_dir,
                      method=done.method)


TOOLS = [
    ToolSpec(
        "copy", "Copy a file or folder",
        "Copy a file or folder (recursively) to dest_path, in this or another root; into it if it is a folder. "
        "Replaces a file, never merges folders.",
        TransferArgs, CopyResult, writes("Copy a file or folder", destructive=True, idempotent=True), copy,
        text=lambda _, data: render.copied(data)),
    ToolSpec(
        "move", "Move or rename",
        "Move or rename a file or folder, in this or another root; into dest_path if it is a folder. Replaces a "
        "file, never a folder.",
        TransferArgs, MoveResult, writes("Move or rename", destructive=True, idempotent=False), move,
        text=lambda _, data: render.moved(data)),
]
