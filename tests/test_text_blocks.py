"""The text block of each file tool, as a model reads it (issue 15 item 1), and structuredContent unchanged beside it.

Through the real protocol: the in-memory MCP client of conftest, real files in a temp folder.
"""

from __future__ import annotations

import base64
import hashlib
import os
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import Harness, text_of

pytestmark = pytest.mark.anyio


async def shown(h: Harness, tool: str, **arguments: Any) -> tuple[str, dict[str, Any]]:
    """The text block and the structured content of a call that must succeed."""
    result = await h.call(tool, **arguments)
    assert not result.is_error, text_of(result)
    assert result.structured_content is not None and len(result.content) == 1
    return text_of(result), result.structured_content


# -- read_file ----------------------------------------------------------------------------------------------------


async def test_read_file_is_cat_n(server: Harness, workspace: Path) -> None:
    (workspace / "a.py").write_text("def f():\n    return 1\n\nprint(f())\n")
    text, data = await shown(server, "read_file", root="workspace", path="a.py")
    assert text == "     1\tdef f():\n     2\t    return 1\n     3\t\n     4\tprint(f())"
    assert data == {"path": "a.py", "content": "def f():\n    return 1\n\nprint(f())\n", "encoding": "utf-8",
                    "size": 34, "lines_total": 4, "truncated": False, "binary": False}


async def test_read_file_line_range_has_the_file_s_line_numbers(server: Harness, workspace: Path) -> None:
    (workspace / "n.txt").write_text("".join(f"line {i}\n" for i in range(1, 201)))
    text, data = await shown(server, "read_file", root="workspace", path="n.txt", offset_lines=98, limit_lines=3)
    assert text == ("    98\tline 98\n    99\tline 99\n   100\tline 100\n"
                    "[lines 98-100 of 200; read on with offset_lines=101]")
    assert data["content"] == "line 98\nline 99\nline 100\n" and data["truncated"] and data["lines_total"] == 200
    last, _ = await shown(server, "read_file", root="workspace", path="n.txt", offset_lines=200)
    assert last == "   200\tline 200"  # nothing follows: no last line
    past, _ = await shown(server, "read_file", root="workspace", path="n.txt", offset_lines=300)
    assert past == "[offset_lines 300 is past the end of the file (200 lines)]"


async def test_byte_ranges_and_line_numbers_false_give_raw_text(server: Harness, workspace: Path) -> None:
    (workspace / "r.txt").write_text("alpha\nbeta\ngamma\n")
    raw, data = await shown(server, "read_file", root="workspace", path="r.txt", line_numbers=False)
    assert raw == "alpha\nbeta\ngamma\n" == data["content"]
    part, data = await shown(server, "read_file", root="workspace", path="r.txt", offset_bytes=6, limit_bytes=4)
    assert part == "beta\n[4 bytes of 17; read on with a larger offset_bytes]"
    assert data["content"] == "beta" and data["truncated"]
    tail, _ = await shown(server, "read_file", root="workspace", path="r.txt", offset_bytes=11)
    assert tail == "gamma\n"
    lines_raw, _ = await shown(server, "read_file", root="workspace", path="r.txt", offset_lines=2, limit_lines=1,
                               line_numbers=False)
    assert lines_raw == "beta\n[lines 2-2 of 3; read on with offset_lines=3]"


async def test_binary_file_is_one_line_and_its_bytes_stay_structured(server: Harness, workspace: Path) -> None:
    png = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4
    (workspace / "logo.png").write_bytes(png)
    text, data = await shown(server, "read_file", root="workspace", path="logo.png")
    assert text.count("\n") == 0 and text.startswith("[binary file, not shown: logo.png is 1,032 bytes, PNG image")
    assert "base64" in text and "offset_bytes" in text
    assert (data["encoding"], data["binary"], base64.b64decode(data["content"])) == ("base64", True, png)
    (workspace / "blob.dat").write_bytes(b"\x00\x01\x02text")
    blob, data = await shown(server, "read_file", root="workspace", path="blob.dat")
    assert blob.startswith("[binary file, not shown: blob.dat is 7 bytes, ")  # NUL bytes: not shown as text
    assert data["content"] == "\x00\x01\x02text" and data["encoding"] == "utf-8"


async def test_text_that_is_not_all_utf8_is_shown_with_replacement_characters(server: Harness,
                                                                             workspace: Path) -> None:
    (workspace / "latin1.txt").write_bytes("café\nnaïve\n".encode("latin-1"))
    text, data = await shown(server, "read_file", root="workspace", path="latin1.txt")
    assert text.startswith("     1\tcaf\ufffd\n     2\tna\ufffdve\n[not valid UTF-8: ")
    assert (data["encoding"], base64.b64decode(data["content"])) == ("base64", "café\nnaïve\n".encode("latin-1"))
    (workspace / "utf8.txt").write_text("é€\n")  # a byte range that cuts the euro sign in two
    part, data = await shown(server, "read_file", root="workspace", path="utf8.txt", offset_bytes=0, limit_bytes=4)
    assert part.startswith("é\ufffd\n[not valid UTF-8: ") and part.endswith("; 4 bytes of 6; read on with a larger "
                                                                           "offset_bytes]")
    assert base64.b64decode(data["content"]) == "é€".encode()[:4]


# -- list_folder --------------------------------------------------------------------------------------------------


async def test_list_folder_lines_and_the_rest(server: Harness, workspace: Path) -> None:
    (workspace / "src").mkdir()
    (workspace / "a.txt").write_text("hello")
    (workspace / "b.bin").write_bytes(b"x" * 12_345)
    (workspace / "to-src").symlink_to("src")
    os.utime(workspace / "a.txt", (1_700_000_000, 1_700_000_000))
    text, data = await shown(server, "list_folder", root="workspace", path="", limit=3)
    lines = text.splitlines()
    assert lines[0] == "-     5 2023-11-14 22:13:20 a.txt"
    assert lines[1].startswith("- 12345 ") and lines[1].endswith(" b.bin")
    assert lines[2].startswith("d ") and lines[2].endswith(" src/")
    assert lines[3] == "[3 of 4 entries shown; the rest: offset=3]"
    assert [e["name"] for e in data["entries"]] == ["a.txt", "b.bin", "src"]
    assert data["entries"][0] == {"name": "a.txt", "type": "file", "size": 5, "modified_at": "2023-11-14T22:13:20Z"}
    assert (data["count"], data["total"], data["truncated"]) == (3, 4, True)
    rest, _ = await shown(server, "list_folder", root="workspace", path="", offset=3)
    assert rest.startswith("l ") and rest.endswith(" to-src (link to a directory)") and "\n" not in rest


async def test_list_folder_defaults_to_1000_and_says_how_to_read_on(server: Harness, workspace: Path) -> None:
    (workspace / "many").mkdir()
    for i in range(1005):
        (workspace / "many" / f"f{i:04d}").touch()
    text, data = await shown(server, "list_folder", root="workspace", path="many")
    assert data["count"] == 1000 and data["truncated"]
    assert text.splitlines()[-1] == "[1,000 of 1,005 entries shown; the rest: offset=1000]"
    assert len(text.splitlines()) == 1001


async def test_list_folder_names_cannot_forge_lines(server: Harness, workspace: Path) -> None:
    (workspace / "evil\n- 1 2026-01-01 00:00:00 fake").touch()
    (workspace / "empty").mkdir()
    text, data = await shown(server, "list_folder", root="workspace", path="")
    assert len(text.splitlines()) == 2 and "evil\\n- 1" in text
    assert data["entries"][1]["name"] == "evil\n- 1 2026-01-01 00:00:00 fake"
    empty, _ = await shown(server, "list_folder", root="workspace", path="empty")
    assert empty == "[empty folder]"


async def test_large_lists_declare_their_items_loosely(server: Harness) -> None:
    """The client validates each result against the outputSchema: 10,000 fully described entries cost it a
    second, an array whose items are not described microseconds."""
    tools = {t.name: t for t in (await server.client.list_tools()).tools}
    for tool, field in (("list_folder", "entries"), ("glob", "matches"), ("grep", "matches")):
        schema = tools[tool].output_schema
        assert schema is not None
        assert schema["properties"][field]["type"] == "array" and "items" not in schema["properties"][field], tool
    assert "line_numbers" in tools["read_file"].input_schema["properties"]


# -- grep and glob ------------------------------------------------------------------------------------------------


async def test_grep_heading_with_merged_context(server: Harness, workspace: Path) -> None:
    (workspace / "a.py").write_text("".join(f"l{i}\n" for i in range(1, 21)).replace("l5\n", "hit5\n")
                                    .replace("l7\n", "hit7\n").replace("l15\n", "hit15\n"))
    (workspace / "b.py").write_text("hit1\nx\n")
    text, data = await shown(server, "grep", root="workspace", pattern="hit", context_lines=2)
    assert text == ("a.py\n3-l3\n4-l4\n5:hit5\n6-l6\n7:hit7\n8-l8\n9-l9\n--\n13-l13\n14-l14\n15:hit15\n16-l16\n17-l17"
                    "\n\nb.py\n1:hit1\n2-x")
    # Structured matches keep their fields; each has its own context, as before.
    assert data["matches"][0] == {"file": "a.py", "line_number": 5, "line_content": "hit5",
                                  "context_before": ["l3", "l4"], "context_after": ["l6", "hit7"]}
    assert data["matches"][3] == {"file": "b.py", "line_number": 1, "line_content": "hit1", "context_after": ["x"]}


async def test_grep_without_context_and_truncated(server: Harness, workspace: Path) -> None:
    (workspace / "s.txt").write_text("needle 1\nhay\nneedle 3\nneedle 4\n")
    text, data = await shown(server, "grep", root="workspace", pattern="needle", max_results=2)
    assert text == ("s.txt\n1:needle 1\n3:needle 3\n[stopped at max_results=2; more matches exist: narrow path, "
                    "pattern or glob_filter, or raise max_results]")
    assert data["matches"] == [{"file": "s.txt", "line_number": 1, "line_content": "needle 1"},
                               {"file": "s.txt", "line_number": 3, "line_content": "needle 3"}]
    none, _ = await shown(server, "grep", root="workspace", pattern="absent")
    assert none == "no matches"


async def test_grep_text_is_no_bigger_than_rg_n(server: Harness, workspace: Path) -> None:
    """Item 8's payload target, for the output format itself: at most 1.3x what `rg -n` prints for the same
    matches (path:line:content per line)."""
    for d in range(10):
        (workspace / f"pkg{d}").mkdir()
        (workspace / f"pkg{d}" / "module.py").write_text(
            "".join(f"    value_{i} = compute(value_{i - 1})  # step {i}\n" for i in range(60)))
    text, data = await shown(server, "grep", root="workspace", pattern="compute", max_results=1000)
    rg_n = "".join(f"{m['file']}:{m['line_number']}:{m['line_content']}\n" for m in data["matches"])
    assert len(data["matches"]) == 600
    assert len(text.encode()) <= len(rg_n.encode())  # the heading form is shorter still


async def test_glob_one_path_per_line(server: Harness, workspace: Path) -> None:
    (workspace / "src" / "deep").mkdir(parents=True)
    for name in ("src/a.py", "src/deep/b.py", "top.py"):
        (workspace / name).write_text("x")
    text, data = await shown(server, "glob", root="workspace", pattern="**")
    assert text == "src/\nsrc/a.py\nsrc/deep/\nsrc/deep/b.py\ntop.py"
    assert [m["path"] for m in data["matches"]] == ["src", "src/a.py", "src/deep", "src/deep/b.py", "top.py"]
    cut, data = await shown(server, "glob", root="workspace", pattern="**/*.py", max_results=2)
    assert cut.splitlines()[-1].startswith("[stopped at max_results=2; more paths match")
    assert len(cut.splitlines()) == 3 and data["truncated"]
    none, _ = await shown(server, "glob", root="workspace", pattern="*.rs")
    assert none == "no matches"
    # A newline in one name is escaped, in that path only: it must not start a line of its own.
    (workspace / "evil\n- x.py").write_text("x")
    named, _ = await shown(server, "glob", root="workspace", pattern="*.py")
    assert named == "evil\\n- x.py\ntop.py"


# -- the other tools: a sentence ----------------------------------------------------------------------------------


async def test_changes_are_one_sentence(server: Harness, workspace: Path) -> None:
    digest = hashlib.sha256(b"hello\n").hexdigest()
    text, data = await shown(server, "write_file", root="workspace", path="src/x.py", content="hello\n")
    assert text == f"created src/x.py: wrote 6 bytes (sha256 {digest})"
    assert data == {"path": "src/x.py", "size": 6, "mode": "overwrite", "created": True, "sha256": digest}
    text, _ = await shown(server, "write_file", root="workspace", path="src/x.py", content="more\n", mode="append")
    assert text == "appended 5 bytes to src/x.py"
    text, data = await shown(server, "patch_file", root="workspace", path="src/x.py",
                             patch="@@ -2 +2 @@\n-more\n+less\n")
    assert text == f"patched src/x.py: 1 hunk applied (#1 at line 2); now 11 bytes (sha256 {data['sha256']})"
    text, _ = await shown(server, "hash_file", root="workspace", path="src/x.py", algorithm="md5")
    md5 = hashlib.md5(b"hello\nless\n").hexdigest()
    assert text == f"md5 of src/x.py (11 bytes): {md5}"
    text, _ = await shown(server, "copy", source_root="workspace", source_path="src", dest_root="workspace",
                          dest_path="copy")
    assert text == "copied folder src to copy (11 bytes in 1 file)"
    text, _ = await shown(server, "move", source_root="workspace", source_path="copy/x.py", dest_root="workspace",
                          dest_path="y.py")
    assert text == "moved copy/x.py to y.py (renamed)"
    assert (await shown(server, "create_folder", root="workspace", path="copy"))[0] == "folder copy already exists"
    assert (await shown(server, "create_folder", root="workspace", path="new/dir"))[0] == "created folder new/dir"
    assert (await shown(server, "remove_file", root="workspace", path="y.py"))[0] == "removed y.py"
    text, _ = await shown(server, "remove_folder", root="workspace", path="src")
    assert text == "removed folder src and the 1 entry in it"
    text, _ = await shown(server, "permissions_file", root="workspace", path="new")
    assert text.startswith("new: drwx") and ", owner " in text and "\n" not in text
    os.utime(workspace / "new", (1_700_000_000, 1_700_000_000))
    text, _ = await shown(server, "stat_file", root="workspace", path="new")
    assert text.startswith("new: directory, ") and "modified 2023-11-14T22:13:20Z" in text
    text, _ = await shown(server, "list_roots")
    assert text.splitlines()[1].startswith("workspace: list_folder, read_file, ")
