"""Where the journal lives and how much it keeps, from the `journal` config key.

The journal directory is `journal.dir` when set (config.py refuses one inside a root, or a root inside
it), else `<state directory>/journal`, the state directory chosen as the crash-recovery records'
is (`recovery.default_state_dirs()`: `$XDG_STATE_HOME/rootbound`, `~/.local/state/rootbound`, then
`/var/tmp/rootbound-state-<uid>`), skipping any candidate that lies in a root or is not safely ours. The
server and the CLI run the same choice over the same roots, so they find the same journal.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

from rootbound.fs import recovery

__all__ = ["DEFAULT_MAX_AGE", "DEFAULT_MAX_BYTES", "DEFAULT_MAX_FILE_SIZE", "Settings", "inside", "parse_duration",
           "resolve"]

DEFAULT_MAX_BYTES: Final = 1 << 30
DEFAULT_MAX_AGE: Final = 14 * 86400.0
DEFAULT_MAX_FILE_SIZE: Final = 64 << 20
_UNITS: Final = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_DURATION: Final = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*\Z")


def parse_duration(text: str | float) -> float:
    """Seconds from `90`, `90s`, `30m`, `2h`, `14d` or `1w`; ValueError otherwise."""
    if isinstance(text, int | float):
        if text < 0:
            raise ValueError("a duration cannot be negative")
        return float(text)
    match = _DURATION.match(text)
    if not match:
        raise ValueError(f"{text!r} is not a duration; write e.g. 90s, 30m, 2h, 14d or 1w")
    return float(match.group(1)) * _UNITS[match.group(2) or "s"]


def inside(path: str, base: str) -> bool:
    """True if `path` is `base` or lies below it (both real paths)."""
    return os.path.commonpath([path, base]) == base


@dataclass(frozen=True)
class Settings:
    dir: str  # real path of the journal directory (one subdirectory per root path)
    max_bytes: int = DEFAULT_MAX_BYTES
    max_age: float = DEFAULT_MAX_AGE
    max_file_size: int = DEFAULT_MAX_FILE_SIZE


def resolve(journal_dir: str | None, state_dir: str | None, root_paths: Iterable[str], *,
            max_bytes: int = DEFAULT_MAX_BYTES, max_age: float = DEFAULT_MAX_AGE,
            max_file_size: int = DEFAULT_MAX_FILE_SIZE) -> Settings | None:
    """The journal's settings, its directory created; None when no usable directory exists (the caller says so)."""
    roots = [os.path.realpath(p) for p in root_paths]
    if journal_dir:
        candidates = [journal_dir]
    else:
        bases = [state_dir] if state_dir else recovery.default_state_dirs()
        candidates = [os.path.join(b, "journal") for b in bases]
    for candidate in candidates:
        parent = recovery.private_dir(os.path.dirname(candidate), roots) if not journal_dir else None
        if not journal_dir and parent is None:
            continue
        chosen = recovery.private_dir(candidate, roots)
        if chosen is not None:
            return Settings(chosen, max_bytes, max_age, max_file_size)
    return None
