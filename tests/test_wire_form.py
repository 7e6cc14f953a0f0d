"""tools/call answers with the result's wire form as the call made it (`tools.base.reply`: no result model is made
per call only to be dumped again): what a client receives is exactly what the tool made, field for field.

Through the real protocol (the MCP client of conftest) beside the same calls made in process (`App.call`).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import Harness

pytestmark = pytest.mark.anyio


async def same_over_the_wire(h: Harness, tool: str, **arguments: Any) -> dict[str, Any]:
    wire = await h.call(tool, **arguments)
    made = await h.app.call(tool, arguments)
    assert wire.is_error == made.is_error
    assert [c.model_dump() for c in wire.content] == [c.model_dump() for c in made.content]
    assert wire.structured_content == made.structured_content
    got = wire.model_dump(by_alias=True, exclude_none=True, mode="json")
    # The reply's dict is the wire form key for key, but for the `_meta` the SDK stamps with the server's name.
    assert {k: v for k, v in got.items() if k != "_meta"} == await h.app.reply(tool, arguments)
    return got


async def test_a_listing_reaches_the_client_as_the_tool_made_it(server: Harness, workspace: Path) -> None:
    (workspace / "a.txt").write_text("hello")
    (workspace / "sub").mkdir()
    os.symlink("a.txt", workspace / "link")
    os.symlink("/etc/passwd", workspace / "out")
    os.close(os.open(os.fsencode(workspace) + b"/bad-\xff.txt", os.O_CREAT | os.O_WRONLY, 0o644))
    (workspace / "tab\there").write_text("")
    got = await same_over_the_wire(server, "list_folder", root="workspace", path="")
    entries = got["structuredContent"]["entries"]
    assert [e["name"] for e in entries] == ["a.txt", "bad-\\xff.txt", "link", "out", "sub", "tab\there"]
    assert [e.get("target_type") for e in entries] == [None, None, "file", "external", None, None]
    assert got["isError"] is False


async def test_other_results_and_errors_reach_the_client_as_made(server: Harness, workspace: Path) -> None:
    (workspace / "a.txt").write_text("hello\n")
    await same_over_the_wire(server, "stat_file", root="workspace", path="a.txt")
    await same_over_the_wire(server, "read_file", root="workspace", path="a.txt")
    got = await same_over_the_wire(server, "read_file", root="workspace", path="missing.txt")
    assert got["isError"] is True and "structuredContent" not in got
