"""The server answers over the real protocol in both eras."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import MakeServer

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_read_over_both_protocol_eras(make_server: MakeServer, workspace: Path, mode: str) -> None:
    (workspace / "hello.txt").write_text("Hello World\n")
    h = await make_server(mode=mode)
    got = await h.ok("read_file", root="workspace", path="hello.txt")
    assert got["content"] == "Hello World\n"
    assert got["size"] == 12
