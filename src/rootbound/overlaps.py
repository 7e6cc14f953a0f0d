"""Roots inside other roots. A root is only as read-only as every root that contains it: a "read-only"
root nested in a writable one can still be changed through the outer root's file tools (and by commands
under Landlock alone, which cannot carve a read-only subtree out of a writable one). `check` and the
startup log warn about it."""

from __future__ import annotations

from collections.abc import Iterable

from rootbound.fs import Root
from rootbound.sandbox.layout import WRITING_TOOLS, is_under

__all__ = ["nesting_warnings"]


def _writable(root: Root) -> bool:
    return bool(root.allowed_tools & WRITING_TOOLS)


def nesting_warnings(roots: Iterable[Root]) -> list[str]:
    """One sentence per read-only root that a writable root contains, or that contains a writable root."""
    roots = list(roots)
    warnings = []
    for inner in roots:
        for outer in roots:
            if inner is outer or not is_under(inner.real_path, outer.real_path) or _writable(inner) == \
                    _writable(outer):
                continue
            if _writable(outer):
                warnings.append(f"root {inner.name!r} is read-only, but it lies inside the writable root "
                                f"{outer.name!r}, through which the agent's file tools can still change it; "
                                f"move it out of {outer.name!r}, or narrow {outer.name!r} to the folders that "
                                "should be writable")
            else:
                warnings.append(f"root {outer.name!r} is read-only, but it contains the writable root "
                                f"{inner.name!r}: that part of {outer.name!r} can change")
    return warnings
