"""`rootbound clients`: ready-to-paste MCP client snippets that start *this* rootbound by its absolute path.

Desktop apps (Claude Desktop, Cursor) do not see the shell's PATH or an activated virtual environment, so
`"command": "rootbound"` fails there with `spawn rootbound ENOENT`. The snippets name the console script
that is running now (or `python -m rootbound` with this interpreter), and the roots as absolute paths.
Tokens never appear: HTTP snippets read them from the environment or, in VS Code, prompt for them.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
from dataclasses import dataclass
from typing import Any

from rootbound.config import DEFAULT_ROOT_NAME, parse_root_flag
from rootbound.hosts import url_host

__all__ = ["Setup", "render", "rootbound_command"]

TOKEN_ENV = "ROOTBOUND_AUTH_TOKEN"


def rootbound_command(argv0: str | None = None, executable: str | None = None) -> list[str]:
    """The absolute command that starts this rootbound: the console script, else `python -m rootbound`.

    Symlinks are kept (pipx's and uv's `~/.local/bin/rootbound` are the stable names, and a venv's
    `python` must stay the venv's, not the interpreter it links to)."""
    argv0 = sys.argv[0] if argv0 is None else argv0
    executable = sys.executable if executable is None else executable
    script = os.path.abspath(argv0)
    if os.path.basename(script) == "rootbound" and os.path.isfile(script) and os.access(script, os.X_OK):
        return [script]
    return [os.path.abspath(executable), "-m", "rootbound"]


@dataclass(frozen=True)
class Setup:
    """What the snippets should start or reach."""

    command: list[str]  # absolute
    config: str | None  # absolute path of --config
    roots: list[str]  # --root flags as given
    allow_commands: str | None
    transport: str  # "stdio" or "http"
    host: str
    port: int
    token: bool  # the server requires a bearer token

    def serve_args(self) -> list[str]:
        args = ["serve"]
        if self.config:
            args += ["--config", self.config]
        for flag in self.roots:
            root = parse_root_flag(flag)
            args += ["--root", f"{root['name']}={os.path.abspath(root['path'])}"]
        if not self.config and not self.roots:
            # What `rootbound` alone would serve here, pinned: a desktop app starts servers in / or $HOME.
            args += ["--root", f"{DEFAULT_ROOT_NAME}={os.getcwd()}"]
        if self.allow_commands:
            args += ["--allow-commands", self.allow_commands]
        return args

    @property
    def url(self) -> str:
        host = "127.0.0.1" if self.host in ("0.0.0.0", "::", "") else url_host(self.host)
        return f"http://{host}:{self.port}/mcp"


def _fence(lang: str, client: str, transport: str, body: str) -> str:
    return f"```{lang} client={client} transport={transport}\n{body.rstrip()}\n```"


def _json(data: Any) -> str:
    return json.dumps(data, indent=2, ensure_ascii=False)


def _stdio_entry(setup: Setup) -> dict[str, Any]:
    argv = [*setup.command, *setup.serve_args()]
    return {"command": argv[0], "args": argv[1:]}


def render(setup: Setup) -> str:
    """The snippets as Markdown: a heading per client, each snippet fenced (tests parse these fences)."""
    argv = [*setup.command, *setup.serve_args()]
    stdio = _stdio_entry(setup)
    out = [f"# MCP client snippets for this rootbound\n\nCommand: {shlex.join(setup.command)}\n\n"
           "An absolute path on purpose: desktop apps do not see your shell's PATH or an activated virtual "
           "environment. If this path is temporary (a build folder, `uvx`), install rootbound with "
           "`pipx install` or `uv tool install` and run `rootbound clients` again (docs/clients.md)."]
    if setup.transport == "http":
        address = ["--host", setup.host] if setup.host != "127.0.0.1" else []
        serve = [*setup.command, "serve", "--transport", "http", *address, "--port", str(setup.port),
                 *setup.serve_args()[1:]]
        out.append(f"Start the server yourself: `{shlex.join(serve)}`"
                   + (f" (with {TOKEN_ENV} set in its environment)." if setup.token else "."))
        header = f' --header "Authorization: Bearer ${TOKEN_ENV}"' if setup.token else ""
        out.append("## Claude Code\n\n" + _fence("sh", "claude-code", "http",
                                                  f"claude mcp add --transport http rootbound {setup.url}{header}"))
        out.append("## Claude Desktop\n\nClaude Desktop's config file starts servers itself, over stdio: this "
                   "starts its own rootbound with the same configuration (or add the URL under Settings → "
                   "Connectors). `claude_desktop_config.json`:\n\n"
                   + _fence("json", "claude-desktop", "stdio", _json({"mcpServers": {"rootbound": stdio}})))
        cursor: dict[str, Any] = {"url": setup.url}
        if setup.token:
            cursor["headers"] = {"Authorization": f"Bearer ${{env:{TOKEN_ENV}}}"}
        out.append("## Cursor\n\n`~/.cursor/mcp.json` (or `.cursor/mcp.json` in a project)"
                   + (f"; Cursor reads the token from its environment ({TOKEN_ENV})" if setup.token else "")
                   + ":\n\n" + _fence("json", "cursor", "http", _json({"mcpServers": {"rootbound": cursor}})))
        vscode: dict[str, Any] = {"servers": {"rootbound": {"type": "http", "url": setup.url}}}
        if setup.token:  # prompted once and kept in VS Code's secret storage, never in the file
            vscode = {"inputs": [{"type": "promptString", "id": "rootbound-token",
                                  "description": "rootbound bearer token", "password": True}],
                      "servers": {"rootbound": {"type": "http", "url": setup.url,
                                                "headers": {"Authorization": "Bearer ${input:rootbound-token}"}}}}
        out.append("## VS Code\n\n`.vscode/mcp.json`:\n\n" + _fence("json", "vscode", "http", _json(vscode)))
    else:
        out.append("## Claude Code\n\n" + _fence("sh", "claude-code", "stdio",
                                                  f"claude mcp add rootbound -- {shlex.join(argv)}"))
        out.append("## Claude Desktop\n\n`claude_desktop_config.json` (Settings → Developer → Edit Config):\n\n"
                   + _fence("json", "claude-desktop", "stdio", _json({"mcpServers": {"rootbound": stdio}})))
        out.append("## Cursor\n\n`~/.cursor/mcp.json` (or `.cursor/mcp.json` in a project):\n\n"
                   + _fence("json", "cursor", "stdio", _json({"mcpServers": {"rootbound": stdio}})))
        out.append("## VS Code\n\n`.vscode/mcp.json`:\n\n" + _fence(
            "json", "vscode", "stdio", _json({"servers": {"rootbound": {"type": "stdio", **stdio}}})))
    return "\n\n".join(out) + "\n"
