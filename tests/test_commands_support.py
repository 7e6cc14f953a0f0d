"""Shared helpers for the command-tool tests (this module holds no tests).

`CommandServers` builds a real App from a real config file (and, when a test
needs it, the seed's environment variables, parsed by `load_config`), with the
`command-output` spill root, and connects a real MCP client to it.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import anyio
import yaml
from mcp import Client

from rootbound.config import load_config
from rootbound.server import App
from tests.conftest import Harness

__all__ = ["CommandServers", "eventually", "file_text", "gone"]


class CommandServers:
    def __init__(self, tmp_path: Path, stack: AsyncExitStack) -> None:
        self.tmp_path = tmp_path
        self.stack = stack
        self.count = 0

    async def __call__(self, commands: dict[str, Any] | None = None, *, roots: dict[str, Path] | None = None,
                       env: dict[str, str] | None = None, mode: str = "auto", **config: Any) -> Harness:
        roots = roots or {"workspace": self.tmp_path / "workspace"}
        for path in roots.values():
            path.mkdir(parents=True, exist_ok=True)
        data: dict[str, Any] = {"roots": [{"name": n, "path": str(p)} for n, p in roots.items()], **config}
        if commands is not None:
            data["commands"] = commands
        self.count += 1
        cfg_file = self.tmp_path / f"commands-config-{self.count}.yaml"
        cfg_file.write_text(yaml.safe_dump(data))
        cfg = load_config(str(cfg_file), env=env or {})
        app = App(cfg)
        self.stack.callback(app.close)
        client = await self.stack.enter_async_context(Client(app.server, mode=mode))
        return Harness(app, client)


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
