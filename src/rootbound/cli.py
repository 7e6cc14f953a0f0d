"""Command line: `rootbound [serve] | check | call TOOL [JSON] | tools | clients | history | show ID | undo ...`."""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
from collections.abc import Sequence
from typing import Any

from rootbound import __version__
from rootbound.config import Config, ConfigError, load_config

__all__ = ["main"]

COMMANDS = ("serve", "check", "call", "tools", "clients", "history", "show", "undo")


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", metavar="FILE", help="YAML configuration file")
    p.add_argument("--root", metavar="[NAME=]PATH", action="append", default=[],
                   help="serve PATH as root NAME (default: the folder's name), all tools allowed; repeatable")
    p.add_argument("--allow-commands", metavar="LIST", help='comma-separated programs the command tools may run, '
                   'or "*"')
    p.add_argument("--log-level", choices=["DEBUG", "INFO", "WARNING", "ERROR"], type=str.upper,
                   help="log level (logs go to stderr; default INFO for serve, as JSON lines; ERROR for the other "
                   "commands, as plain text)")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rootbound", description="An MCP server for files and commands, confined to named roots.",
        epilog="With neither --config nor --root, the current directory is served as root 'workspace'.")
    parser.add_argument("--version", action="version", version=f"rootbound {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    serve = sub.add_parser("serve", help="serve MCP over stdio (default) or Streamable HTTP")
    _common(serve)
    serve.add_argument("--transport", choices=["stdio", "http"], default="stdio")
    serve.add_argument("--host", help="HTTP bind address (default 127.0.0.1)")
    serve.add_argument("--port", type=int, help="HTTP port (default 8091)")
    check = sub.add_parser("check", help="validate the configuration and print what the agent will be able to do")
    _common(check)
    check.add_argument("--json", action="store_true", help="print the resolved policy as JSON")
    call = sub.add_parser("call", help="run one tool in-process and print its result")
    call.add_argument("tool", help="tool name, e.g. read_file")
    call.add_argument("arguments", nargs="?", default="{}", help="tool arguments as a JSON object")
    _common(call)
    tools = sub.add_parser("tools", help="list the tools this configuration exposes")
    _common(tools)
    tools.add_argument("--markdown", action="store_true", help="print the full tool reference as Markdown")
    clients = sub.add_parser("clients", help="print ready-to-paste snippets for Claude Code, Claude Desktop, Cursor "
                             "and VS Code that start this rootbound by its absolute path")
    _common(clients)
    clients.add_argument("--transport", choices=["stdio", "http"], default="stdio",
                         help="stdio: the client starts rootbound; http: clients connect to a server you start")
    clients.add_argument("--host", help="HTTP address the server listens on (default 127.0.0.1)")
    clients.add_argument("--port", type=int, help="HTTP port (default 8091)")
    from rootbound.journal.cli import add_parsers  # history, show, undo: the change journal

    add_parsers(sub, _common)
    return parser


def _load(args: argparse.Namespace) -> Config:
    overrides = {"host": getattr(args, "host", None), "port": getattr(args, "port", None),
                 "allow_commands": args.allow_commands}
    return load_config(args.config, args.root, overrides)


def _reach_checks(command: str, config: Config) -> tuple[int | None, list[str]]:
    """Refuse a configuration that lets the agent change the server's own code; the warnings to show."""
    from rootbound import preflight

    if command not in ("serve", "check", "call"):
        return None, []
    refused = preflight.refusals(config)
    for reason in refused:
        print(f"rootbound: refusing to serve: {reason}", file=sys.stderr)
    return (1 if refused else None), preflight.warnings(config)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or (argv[0] not in COMMANDS and argv[0] not in ("-h", "--help", "--version")):
        argv.insert(0, "serve")
    args = _parser().parse_args(argv)
    if args.command != "serve":
        return _main(args)
    # Start-up makes some 100,000 long-lived objects (the MCP SDK's models and schemas, our tools') and hardly any
    # garbage: the collections that it would trigger only cost time (~5% of start-up). server/lifecycle.py turns
    # collection back on once start-up is over, with those objects frozen out of it.
    gc.disable()
    try:
        return _main(args)
    finally:
        gc.enable()


def _main(args: argparse.Namespace) -> int:
    from rootbound.logs import configure_logging  # after parsing: `--help` stays instant

    if args.command == "serve":
        configure_logging(args.log_level or "INFO")
    else:  # a person reads these: the result or the error, not the server's log lines before it
        configure_logging(args.log_level or "ERROR", human=True)
    if args.command in ("history", "show", "undo"):  # the change journal: its own reading of --root
        from rootbound.journal.cli import run as run_journal

        return run_journal(args)
    try:
        config = _load(args)
    except ConfigError as exc:
        print(f"rootbound: configuration error: {exc}", file=sys.stderr)
        return 1
    refused, warnings = _reach_checks(args.command, config)
    if refused is not None:
        return refused

    if args.command == "clients":
        from rootbound.client_snippets import Setup, render, rootbound_command

        print(render(Setup(command=rootbound_command(), config=os.path.abspath(args.config) if args.config else None,
                           roots=args.root, allow_commands=args.allow_commands, transport=args.transport,
                           host=config.host, port=config.port, token=bool(config.tokens))), end="")
        return 0

    from rootbound.server import App, run  # imports the MCP SDK (~0.7 s): only when needed

    try:
        app = App(config)
    except OSError as exc:
        print(f"rootbound: cannot open root: {exc}", file=sys.stderr)
        return 1
    if args.command == "serve":
        from rootbound.logs import log
        from rootbound.preflight import nesting_warnings
        from rootbound.server.listening import ListenError

        # Root names and user names only: no host paths in the log.
        for warning in [*warnings, *nesting_warnings(app.roots.values())]:
            log.warning(warning)
        try:
            return run(app, args.transport)
        except ListenError as exc:
            print(f"rootbound: {exc}", file=sys.stderr)
            return 1
    from rootbound import report  # check and tools only: it loads every part a report describes

    try:
        if args.command == "check":
            data = report.policy(app)
            data["warnings"] = [*warnings, *data["warnings"]]
            print(json.dumps(data, indent=2) if args.json else report.render_policy(data))
            return 1 if report.problems(data) else 0
        if args.command == "tools":
            if args.markdown:
                print(report.tools_markdown(app), end="")
                return 0
            for spec in app.tools.values():
                print(f"{spec.name:18} {spec.title}")
            return 0
        return _call(app, args.tool, args.arguments)
    finally:
        app.close()


def _call(app: Any, tool: str, raw: str) -> int:
    import anyio

    try:
        arguments = json.loads(raw)
    except json.JSONDecodeError as exc:
        print(f"rootbound: arguments are not valid JSON: {exc}", file=sys.stderr)
        return 2
    if not isinstance(arguments, dict):
        print("rootbound: arguments must be a JSON object, e.g. '{\"root\": \"workspace\", \"path\": \".\"}'",
              file=sys.stderr)
        return 2
    result = anyio.run(app.call, tool, arguments)
    if result.is_error:
        print("\n".join(c.text for c in result.content if c.type == "text"), file=sys.stderr)
        return 1
    if result.structured_content is not None:
        print(json.dumps(result.structured_content, indent=2, ensure_ascii=False))
    else:
        print("\n".join(c.text for c in result.content if c.type == "text"))
    return 0
