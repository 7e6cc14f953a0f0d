"""Shared fixtures: a real rootbound server on real temporary directories, driven by a real MCP client.

Most tests use the in-memory transport (the SDK's `Client(server)`); `test_transports.py`
runs the `rootbound` process itself over stdio and Streamable HTTP.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import pytest
import yaml
from mcp import Client
from mcp.client import ClientRequestContext
from mcp.types import CallToolResult, ListRootsResult, Root

from rootbound.config import load_config
from rootbound.fs import beneath
from rootbound.server import App

pytestmark = pytest.mark.anyio

# The servers' crash-recovery records (state_dir) go to this session's own directory, not the user's.
_STATE_HOME = tempfile.mkdtemp(prefix="rootbound-test-state-")
os.environ["XDG_STATE_HOME"] = _STATE_HOME
atexit.register(shutil.rmtree, _STATE_HOME, ignore_errors=True)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class Harness:
    """A connected MCP client plus the app behind it, with helpers that assert the outcome."""

    def __init__(self, app: App, client: Client) -> None:
        self.app = app
        self.client = client

    async def call(self, tool: str, **arguments: Any) -> CallToolResult:
        return await self.client.call_tool(tool, arguments)

    async def ok(self, tool: str, **arguments: Any) -> dict[str, Any]:
        """Call a tool that must succeed; return its structured content."""
        result = await self.call(tool, **arguments)
        assert not result.is_error, f"{tool} failed: {text_of(result)}"
        assert result.structured_content is not None
        return result.structured_content

    async def err(self, tool: str, **arguments: Any) -> str:
        """Call a tool that must fail; return its error text."""
        result = await self.call(tool, **arguments)
        assert result.is_error, f"{tool} unexpectedly succeeded: {result.structured_content}"
        return text_of(result)


class CommandServers:
    """Factory for servers with command tools: `await servers({"allowed": [...]}, roots=..., env=...)`."""

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


def text_of(result: CallToolResult) -> str:
    return "\n".join(c.text for c in result.content if c.type == "text")


def tree(root: Path) -> dict[str, str]:
    """Every entry below `root`: file content, 'dir', 'fifo' or '-> link text' (to compare before and after a call)."""
    out = {}
    for dirpath, dirs, files in os.walk(root):
        for name in dirs + files:
            p = Path(dirpath) / name
            rel = str(p.relative_to(root))
            out[rel] = f"-> {os.readlink(p)}" if p.is_symlink() else "dir" if p.is_dir() else \
                "fifo" if p.is_fifo() else p.read_text()
    return out


def no_host_path(text: str, *paths: Path) -> None:
    for p in paths:
        assert str(p) not in text, f"host path leaked: {text}"


def tr(src: str, dst: str, src_root: str = "workspace", dst_root: str = "workspace") -> dict[str, str]:
    """copy's and move's arguments."""
    return {"source_root": src_root, "source_path": src, "dest_root": dst_root, "dest_path": dst}


MakeServer = Callable[..., Awaitable[Harness]]


class RootsClient:
    """A client that declares the `roots` capability and answers `roots/list` with `roots`."""

    def __init__(self, *roots: str | tuple[str, str]) -> None:
        self.roots = list(roots)
        self.asked = 0

    async def list_roots(self, context: ClientRequestContext) -> ListRootsResult:
        self.asked += 1
        return ListRootsResult(roots=[Root(uri=r) if isinstance(r, str) else Root(uri=r[0], name=r[1])
                                      for r in self.roots])


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    path = tmp_path / "workspace"
    path.mkdir()
    return path


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A directory beside the roots holding a secret no tool may ever return."""
    path = tmp_path / "outside"
    path.mkdir()
    (path / "secret.txt").write_text("OUTSIDE-SECRET\n")
    return path


@pytest.fixture
async def make_server(tmp_path: Path) -> AsyncIterator[MakeServer]:
    """Factory: `await make_server({"name": path_or_(path, tools)}, mode="auto", **config_keys)`."""
    async with AsyncExitStack() as stack:

        async def make(roots: dict[str, Any] | None = None, mode: str = "auto",
                       roots_client: RootsClient | None = None, **config: Any) -> Harness:
            roots = roots or {"workspace": tmp_path / "workspace"}
            entries = []
            for name, spec in roots.items():
                path, tools = (spec, ["*"]) if isinstance(spec, (str, Path)) else spec
                os.makedirs(path, exist_ok=True)
                entries.append({"name": name, "path": str(path), "allowed_tools": tools})
            cfg_file = tmp_path / f"config-{len(entries)}-{id(entries)}.yaml"
            cfg_file.write_text(yaml.safe_dump({"roots": entries, **config}))
            app = App(load_config(str(cfg_file), env={}))
            stack.callback(app.close)
            callback = roots_client.list_roots if roots_client else None
            client = await stack.enter_async_context(Client(app.server, mode=mode, list_roots_callback=callback))
            return Harness(app, client)

        yield make


@pytest.fixture
async def server(make_server: MakeServer, workspace: Path) -> Harness:
    """One root `workspace` with every tool allowed, over the default (2026-07-28) protocol."""
    return await make_server()


@pytest.fixture
async def servers(tmp_path: Path) -> AsyncIterator[CommandServers]:
    async with AsyncExitStack() as stack:
        yield CommandServers(tmp_path, stack)


@pytest.fixture(params=["openat2", "walk"])
def resolver(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Run a security test against both path resolvers (the kernel's and the portable walk)."""
    if request.param == "walk":
        monkeypatch.setattr(beneath, "_open", beneath._walk)
    elif beneath.RESOLVER != "openat2":
        pytest.skip("openat2 is not available on this kernel")
    return str(request.param)
