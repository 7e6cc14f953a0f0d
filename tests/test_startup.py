"""Start-up loads only what answering `initialize` needs: the parts of a tool are loaded by its first call.

The real process over stdio, with `python -X importtime` (which names every module as it is imported, on
stderr): after its `initialize` result, none of the heavy modules that serve only some calls may have been
imported. Timing is measured in bench/peers.py (cold start), never here. uvicorn and starlette are not listed:
the MCP SDK's own `mcp.server` package imports them whatever the transport.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.test_transports import clean_env

# module → what loads it when it is needed
HEAVY = {
    "tree_sitter": "the first shell script checked",
    "tree_sitter_bash": "the first shell script checked",
    "re2": "the first grep or glob",
    "wcmatch": "the first glob or glob_filter",
    "bracex": "the first glob or glob_filter",
    "sqlite3": "the journal",
    "yaml": "a YAML configuration file (this one is JSON)",
    "rootbound.report": "rootbound check / tools",
    "rootbound.server.http": "--transport http",
    # the tools' handlers and their pydantic argument and result models
    **{f"rootbound.tools.{family}": "the first tools/list or tools/call"
       for family in ("base", "reading", "writing", "editing", "transfer", "search", "history", "commands")},
    "rootbound.grep.helper": "the first call",
    # the commands' launcher, queue and process groups; choosing the launcher runs bubblewrap
    "rootbound.execution.service": "the first call (commands allowed)",
    "rootbound.sandbox.select": "the first call (commands allowed)",
    "rootbound.sandbox.bwrap": "the first call (commands allowed)",
}
JOURNAL = {"sqlite3"}  # the journal settles what killed writers left before initialize is answered

INITIALIZE = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
              "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                         "clientInfo": {"name": "test", "version": "1"}}}


def imported_until_initialized(config: dict[str, object], tmp_path: Path) -> set[str]:
    """Start the server, wait for its `initialize` result, stop it: the modules it had imported by then."""
    config_file = tmp_path / "rootbound.json"
    config_file.write_text(json.dumps(config))
    err = tmp_path / "stderr.log"
    with err.open("wb") as stderr:
        proc = subprocess.Popen([sys.executable, "-X", "importtime", "-m", "rootbound", "serve", "--config",
                                 str(config_file)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr,
                                cwd=tmp_path, env=clean_env())
        assert proc.stdin is not None and proc.stdout is not None
        try:
            proc.stdin.write(json.dumps(INITIALIZE).encode() + b"\n")
            proc.stdin.flush()
            reply = json.loads(proc.stdout.readline())
        finally:
            proc.kill()  # right after the answer: what a later call or the shutdown loads does not count
            proc.wait()
    assert reply["result"]["serverInfo"]["name"] == "rootbound", reply
    return {line.split("|")[-1].strip() for line in err.read_text().splitlines() if line.startswith("import time:")}


CONFIGS: dict[str, dict[str, object]] = {
    "files": {"journal": False},
    "commands": {"journal": False, "commands": {"allowed": ["echo"], "sandbox": "off"}},
    # the defaults, as bench/peers.py serves it: the journal on, the default sandbox (bubblewrap where it works)
    "defaults": {"commands": {"allowed": ["echo"]}},
}


@pytest.mark.parametrize("name", CONFIGS)
def test_start_imports_no_heavy_module(tmp_path: Path, name: str) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    config: dict[str, object] = {"roots": [{"name": "ws", "path": str(ws)}], **CONFIGS[name]}
    imported = imported_until_initialized(config, tmp_path)
    assert "mcp.server" in imported  # the check sees the imports at all
    heavy = HEAVY if config.get("journal") is False else {k: v for k, v in HEAVY.items() if k not in JOURNAL}
    loaded = {module: why for module, why in heavy.items() if module in imported}
    assert not loaded, f"imported at start, though only needed by: {loaded}"


def test_what_start_up_left_for_later_is_there_for_the_first_call(tmp_path: Path) -> None:
    """The first request after initialize may be any tools/call (no tools/list first): the tools, the journal and
    the commands' sandbox are ready for it, and the sandbox chosen is logged then."""
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "a.txt").write_text("hello\n")
    config_file = tmp_path / "rootbound.json"
    config_file.write_text(json.dumps({"roots": [{"name": "ws", "path": str(ws)}],
                                       "commands": {"allowed": ["echo"]}}))
    calls = [("execute_command", {"command": "echo hi", "root": "ws"}),
             ("write_file", {"root": "ws", "path": "b.txt", "content": "new\n"}),
             ("read_file", {"root": "ws", "path": "a.txt"})]
    requests = [INITIALIZE, {"jsonrpc": "2.0", "method": "notifications/initialized"}] + [
        {"jsonrpc": "2.0", "id": n, "method": "tools/call", "params": {"name": tool, "arguments": args}}
        for n, (tool, args) in enumerate(calls, start=2)]
    err = tmp_path / "stderr.log"
    with err.open("wb") as stderr:
        proc = subprocess.Popen([sys.executable, "-m", "rootbound", "serve", "--config", str(config_file)],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr, cwd=tmp_path,
                                env=clean_env())
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write("".join(json.dumps(r) + "\n" for r in requests).encode())
        proc.stdin.flush()
        replies = {}
        while len(replies) < len(requests) - 1:  # end of input would stop the server before it answers
            reply = json.loads(proc.stdout.readline())
            replies[reply["id"]] = reply
        proc.stdin.close()
        assert proc.wait(60) == 0
    results = [replies[n]["result"] for n in range(2, 2 + len(calls))]
    assert [r["isError"] for r in results] == [False] * len(calls), results
    assert results[0]["structuredContent"]["stdout"] == "hi\n"
    assert (ws / "b.txt").read_text() == "new\n"
    assert results[2]["structuredContent"]["content"] == "hello\n"
    logs = [json.loads(line) for line in err.read_text().splitlines() if line.startswith("{")]
    [ready] = [line for line in logs if line["msg"] == "commands ready"]
    assert ready["commands"].startswith("commands sandbox: ")
    rootbound = subprocess.run([sys.executable, "-m", "rootbound", "history", "--config", str(config_file)],
                               capture_output=True, text=True, cwd=tmp_path, env=clean_env(), timeout=60)
    assert "b.txt" in rootbound.stdout, rootbound.stdout + rootbound.stderr  # the write was journaled


GC_PROBE = """
import gc, sys
from rootbound import cli
from rootbound.server import app, lifecycle

states = {}
built = app.App.__init__
def build(self, *args, **kwargs):
    states["start-up"] = gc.isenabled()
    built(self, *args, **kwargs)
app.App.__init__ = build
serve = lifecycle.serve_stdio_until_signal
async def serving(served):
    states["serving"] = gc.isenabled()
    return await serve(served)
lifecycle.serve_stdio_until_signal = serving
states["exit status"] = cli.main(sys.argv[1:])
states["after"] = gc.isenabled()
print(states, file=sys.stderr)
"""


@pytest.mark.parametrize("good", [True, False], ids=["served", "bad-config"])
def test_start_up_runs_without_garbage_collection_and_serving_with_it(tmp_path: Path, good: bool) -> None:
    """Start-up makes long-lived objects, not garbage: it runs without collections (~5% of it). Serving must
    collect again, or every reference cycle a call makes would stay; and so must a start that failed."""
    config = tmp_path / "rootbound.json"
    config.write_text(json.dumps({"roots": [{"name": "ws", "path": str(tmp_path if good else tmp_path / "no")}]}))
    done = subprocess.run([sys.executable, "-c", GC_PROBE, "serve", "--config", str(config)], stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, cwd=tmp_path, env=clean_env(), timeout=60)
    states = ast.literal_eval(done.stderr.strip().splitlines()[-1])  # the dict printed last
    if good:
        assert states == {"start-up": False, "serving": True, "exit status": 0, "after": True}, done.stderr
    else:
        assert states == {"exit status": 1, "after": True}, done.stderr
