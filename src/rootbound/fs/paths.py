"""An agent's path as the core reads it: components, the display form, and lexical forms that are never opened.

A path is relative to its root; a leading `/` is taken relative to the root too (the root
is the agent's `/`), and `""`, `"."` and `"/"` all name the root. Nothing is normalised
lexically before resolution, because `a/..` is not `.` when `a` is a symlink: the
resolver (`beneath.py`) decides where `..` leads. The lexical forms below serve only to
match rules (protected paths, the symlink policy of copies), never to open anything.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable

from rootbound.errors import Kind, PathError

__all__ = ["TYPE_NAMES", "display_path", "file_type", "lexical", "split_path", "stays_inside"]


def split_path(path: str) -> list[str]:
    """Split an agent's root-relative path into components, refusing what no name may hold. `..` is kept."""
    if "\x00" in path:
        raise PathError("path", path, Kind.NULL_BYTE)
    parts = [p for p in path.split("/") if p not in ("", ".")]
    for part in parts:
        try:
            encoded = os.fsencode(part)
        except UnicodeEncodeError:  # a lone surrogate that no file name can hold
            raise PathError("path", path, Kind.NOT_UTF8) from None
        if len(encoded) > 255:
            raise PathError("path", path, Kind.COMPONENT_TOO_LONG)
    return parts


def display_path(parts: Iterable[str]) -> str:
    """The canonical root-relative spelling of a path for results: `a/b`, or `.` for the root."""
    joined = "/".join(parts)
    return joined or "."


def lexical(parts: list[str]) -> list[str]:
    """`parts` with each `..` cancelling the name before it (a spelling to match rules on, never to open)."""
    out: list[str] = []
    for part in parts:
        if part != "..":
            out.append(part)
        elif out:
            out.pop()
    return out


def stays_inside(base: list[str] | None, rel: str, text: str) -> bool:
    """Would symlink text `text`, placed at `rel` below the folder `base` (root-relative), stay in the root?

    Decided lexically from the link's place: an absolute link, or an unknown base, never does."""
    if base is None or text.startswith("/"):
        return False
    where = [*base, *rel.split("/")[:-1]]
    for comp in text.split("/"):
        if comp == "..":
            if not where:
                return False
            where.pop()
        elif comp not in ("", "."):
            where.append(comp)
    return True


# By S_IFMT bits; `file_type` is the lookup (a listing's per-entry loop uses the dict itself).
TYPE_NAMES = {stat.S_IFREG: "file", stat.S_IFDIR: "directory", stat.S_IFLNK: "symlink", stat.S_IFIFO: "fifo",
              stat.S_IFSOCK: "socket", stat.S_IFCHR: "device", stat.S_IFBLK: "device"}


def file_type(mode: int) -> str:
    """The seed's entry type names, plus the special kinds a root may hold."""
    return TYPE_NAMES.get(stat.S_IFMT(mode), "unknown")
