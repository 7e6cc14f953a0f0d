"""Shared helpers for the command-tool tests (this module holds no tests).

`CommandServers` builds a real App from a real config file (and, when a test
needs it, the seed's environment variables, parsed by `load_config`), with the
`command-output` spill root, and connects a real MCP client to it.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import anyio

from tests.conftest import CommandServers

__all__ = ["CommandServers", "eventually", "file_text", "gone"]


def gone(pid: int) -> bool:
    """True when the process no longer runs (a zombie waiting for a reaper that is not ours counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            state = f.read().rsplit(b")", 1)[1].split()[0]
    except FileNotFoundError:
        return True
    return state in (b"Z", b"X")


async def eventually(predicate: Callable[[], object], seconds: float = 10.0) -> bool:
    """Poll `predicate` while the event loop keeps running (the server under test shares it)."""
    with anyio.move_on_after(seconds):
        while not predicate():
            await anyio.sleep(0.02)
        return True
    return bool(predicate())


async def file_text(path: Path, seconds: float = 10.0) -> str:
    """The stripped text of a file a command writes, once it is there."""
    assert await eventually(lambda: path.exists() and path.read_text().strip(), seconds), f"{path} never appeared"
    return path.read_text().strip()
