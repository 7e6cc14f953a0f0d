"""The copy-paste material stays true: client snippets and generated references (containers: test_container.py)."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml

from rootbound import cli, report
from rootbound.catalogue import JOURNAL_TOOLS
from rootbound.config import Config, config_json_schema, load_config
from rootbound.errors import Kind
from rootbound.server import App
from rootbound.tools import messages
from rootbound.tools.messages import COMMON_ERRORS, ELSEWHERE, TEXTS, TOOL_ERRORS

REPO = Path(__file__).resolve().parent.parent
FENCE = re.compile(r"^```(\w+) ([^\n]*client=[^\n]*)\n(.*?)^```", re.S | re.M)


def snippets(text: str | None = None) -> list[tuple[str, dict[str, str], str]]:
    """The fenced client snippets of docs/clients.md (or of `rootbound clients` output)."""
    text = (REPO / "docs" / "clients.md").read_text() if text is None else text
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


def check_snippet(lang: str, attrs: dict[str, str], body: str, command: list[str], url: str) -> list[str] | None:
    """Assert a snippet starts `command` with flags rootbound accepts (stdio) or reaches `url` (HTTP) without a
    literal token; return the rootbound arguments of a stdio snippet."""
    if lang == "json":
        doc = json.loads(body)
        servers = doc.get("mcpServers") or doc.get("servers")
        entry = servers["rootbound"]
        if attrs["transport"] == "stdio":
            assert [entry["command"], *entry["args"][: len(command) - 1]] == command
            args = entry["args"][len(command) - 1:]
            assert_valid_rootbound_args(args)
            return list(args)
        assert entry["url"] == url
        if "headers" in entry:  # the token comes from the environment or a prompt, never a literal
            auth = entry["headers"]["Authorization"]
            assert auth in ("Bearer ${env:ROOTBOUND_AUTH_TOKEN}", "Bearer ${input:rootbound-token}"), auth
            for name in re.findall(r"\$\{input:([^}]+)\}", auth):
                prompt = next(i for i in doc["inputs"] if i["id"] == name)
                assert prompt["type"] == "promptString" and prompt["password"] is True
        return None
    words = shlex.split(body)
    if attrs["transport"] == "stdio":
        at = max(i for i in range(len(words)) if words[i: i + len(command)] == command)  # `... -- CMD ARGS`
        args = words[at + len(command):]
        if "--method" in args:  # the Inspector's own CLI flags follow the server command
            args = args[: args.index("--method")]
        assert_valid_rootbound_args(args)
        return args
    assert url in words
    if "--header" in words:
        assert words[words.index("--header") + 1] == "Authorization: Bearer $ROOTBOUND_AUTH_TOKEN"
    return None


DOCS_COMMAND = ["/home/you/.local/bin/rootbound"]  # what docs/clients.md's install routes give


@pytest.mark.parametrize(("lang", "attrs", "body"), snippets(), ids=lambda v: v if isinstance(v, str) else None)
def test_snippet_launches_rootbound_with_valid_flags(lang: str, attrs: dict[str, str], body: str) -> None:
    check_snippet(lang, attrs, body, DOCS_COMMAND, "http://127.0.0.1:8091/mcp")


def test_docs_run_npx_without_prompting() -> None:
    """`npx` asks before installing a package and aborts when nobody can answer (a client starting it)."""
    for page in (REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))):
        for line in page.read_text().splitlines():
            for match in re.finditer(r"\bnpx (\S+)", line):
                assert match.group(1) in ("-y", "--yes"), f"{page.name}: {line.strip()}"


def _clients(*args: str, module: bool = False, env: dict[str, str] | None = None, cwd: Path = REPO) -> str:
    command = [sys.executable, "-m", "rootbound"] if module else [str(Path(sys.executable).with_name("rootbound"))]
    environment = {k: v for k, v in os.environ.items() if k not in ("ROOTBOUND_AUTH_TOKEN", "ALLOWED_COMMANDS")}
    got = subprocess.run([*command, "clients", *args], capture_output=True, text=True, timeout=60,
                         env={**environment, **(env or {})}, cwd=cwd)
    assert got.returncode == 0, got.stderr
    return got.stdout


@pytest.mark.parametrize("module", [False, True], ids=["console-script", "python-m"])
def test_clients_prints_snippets_with_the_absolute_command_and_roots(tmp_path: Path, module: bool) -> None:
    (tmp_path / "proj").mkdir()
    out = _clients("--root", f"project={tmp_path / 'proj'}", "--root", str(tmp_path / "proj"), module=module)
    command = [sys.executable, "-m", "rootbound"] if module else [str(Path(sys.executable).with_name("rootbound"))]
    assert os.path.isabs(command[0])
    found = snippets(out)
    assert {a["client"] for _, a, _ in found} == {"claude-code", "claude-desktop", "cursor", "vscode"}
    for lang, attrs, body in found:
        args = check_snippet(lang, attrs, body, command, "")
        assert args == ["serve", "--root", f"project={tmp_path / 'proj'}", "--root", f"proj={tmp_path / 'proj'}"]


def test_clients_pins_the_default_root_to_an_absolute_path(tmp_path: Path) -> None:
    """Without --root, `rootbound` serves its working directory: a desktop app's is / or $HOME, so pin it."""
    out = _clients(cwd=tmp_path)
    for lang, attrs, body in snippets(out):
        assert check_snippet(lang, attrs, body, [str(Path(sys.executable).with_name("rootbound"))], "") == [
            "serve", "--root", f"workspace={tmp_path}"]


def test_clients_over_http_never_prints_the_token(tmp_path: Path) -> None:
    secret = "do-not-print-this-token-0123456789"
    out = _clients("--root", str(tmp_path), "--transport", "http", "--port", "9123",
                   env={"ROOTBOUND_AUTH_TOKEN": secret})
    assert secret not in out
    found = snippets(out)
    assert {(a["client"], a["transport"]) for _, a, _ in found} == {
        ("claude-code", "http"), ("claude-desktop", "stdio"), ("cursor", "http"), ("vscode", "http")}
    for lang, attrs, body in found:
        check_snippet(lang, attrs, body, [str(Path(sys.executable).with_name("rootbound"))],
                      "http://127.0.0.1:9123/mcp")
    vscode = next(json.loads(b) for _, a, b in found if a["client"] == "vscode")
    assert vscode["servers"]["rootbound"]["headers"]["Authorization"] == "Bearer ${input:rootbound-token}"


def _app_with_every_tool(tmp_path: Path) -> App:
    return App(load_config(None, [f"workspace={tmp_path}"], {"allow_commands": "*"}, env={}))


def test_tools_md_is_generated_from_the_tool_definitions(tmp_path: Path) -> None:
    app = _app_with_every_tool(tmp_path)
    try:
        expected = report.tools_markdown(app)
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


def test_every_tool_has_an_error_list(tmp_path: Path) -> None:
    """docs/tools.md lists each tool's errors from tools/messages.py, the table the messages are made from."""
    app = _app_with_every_tool(tmp_path)
    try:
        assert set(TOOL_ERRORS) == set(app.tools) | set(JOURNAL_TOOLS)  # listed only where a root names them
    finally:
        app.close()


def test_every_message_the_table_words_is_documented() -> None:
    """A kind no tool lists would be an error the docs never mention (or a leftover)."""
    documented = {m for errors in (COMMON_ERRORS, *TOOL_ERRORS.values()) for m in errors}
    for key in TEXTS:
        assert messages._doc(key) in documented, f"{key} is in the table but in no tool's error list"


def test_every_kind_of_failure_has_words() -> None:
    worded = {key if isinstance(key, Kind) else key[1] for key in TEXTS}
    assert set(Kind) == worded


def test_errors_worded_elsewhere_still_exist() -> None:
    """The few texts the table cannot render (the patch and edit algorithms', the search and command tools') must
    still be raised somewhere, so the page cannot promise an error that is gone."""
    source = "".join(p.read_text() for p in (REPO / "src" / "rootbound").rglob("*.py") if p.name != "messages.py")
    for message in ELSEWHERE:
        for fragment in message.split(" (")[0].split("…"):  # a trailing "(…)" explains, it is not quoted
            fragment = fragment.strip(" .;:()")
            if len(fragment) >= 6:
                assert fragment in source, f"documented error text {fragment!r} (from {message!r}) is gone"


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_make_installs_once_then_only_when_pyproject_changes(tmp_path: Path) -> None:
    """Every `make test` used to run `pip install -e` again."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    log = tmp_path / "pip.log"
    for tool in ("python", "pip"):  # stand-ins: what matters is whether make calls pip
        (venv / "bin" / tool).write_text(f"#!/bin/sh\necho {tool} \"$@\" >> {log}\n")
        (venv / "bin" / tool).chmod(0o755)

    def make_install() -> int:
        subprocess.run(["make", "-s", "-C", str(REPO), f"VENV={venv}", "install"], check=True, capture_output=True,
                       timeout=60)
        return log.read_text().count("pip install") if log.exists() else 0

    assert make_install() == 1
    assert make_install() == 1  # up to date: nothing reinstalled
    os.utime(venv / ".rootbound-installed", (0, 0))  # older than pyproject.toml, as after editing it
    assert make_install() == 2
