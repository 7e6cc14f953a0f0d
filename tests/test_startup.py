"""Start-up loads only what answering `initialize` needs: the parts of a tool are loaded by its first call.

The real process over stdio, with `python -X importtime` (which names every module as it is imported, on
stderr): after its `initialize` result, none of the heavy modules that serve only some calls may have been
imported. Timing is measured in bench/peers.py (cold start), never here. uvicorn and starlette are not listed:
the MCP SDK's own `mcp.server` package imports them whatever the transport.
"""

from __future__ import annotations

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
}

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


@pytest.mark.parametrize("commands", [False, True], ids=["files", "commands"])
def test_start_imports_no_heavy_module(tmp_path: Path, commands: bool) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    config: dict[str, object] = {"roots": [{"name": "ws", "path": str(ws)}], "journal": False}
    if commands:  # commands allowed: the launcher is chosen at start, the script checker still waits for a script
        config["commands"] = {"allowed": ["echo"], "sandbox": "off"}
    imported = imported_until_initialized(config, tmp_path)
    assert "mcp.server" in imported  # the check sees the imports at all
    loaded = {name: why for name, why in HEAVY.items() if name in imported}
    assert not loaded, f"imported at start, though only needed by: {loaded}"
