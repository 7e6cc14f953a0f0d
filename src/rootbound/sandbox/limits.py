"""Resource limits of a command: which ones, and the three ways they get applied.

* the launcher (`exec_helper.c`, or `exec.py` inside bubblewrap without a compiler) sets
  the `pairs` before it executes the command, under either sandbox;
* `prlimit_argv`: without the compiled launcher under Landlock alone, the util-linux
  `prlimit` program sets them on itself and then executes the command;
* `apply_to_pid`: after the start, when `prlimit` is missing (best effort: what the
  command forked in its first instant keeps the old limits).

A limit is never raised above the server's own hard limit (only root could).
"""

from __future__ import annotations

import contextlib
import resource
import shutil
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rootbound.config import CommandLimits

__all__ = ["PRLIMIT", "apply_to_pid", "describe", "pairs", "prlimit_argv"]

# (config field, resource, prlimit option)
_TABLE = (
    ("cpu_seconds", resource.RLIMIT_CPU, "--cpu"),
    ("address_space", resource.RLIMIT_AS, "--as"),
    ("processes", resource.RLIMIT_NPROC, "--nproc"),
    ("file_size", resource.RLIMIT_FSIZE, "--fsize"),
    ("open_files", resource.RLIMIT_NOFILE, "--nofile"),
)

PRLIMIT = shutil.which("prlimit", path="/usr/bin:/bin:/usr/sbin:/sbin")


def _capped(res: int, value: int) -> int:
    hard = resource.getrlimit(res)[1]
    return value if hard == resource.RLIM_INFINITY else min(value, hard)


def pairs(limits: CommandLimits) -> list[tuple[int, int]]:
    """(resource, value) for every limit that is set, capped by the server's hard limits."""
    out = []
    for field, res, _ in _TABLE:
        value = getattr(limits, field)
        if value is not None:
            out.append((res, _capped(res, value)))
    return out


def prlimit_argv(limits: CommandLimits) -> list[str]:
    """`prlimit --cpu=N:N ... --` (empty when nothing is limited or prlimit is missing)."""
    if PRLIMIT is None:
        return []
    options = []
    for field, res, option in _TABLE:
        value = getattr(limits, field)
        if value is not None:
            value = _capped(res, value)
            options.append(f"{option}={value}:{value}")
    return [PRLIMIT, *options, "--"] if options else []


def apply_to_pid(pid: int, values: list[tuple[int, int]]) -> None:
    for res, value in values:
        with contextlib.suppress(OSError):
            resource.prlimit(pid, res, (value, value))


def describe(limits: CommandLimits) -> str:
    shown = []
    for field, _, _ in _TABLE:
        value = getattr(limits, field)
        if value is not None:
            shown.append(f"{field} {value}")
    fallback = "via prlimit before exec" if PRLIMIT else "set right after start (prlimit not installed)"
    return f"{', '.join(shown) or 'none'} (set by the compiled launcher before exec; without a C compiler {fallback})"
