"""One adapter per server: how to start it and how to call each benchmark operation on it.

Every operation method returns a `Call` (what to time, and how to count the results in the reply, untimed) or
a string saying why the server has no such operation. Arguments are what an agent would send to get the whole
result (the whole file, every match), so that the counts are comparable; where a server cannot, the runner
marks its count."""

from __future__ import annotations

import atexit
import json
import os
import re
import shutil
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import anyio
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.types import CallToolResult, TextContent, Tool

from _peers.fixture import Fixture, line_count
from _peers.install import Unavailable, npm_bin, npm_package, pip_package

REFERENCE = ("@modelcontextprotocol/server-filesystem", "2026.8.31")
DESKTOP_COMMANDER = ("@wonderwhy-er/desktop-commander", "0.2.52")
SHELL_SERVER = ("mcp-shell-server", "1.1.14")
MAX_RESULTS = 100_000  # rootbound's ceiling for grep/glob results; far above what the corpora hold


class CallFailed(Exception):
    """A tool call that returned an error (or a reply the adapter could not read)."""


@dataclass
class Call:
    run: Callable[[], Any]  # timed; returns the reply, or an awaitable of it
    count: Callable[[Any], int | None] = lambda _: None  # untimed: results found in what `run` returned


def text_of(result: CallToolResult) -> str:
    return "".join(block.text for block in result.content if isinstance(block, TextContent))


def reply_bytes(reply: Any) -> int | None:
    """Size of a reply as JSON (re-serialised by the client, so close to, not exactly, what crossed the pipe)."""
    if isinstance(reply, CallToolResult):
        return len(reply.model_dump_json(by_alias=True, exclude_none=True).encode())
    if isinstance(reply, list):
        sizes = [reply_bytes(r) for r in reply]
        return sum(s for s in sizes if s is not None) if any(s is not None for s in sizes) else None
    return None


def together(calls: list[Call | str]) -> Call | str:
    """All `calls` at once on the same session; the count is the sum of theirs."""
    for call in calls:
        if isinstance(call, str):
            return call
    ready = [c for c in calls if isinstance(c, Call)]

    async def run() -> list[Any]:
        replies: list[Any] = [None] * len(ready)

        async def one(i: int) -> None:
            replies[i] = await ready[i].run()
        async with anyio.create_task_group() as tg:
            for i in range(len(ready)):
                tg.start_soon(one, i)
        return replies
    return Call(run, lambda replies: sum(c.count(r) or 0 for c, r in zip(ready, replies, strict=True)))


def _size_field(pattern: str) -> Callable[[Any], int | None]:
    def count(result: CallToolResult) -> int | None:
        found = re.search(pattern, text_of(result), re.MULTILINE)
        return int(found.group(1)) if found else None
    return count


def _hi_lines(text: str) -> int:
    return sum(1 for line in text.splitlines() if line.strip() == "hi")


class Adapter:
    key: str = ""
    label: str = ""
    variant_of: str | None = None  # a second process of another adapter's server, for some operations only
    only: frozenset[str] | None = None  # the operations a variant is there for

    def __init__(self, cache: Path, fx: Fixture) -> None:
        self.cache, self.fx = cache, fx
        self.client: Client | None = None  # set by the runner once the session is open
        self.tools: dict[str, Tool] = {}
        self.errlog: TextIO = sys.stderr  # the runner points it at a log file in the cache

    def prepare(self) -> None:
        """Install what the server needs (raise install.Unavailable to skip it)."""

    def params(self) -> StdioServerParameters:
        raise NotImplementedError

    def connect(self) -> Client:
        """A client that spawns a fresh server process on entry and speaks the handshake-era protocol (what the
        peers speak): spawn, `initialize`, its result, `notifications/initialized`."""
        return Client(stdio_client(self.params(), errlog=self.errlog), mode="legacy")

    def tool(self, name: str, args: dict[str, Any], count: Callable[[Any], int | None]) -> Call | str:
        if name not in self.tools:
            return f"no {name!r} tool in its tools/list"

        async def run() -> CallToolResult:
            assert self.client is not None
            result = await self.client.call_tool(name, args)
            if result.is_error:
                raise CallFailed(f"{name}: {text_of(result)[:300]}")
            return result
        return Call(run, count)

    @staticmethod
    def written(path: Path, content: str) -> Callable[[Any], int | None]:
        """Bytes of `content` found in the file after the call (0 if it is not what was sent); then the file is
        scribbled over (same size, untimed), so that the next call must really write it again."""
        def count(_: Any) -> int:
            data = path.read_bytes() if path.exists() else b""
            path.write_bytes(b"-" * len(data))
            return len(data) if data == content.encode() else 0
        return count

    # the operations (paths relative to the fixture's folder)
    def read(self, rel: str) -> Call | str:
        return "not mapped"

    def list_folder(self, rel: str) -> Call | str:
        return "not mapped"

    def grep(self, rel: str) -> Call | str:
        return "not mapped"

    def glob(self, rel: str) -> Call | str:
        return "not mapped"

    def write(self, rel: str, content: str) -> Call | str:
        return "not mapped"

    def echo(self) -> Call | str:
        return "not mapped"

    def stat(self, rel: str) -> Call | str:
        return "not mapped"


class Reference(Adapter):
    """The reference filesystem server, given the fixture folder as its one allowed directory."""
    key, label = "reference", f"reference {REFERENCE[1]}"

    def prepare(self) -> None:
        self.argv = npm_bin(npm_package(self.cache, *REFERENCE), "mcp-server-filesystem")

    def params(self) -> StdioServerParameters:
        return StdioServerParameters(command=self.argv[0], args=[*self.argv[1:], str(self.fx.work)])

    def read(self, rel: str) -> Call | str:
        return self.tool("read_text_file", {"path": str(self.fx.abs(rel))}, lambda r: line_count(text_of(r)))

    def list_folder(self, rel: str) -> Call | str:
        return self.tool("list_directory", {"path": str(self.fx.abs(rel))},
                         lambda r: sum(1 for line in text_of(r).splitlines() if line.startswith(("[FILE]", "[DIR]"))))

    def grep(self, rel: str) -> Call | str:
        return "no content search (search_files matches names only)"

    def glob(self, rel: str) -> Call | str:
        def count(r: CallToolResult) -> int:
            text = text_of(r)
            return 0 if text.startswith("No matches") else len(text.splitlines())
        return self.tool("search_files", {"path": str(self.fx.abs(rel)), "pattern": self.fx.glob}, count)

    def write(self, rel: str, content: str) -> Call | str:
        return self.tool("write_file", {"path": str(self.fx.abs(rel)), "content": content},
                         self.written(self.fx.abs(rel), content))

    def echo(self) -> Call | str:
        return "no command tool"

    def stat(self, rel: str) -> Call | str:
        return self.tool("get_file_info", {"path": str(self.fx.abs(rel))}, _size_field(r"^size: (\d+)"))


class DesktopCommander(Adapter):
    """Desktop Commander with a config of its own (HOME in the cache): telemetry off, the fixture folder allowed,
    commands through /bin/sh; its feature-flag fetch goes to a closed local port."""
    key, label = "desktop-commander", f"Desktop Commander {DESKTOP_COMMANDER[1]}"
    POLL = 0.002  # seconds between polls of a running search

    def prepare(self) -> None:
        self.argv = npm_bin(npm_package(self.cache, *DESKTOP_COMMANDER), "desktop-commander")
        self.home = self.cache / "desktop-commander-home"
        config = self.home / ".claude-server-commander" / "config.json"
        config.parent.mkdir(parents=True, exist_ok=True)
        config.write_text(json.dumps({
            "telemetryEnabled": False, "allowedDirectories": [str(self.fx.work)], "defaultShell": "/bin/sh",
            "pendingWelcomeOnboarding": False, "welcomeOnboardingEligible": False}))

    def params(self) -> StdioServerParameters:
        return StdioServerParameters(command=self.argv[0], args=self.argv[1:], env={
            "HOME": str(self.home), "DESKTOP_COMMANDER_DISABLE_TELEMETRY": "1",
            "DC_FLAG_URL": "http://127.0.0.1:9/flags.json"})

    def read(self, rel: str) -> Call | str:
        def count(r: CallToolResult) -> int:
            text = text_of(r)
            if text.startswith("[Reading"):  # "[Reading N lines from start (total: N lines, 0 remaining)]\n\n"
                text = text.split("\n\n", 1)[1] if "\n\n" in text else ""
            return line_count(text)
        # `length` in lines: the whole file (the default is the configured 1,000 lines)
        return self.tool("read_file", {"path": str(self.fx.abs(rel)), "offset": 0, "length": 10**9}, count)

    def list_folder(self, rel: str) -> Call | str:
        return self.tool("list_directory", {"path": str(self.fx.abs(rel)), "depth": 1},
                         lambda r: sum(1 for line in text_of(r).splitlines() if line.startswith(("[FILE]", "[DIR]"))))

    def _search(self, args: dict[str, Any], marker: str) -> Call | str:
        """start_search, then get_more_search_results until the session completes: every result delivered."""
        if "start_search" not in self.tools or "get_more_search_results" not in self.tools:
            return "no start_search/get_more_search_results tools in its tools/list"

        async def call(name: str, arguments: dict[str, Any]) -> CallToolResult:
            assert self.client is not None
            result = await self.client.call_tool(name, arguments)
            if result.is_error:
                raise CallFailed(f"{name}: {text_of(result)[:300]}")
            return result

        def found(result: CallToolResult) -> int:
            return sum(1 for line in text_of(result).splitlines() if line.startswith(marker))

        async def run() -> list[CallToolResult]:
            replies = [await call("start_search", args)]
            session = re.search(r"session: (\S+)", text_of(replies[0]))
            if not session:
                raise CallFailed(f"start_search: no session id in {text_of(replies[0])[:200]!r}")
            received = 0
            while True:
                replies.append(await call("get_more_search_results",
                                          {"sessionId": session.group(1), "offset": received, "length": 10**9}))
                new = found(replies[-1])
                received += new
                if "Status: COMPLETED" in text_of(replies[-1]):
                    return replies
                if not new:
                    await anyio.sleep(self.POLL)
        # the start reply previews a few results; the pages hold them all
        return Call(run, lambda replies: sum(found(r) for r in replies[1:]))

    def grep(self, rel: str) -> Call | str:
        return self._search({"path": str(self.fx.abs(rel)), "pattern": self.fx.literal, "searchType": "content",
                             "literalSearch": True, "ignoreCase": False, "includeHidden": True, "contextLines": 0},
                            "📄")

    def glob(self, rel: str) -> Call | str:
        return self._search({"path": str(self.fx.abs(rel)), "pattern": self.fx.glob, "searchType": "files",
                             "ignoreCase": False, "includeHidden": True}, "📁")

    def write(self, rel: str, content: str) -> Call | str:
        return self.tool("write_file", {"path": str(self.fx.abs(rel)), "content": content, "mode": "rewrite"},
                         self.written(self.fx.abs(rel), content))

    def echo(self) -> Call | str:
        def count(r: CallToolResult) -> int:
            return _hi_lines(text_of(r).split("Initial output:", 1)[-1])
        return self.tool("start_process", {"command": "echo hi", "timeout_ms": 10_000}, count)

    def stat(self, rel: str) -> Call | str:
        return self.tool("get_file_info", {"path": str(self.fx.abs(rel))}, _size_field(r"^size: (\d+)"))


class ShellServer(Adapter):
    """mcp-shell-server: every operation is an allowlisted command run in the fixture folder; its output cap
    raised so a 1 MB `cat` is not refused."""
    key, label = "mcp-shell-server", f"mcp-shell-server {SHELL_SERVER[1]}"

    def prepare(self) -> None:
        self.exe = pip_package(self.cache, *SHELL_SERVER, script="mcp-shell-server")

    def params(self) -> StdioServerParameters:
        return StdioServerParameters(command=str(self.exe), args=[], env={
            "ALLOW_COMMANDS": "echo,cat,ls,stat", "MCP_SHELL_OUTPUT_LIMIT_BYTES": str(64 * 1024 * 1024)})

    def run(self, argv: list[str], count: Callable[[Any], int | None], stdin: str | None = None) -> Call | str:
        args: dict[str, Any] = {"command": argv, "directory": str(self.fx.work)}
        if stdin is not None:
            args["stdin"] = stdin
        return self.tool("shell_execute", args, count)

    def read(self, rel: str) -> Call | str:
        return self.run(["cat", rel], lambda r: line_count(text_of(r)))

    def list_folder(self, rel: str) -> Call | str:
        return self.run(["ls", "-A", "-p", rel], lambda r: len(text_of(r).splitlines()))

    def grep(self, rel: str) -> Call | str:
        return "no search tool (a grep through it would time GNU grep, not the server)"

    def glob(self, rel: str) -> Call | str:
        return "no search tool"

    def write(self, rel: str, content: str) -> Call | str:
        # the server itself performs the `>` redirection into the file
        return self.run(["cat", ">", rel], self.written(self.fx.abs(rel), content), stdin=content)

    def echo(self) -> Call | str:
        return self.run(["echo", "hi"], lambda r: _hi_lines(text_of(r)))

    def stat(self, rel: str) -> Call | str:
        return self.run(["stat", rel], _size_field(r"Size: (\d+)"))


NOBODY = 65534


class Rootbound(Adapter):
    """rootbound from this checkout (the interpreter running the benchmark), serving the fixture folder as root
    `bench`, `echo` allowed; `sandbox` None keeps the default (auto: bubblewrap with Landlock inside). `unprivileged`:
    the server runs as `nobody` (most deployments are not root), on a folder of its own; echo only."""
    key, label = "rootbound", "rootbound"

    def __init__(self, cache: Path, fx: Fixture, sandbox: str | None = None, *, unprivileged: bool = False) -> None:
        super().__init__(cache, fx)
        self.sandbox = sandbox
        self.unprivileged = unprivileged
        self.home = cache  # where its config lies (a folder nobody can reach, for the unprivileged variant)
        if sandbox is not None:
            self.key, self.label = f"rootbound-{sandbox}", f"rootbound, sandbox: {sandbox}"
            self.variant_of, self.only = "rootbound", frozenset({"echo"})
        if unprivileged:
            self.key, self.label = "rootbound-nobody", "rootbound, server as nobody"
            self.variant_of, self.only = "rootbound", frozenset({"echo"})

    def prepare(self) -> None:
        script = Path(sys.executable).with_name("rootbound")
        self.argv = [str(script)] if script.exists() else [sys.executable, "-m", "rootbound"]
        commands: dict[str, Any] = {"allowed": ["echo"]}
        if self.sandbox is not None:
            commands["sandbox"] = self.sandbox
        root = self.fx.work
        if self.unprivileged:
            if os.geteuid() != 0 or shutil.which("setpriv") is None:
                raise Unavailable("needs root and util-linux's setpriv to start the server as nobody")
            # A folder of its own: the cache and the fixture may lie where nobody cannot go (/root). Not in /tmp,
            # unlike the fixture: a root there is carried into each command's fresh /tmp, one more bind per echo.
            self.home = Path(tempfile.mkdtemp(prefix="rootbound-bench-nobody-", dir="/var/tmp"))
            atexit.register(shutil.rmtree, self.home, True)
            root = self.home / "root"
            root.mkdir()
            for path in (self.home, root):
                os.chown(path, NOBODY, NOBODY)
            self.argv = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", *self.argv]
        self.config = self.home / f"{self.key}.yaml"
        self.config.write_text(json.dumps({"roots": [{"name": "bench", "path": str(root)}],
                                           "commands": commands}))  # JSON is YAML
        self.config.chmod(0o644)

    def params(self) -> StdioServerParameters:
        # only the SDK's default environment: no ALLOWED_COMMANDS or ROOTBOUND_* from the caller's shell
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(self.home)} if self.unprivileged else None
        return StdioServerParameters(command=self.argv[0], args=[*self.argv[1:], "--config", str(self.config)],
                                     env=env)

    def args(self, **extra: Any) -> dict[str, Any]:
        return {"root": "bench", **extra}

    @staticmethod
    def structured(r: CallToolResult) -> dict[str, Any]:
        if r.structured_content is None:
            raise CallFailed(f"no structuredContent in {text_of(r)[:200]!r}")
        return dict(r.structured_content)

    def read(self, rel: str) -> Call | str:
        return self.tool("read_file", self.args(path=rel), lambda r: line_count(self.structured(r)["content"]))

    def list_folder(self, rel: str) -> Call | str:
        extra: dict[str, Any] = {}
        schema = self.tools["list_folder"].input_schema if "list_folder" in self.tools else {}
        if "limit" in schema.get("properties", {}):  # list_folder pages (1,000 by default) since it has `limit`
            extra["limit"] = self.fx.entries
        return self.tool("list_folder", self.args(path=rel, **extra), lambda r: len(self.structured(r)["entries"]))

    def grep(self, rel: str) -> Call | str:
        return self.tool("grep", self.args(pattern=re.escape(self.fx.literal), path=rel, max_results=MAX_RESULTS,
                                           timeout_seconds=600), lambda r: len(self.structured(r)["matches"]))

    def glob(self, rel: str) -> Call | str:
        return self.tool("glob", self.args(pattern=self.fx.glob, path=rel, max_results=MAX_RESULTS,
                                           timeout_seconds=600), lambda r: len(self.structured(r)["matches"]))

    def write(self, rel: str, content: str) -> Call | str:
        return self.tool("write_file", self.args(path=rel, content=content), self.written(self.fx.abs(rel), content))

    def echo(self) -> Call | str:
        return self.tool("execute_command", {"command": "echo hi", "root": "bench"},
                         lambda r: _hi_lines(str(self.structured(r).get("stdout", ""))))

    def stat(self, rel: str) -> Call | str:
        return self.tool("stat_file", self.args(path=rel), lambda r: int(self.structured(r)["size"]))


def all_adapters(cache: Path, fx: Fixture) -> list[Adapter]:
    return [Reference(cache, fx), DesktopCommander(cache, fx), ShellServer(cache, fx), Rootbound(cache, fx),
            Rootbound(cache, fx, "landlock"), Rootbound(cache, fx, "off"), Rootbound(cache, fx, unprivileged=True)]
