"""The copy-paste material stays true: client snippets and generated references (containers: test_container.py)."""

from __future__ import annotations

import json
import re
import shlex
import tomllib
from pathlib import Path

import pytest
import yaml

from rootbound import cli, summary
from rootbound.config import Config, config_json_schema, load_config
from rootbound.server import App
from rootbound.tools.errors import COMMON_ERRORS, TOOL_ERRORS

REPO = Path(__file__).resolve().parent.parent
FENCE = re.compile(r"^```(\w+) ([^\n]*client=[^\n]*)\n(.*?)^```", re.S | re.M)


def snippets() -> list[tuple[str, dict[str, str], str]]:
    text = (REPO / "docs" / "clients.md").read_text()
    found = []
    for lang, info, body in FENCE.findall(text):
        attrs = dict(item.split("=", 1) for item in info.split())
        found.append((lang, attrs, body))
    return found


def assert_valid_rootbound_args(args: list[str]) -> None:
    """The arguments must be accepted by rootbound's own parser (argparse exits on anything unknown)."""
    argv = list(args)
    if not argv or argv[0] not in cli.COMMANDS:
        argv.insert(0, "serve")
    try:
        parsed = cli._parser().parse_args(argv)
    except SystemExit as exc:  # pragma: no cover - the failure message is the point
        raise AssertionError(f"rootbound rejects {args}") from exc
    assert parsed.command == "serve"


def test_the_entry_point_is_the_cli() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert project["project"]["scripts"]["rootbound"] == "rootbound.cli:main"


def test_every_client_is_covered_for_stdio() -> None:
    clients = {(a["client"], a["transport"]) for _, a, _ in snippets()}
    for client in ("claude-desktop", "claude-code", "cursor", "vscode", "inspector"):
        assert (client, "stdio") in clients
    assert {c for c, t in clients if t == "http"} >= {"claude-code", "cursor", "vscode", "inspector"}


@pytest.mark.parametrize(("lang", "attrs", "body"), snippets(), ids=lambda v: v if isinstance(v, str) else None)
def test_snippet_launches_rootbound_with_valid_flags(lang: str, attrs: dict[str, str], body: str) -> None:
    if lang == "json":
        doc = json.loads(body)
        servers = doc.get("mcpServers") or doc.get("servers")
        entry = servers["rootbound"]
        if attrs["transport"] == "stdio":
            assert entry["command"] == "rootbound"
            assert_valid_rootbound_args(entry["args"])
        else:
            assert entry["url"] == "http://127.0.0.1:8091/mcp"
            assert entry["headers"]["Authorization"].startswith("Bearer ")
        return
    words = shlex.split(body)
    if attrs["transport"] == "stdio":
        command_at = len(words) - 1 - words[::-1].index("rootbound")  # the last one: `claude mcp add NAME -- CMD`
        args = words[command_at + 1:]
        if "--method" in args:  # the Inspector's own CLI flags follow the server command
            args = args[: args.index("--method")]
        assert_valid_rootbound_args(args)
    else:
        assert "http://127.0.0.1:8091/mcp" in words


def _app_with_every_tool(tmp_path: Path) -> App:
    return App(load_config(None, [f"workspace={tmp_path}"], {"allow_commands": "*"}, env={}))


def test_tools_md_is_generated_from_the_tool_definitions(tmp_path: Path) -> None:
    app = _app_with_every_tool(tmp_path)
    try:
        expected = summary.tools_markdown(app)
    finally:
        app.close()
    current = (REPO / "docs" / "tools.md").read_text()
    assert current == expected, "docs/tools.md is stale: run `make docs`"
    for name in app.tools:
        assert f"## `{name}`" in current


def test_shipped_config_schema_matches_the_models() -> None:
    shipped = json.loads((REPO / "src" / "rootbound" / "config.schema.json").read_text())
    assert shipped == config_json_schema(), "config.schema.json is stale: run `make docs`"
    for example in ("config/rootbound.yaml", "config/docker.yaml"):
        Config.model_validate(yaml.safe_load((REPO / example).read_text()))


def test_configuration_md_documents_every_key() -> None:
    page = (REPO / "docs" / "configuration.md").read_text()
    keys = [k for k in Config.model_fields if k != "source"]
    keys += [f"commands.{k}" for k in Config.model_fields["commands"].annotation.model_fields]  # type: ignore[union-attr]
    missing = [k for k in keys if f"`{k}`" not in page]
    assert missing == [], f"docs/configuration.md does not document {missing}"


def test_every_documented_error_still_exists(tmp_path: Path) -> None:
    """docs/tools.md lists each tool's errors from tools/errors.py; each must still be raised somewhere."""
    app = _app_with_every_tool(tmp_path)
    try:
        assert set(TOOL_ERRORS) == set(app.tools)
    finally:
        app.close()
    source = "".join(p.read_text() for p in (REPO / "src" / "rootbound").rglob("*.py")
                     if p.name != "errors.py" or p.parent.name != "tools")
    for message in [*COMMON_ERRORS, *(m for errors in TOOL_ERRORS.values() for m in errors)]:
        for fragment in message.split(" (")[0].split("…"):  # a trailing "(…)" explains, it is not quoted
            fragment = fragment.strip(" .;:()")
            if len(fragment) >= 6:
                assert fragment in source, f"documented error text {fragment!r} (from {message!r}) is gone"
