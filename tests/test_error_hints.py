"""Errors that name the fix (issue 15 item 6, file side): each says what was wrong and the next valid move."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import Harness, MakeServer

pytestmark = pytest.mark.anyio

RE2 = "the syntax is RE2 (no lookaround, no backreferences)"


async def test_an_unknown_root_lists_the_valid_ones(make_server: MakeServer, tmp_path: Path) -> None:
    h = await make_server({"ws": tmp_path / "ws", "logs": tmp_path / "logs"})
    assert await h.err("read_file", root="workspace", path="a") == "unknown root: workspace; roots: ws, logs"
    message = await h.err("copy", source_path="a", dest_root="nope", dest_path="b")
    assert message == "unknown root: nope; roots: ws, logs"


async def test_a_directory_given_to_read_file_points_at_list_folder(server: Harness, workspace: Path) -> None:
    (workspace / "src").mkdir()
    assert await server.err("read_file", path="src") == (
        "path is a directory, not a file: src; use list_folder to see what it holds")
    assert "use list_folder" in await server.err("hash_file", path="src")
    # Writing onto a directory keeps its own words (list_folder is no help there).
    assert "list_folder" not in await server.err("write_file", path="src", content="x")


async def test_a_bad_regex_names_re2_and_the_escaped_form_without_the_internal_prefix(server: Harness,
                                                                                      workspace: Path) -> None:
    (workspace / "stats.py").write_text("def median(values):\n")
    message = await server.err("grep", pattern="def median(")
    assert message == f"invalid pattern: missing ): def median(; {RE2}; to search for the text itself: def median\\("
    assert "(?m)" not in message
    # The escaped form it offers works.
    assert (await server.ok("grep", pattern="def median\\("))["total_matches"] == 1
    lookbehind = await server.err("grep", pattern="(?<=def )median")
    assert lookbehind.startswith("invalid pattern: invalid perl operator: (?<") and RE2 in lookbehind
    backreference = await server.err("grep", pattern="(a)\\1")
    assert backreference.startswith("invalid pattern: invalid escape sequence: \\1") and RE2 in backreference
    # glob's regex too; a glob pattern is not a regex and says nothing of RE2.
    assert RE2 in await server.err("glob", regex="(?=x)")
    assert RE2 not in await server.err("glob", pattern="a" * 10_001)


async def test_an_unknown_parameter_suggests_the_nearest_valid_one(server: Harness, workspace: Path) -> None:
    (workspace / "a.txt").write_text("a\n")
    assert await server.err("read_file", path="a.txt", start_line=2) == (
        "invalid arguments for read_file: unknown parameter 'start_line' (did you mean offset_lines or limit_lines?)")
    message = await server.err("read_file", path="a.txt", offset=2)
    assert "unknown parameter 'offset' (did you mean offset_lines or offset_bytes?)" in message
    assert "(did you mean path?)" in await server.err("stat_file", file_path="a.txt")
    # Nothing near: the valid names.
    assert "unknown parameter 'zzz' (parameters: root, path, algorithm)" in await server.err(
        "hash_file", path="a.txt", zzz=1)
