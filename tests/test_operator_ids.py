"""Who did what: named bearer tokens limited to their own roots, and log lines that say which connection,
client and token made each call (issue 13 item 12).

The HTTP tests run the real `rootbound serve --transport http` process (tests/test_http.py's helpers), the
stdio one the real process over its pipes (tests/live.py).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.live import call, raw_stdio

pytestmark = pytest.mark.anyio

async def test_stdio_log_lines_carry_connection_and_client(tmp_path: Path) -> None:
    (tmp_path / "ws").mkdir()
    seen = []
    for era in ("handshake", "2026-07-28"):
        with raw_stdio(["--root", f"ws={tmp_path / 'ws'}"], tmp_path / f"{era}.log") as server:
            if era == "handshake":
                server.initialize()
            for id in (1, 2):
                server.send(call("list_roots", {}, id, modern=era != "handshake"))
                assert "result" in server.answer(id)
            lines = [json.loads(line) for line in server.stderr().splitlines() if '"tool call"' in line]
            # One connection per process: the stdio client is the process's only one.
            assert [(c["connection"], c["client"]) for c in lines] == [(f"stdio:{server.proc.pid}", "raw/0")] * 2
            assert all("token" not in c for c in lines)
            seen.append(lines[0]["connection"])
    assert seen[0] != seen[1]
