"""edit_file over the real protocol: exact replacement, refusals that say what to send next, and the same guard
rails as write_file (allowlist, protected paths, symlinks, expected_sha256, atomic replacement)."""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path

import pytest

from tests.conftest import Harness, MakeServer, text_of

pytestmark = pytest.mark.anyio

STATS = (
    "def mean(values):\n"
    "    return sum(values) / len(values)\n"
    "\n"
    "\n"
    "def median(values):\n"
    "    ordered = sorted(values)\n"
    "    n = len(ordered)\n"
    "    if n % 2:\n"
    "        return ordered[n // 2]\n"
    "    return (ordered[n // 2 - 1] + ordered[n // 2]) / 2\n"
)


async def edit(server: Harness, path: str, old: str, new: str, **more: object) -> dict[str, object]:
    return await server.ok("edit_file", root="workspace", path=path, old_string=old, new_string=new, **more)


async def edit_err(server: Harness, path: str, old: str, new: str, **more: object) -> str:
    return await server.err("edit_file", root="workspace", path=path, old_string=old, new_string=new, **more)


def copied_from(message: str) -> str:
    """What a model does with a not-found error: copy the shown lines, without their numbers."""
    return "\n".join(re.sub(r"^ *\d+\t", "", ln) for ln in message.splitlines() if re.match(r"^ *\d+\t", ln))


# -- replacing --------------------------------------------------------------------------------------------


async def test_replaces_unique_text_and_shows_the_changed_lines_numbered(server: Harness, workspace: Path) -> None:
    (workspace / "stats.py").write_text(STATS)
    result = await server.call("edit_file", root="workspace", path="stats.py",
                               old_string="    n = len(ordered)\n", new_string="    n = len(ordered)\n    assert n\n")
    assert not result.is_error, text_of(result)
    got = result.structured_content
    new = STATS.replace("    n = len(ordered)\n", "    n = len(ordered)\n    assert n\n")
    assert (workspace / "stats.py").read_text() == new
    assert got == {"path": "stats.py", "replacements": 1, "first_changed_line": 8, "size": len(new),
                   "created": False, "sha256": hashlib.sha256(new.encode()).hexdigest()}
    text = text_of(result)
    assert text.startswith("Edited stats.py: 1 replacement, first changed line 8.\n")
    # cat -n style: right-aligned number, a tab, the line; three lines of context either side.
    assert "     8\t    assert n\n" in text and "     5\tdef median(values):" in text
    assert "    11\t    return (ordered" in text and "     4\t" not in text
    digest = await server.ok("hash_file", root="workspace", path="stats.py", algorithm="sha256")
    assert digest["hash"] == got["sha256"]


async def test_crlf_file_matched_with_lf_text_keeps_crlf(server: Harness, workspace: Path) -> None:
    (workspace / "w.ps1").write_bytes(b"one\r\ntwo\r\nthree\r\n")
    got = await edit(server, "w.ps1", "two\nthree", "TWO\n2.5\nthree")
    assert (workspace / "w.ps1").read_bytes() == b"one\r\nTWO\r\n2.5\r\nthree\r\n"
    assert got["first_changed_line"] == 2


async def test_mixed_line_endings_outside_the_edit_are_kept(server: Harness, workspace: Path) -> None:
    (workspace / "m.txt").write_bytes(b"a\r\nb\nc\r\nd\r\n")
    await edit(server, "m.txt", "b\nc\n", "B\nC\n")  # matches "b\nc\r\n"; most lines are CRLF
    assert (workspace / "m.txt").read_bytes() == b"a\r\nB\r\nC\r\nd\r\n"
    await edit(server, "m.txt", "a", "A")
    assert (workspace / "m.txt").read_bytes() == b"A\r\nB\r\nC\r\nd\r\n"


async def test_lf_file_given_crlf_text_stays_lf(server: Harness, workspace: Path) -> None:
    (workspace / "a.txt").write_bytes(b"one\ntwo\nthree\n")
    await edit(server, "a.txt", "one\r\ntwo\r\n", "one\r\n2\r\n")
    assert (workspace / "a.txt").read_bytes() == b"one\n2\nthree\n"


async def test_end_of_file_without_newline_and_unicode(server: Harness, workspace: Path) -> None:
    (workspace / "g.txt").write_bytes("grüße\nnaïve café".encode())
    await edit(server, "g.txt", "naïve café", "naïve café ☕")
    assert (workspace / "g.txt").read_bytes() == "grüße\nnaïve café ☕".encode()


async def test_replace_all_and_the_count(server: Harness, workspace: Path) -> None:
    (workspace / "stats.py").write_text(STATS)
    got = await edit(server, "stats.py", "ordered", "xs", replace_all=True)
    assert got["replacements"] == 5 and got["first_changed_line"] == 6
    assert "ordered" not in (workspace / "stats.py").read_text()


async def test_several_matches_are_refused_with_each_line(server: Harness, workspace: Path) -> None:
    code = "def a(x):\n    if x is None:\n        return 0\n    return x\n\n\ndef b(x):\n    if x is None:\n" \
           "        return 0\n    return -x\n"
    (workspace / "f.py").write_text(code)
    block = "    if x is None:\n        return 0\n"
    msg = await edit_err(server, "f.py", block, block.replace("0", "1"))
    assert msg.startswith("old_string matches 2 places in f.py, at lines 2, 8; nothing was changed.")
    assert "replace_all" in msg and "neighbouring lines" in msg
    assert (workspace / "f.py").read_text() == code
    await edit(server, "f.py", "def b(x):\n    if x is None:\n        return 0\n",
               "def b(x):\n    if x is None:\n        return 1\n")
    assert (workspace / "f.py").read_text() == code.replace("return 0\n    return -x", "return 1\n    return -x")


# -- not found: the error shows where and what differs, and the next attempt succeeds ----------------------


@pytest.mark.parametrize(("old", "words"), [
    ("    ordered = sorted(values)\n    n = len(ordered)\n", "indentation differs: the file has 1 tab, old_string "
                                                              "has 4 spaces (tabs vs spaces)"),
    ("        ordered = sorted(values)\n        n = len(ordered)\n", "indentation differs: the file has 1 tab, "
                                                                      "old_string has 8 spaces"),
    ("\tordered = sorted(values)\n\tn = len(ordered)  \n", "trailing whitespace differs: the file's line ends with "
                                                           "none, old_string's with 2 spaces"),
    ("\tordered = sorted(vals)\n\tn = len(ordered)\n", "different text: the file has 'values' where old_string has "
                                                       "'vals'"),
])
async def test_not_found_shows_the_closest_lines_and_what_differs(server: Harness, workspace: Path, old: str,
                                                                  words: str) -> None:
    code = STATS.replace("    ", "\t")
    (workspace / "tabs.py").write_text(code)
    msg = await edit_err(server, "tabs.py", old, "\tpass\n")
    assert msg.startswith("old_string was not found in tabs.py; nothing was changed. The closest text is at lines 6-7")
    assert words in msg, msg
    assert "- line 6: " in msg or "- line 7: " in msg
    assert "     6\t\tordered = sorted(values)\n     7\t\tn = len(ordered)" in msg
    assert (workspace / "tabs.py").read_text() == code
    # The model copies the lines shown, and the retry applies.
    await edit(server, "tabs.py", copied_from(msg) + "\n", "\tpass\n")
    assert (workspace / "tabs.py").read_text() == code.replace("\tordered = sorted(values)\n\tn = len(ordered)\n",
                                                               "\tpass\n")


async def test_not_found_never_applies_a_near_match(server: Harness, workspace: Path) -> None:
    """The reference server re-indents drifted text and writes it; here drift is refused, the file untouched."""
    (workspace / "stats.py").write_text(STATS)
    msg = await edit_err(server, "stats.py", "ordered = sorted(values)\nn = len(ordered)", "x = 1\ny = 2")
    assert "lines 6-7" in msg and "indentation differs: the file has 4 spaces, old_string has none" in msg
    assert (workspace / "stats.py").read_text() == STATS


async def test_an_omitted_line_is_named(server: Harness, workspace: Path) -> None:
    (workspace / "stats.py").write_text(STATS)
    msg = await edit_err(server, "stats.py", "    ordered = sorted(values)\n    if n % 2:\n", "")
    assert "- line 7: the file has this line, old_string lacks it: '    n = len(ordered)'" in msg


async def test_line_numbers_copied_from_read_file_are_pointed_out(server: Harness, workspace: Path) -> None:
    (workspace / "stats.py").write_text(STATS)
    msg = await edit_err(server, "stats.py", "     6\t    ordered = sorted(values)\n     7\t    n = len(ordered)\n",
                         "")
    assert "line numbers" in msg and "leave them out" in msg


async def test_nothing_alike_says_to_read_the_file_again(server: Harness, workspace: Path) -> None:
    (workspace / "stats.py").write_text(STATS)
    msg = await edit_err(server, "stats.py", "zzz qqq", "y")
    assert msg.startswith("old_string was not found in stats.py, and no line of the file resembles it")


# -- several edits ------------------------------------------------------------------------------------------


async def test_edits_apply_in_order(server: Harness, workspace: Path) -> None:
    (workspace / "stats.py").write_text(STATS)
    got = await server.ok("edit_file", root="workspace", path="stats.py", edits=[
        {"old_string": "def mean(values):", "new_string": "def average(values):"},
        {"old_string": "average", "new_string": "arithmetic_mean"},  # sees the first edit's result
        {"old_string": "ordered", "new_string": "xs", "replace_all": True},
    ])
    text = (workspace / "stats.py").read_text()
    assert text.startswith("def arithmetic_mean(values):") and "ordered" not in text
    assert got["replacements"] == 7 and got["first_changed_line"] == 1


async def test_edits_are_all_or_nothing(server: Harness, workspace: Path) -> None:
    (workspace / "stats.py").write_text(STATS)
    before = (workspace / "stats.py").stat()
    msg = await server.err("edit_file", root="workspace", path="stats.py", edits=[
        {"old_string": "def mean", "new_string": "def average"},
        {"old_string": "no such text", "new_string": "x"},
    ])
    assert msg.startswith("edit 2 of 2: old_string was not found in stats.py (after the edits before this one)")
    assert (workspace / "stats.py").read_text() == STATS
    assert (workspace / "stats.py").stat().st_ino == before.st_ino  # not even rewritten


@pytest.mark.parametrize(("arguments", "words"), [
    ({"old_string": "a", "new_string": "b", "edits": [{"old_string": "a", "new_string": "b"}]}, "not both"),
    ({}, "old_string is required"),
    ({"old_string": "a"}, "new_string is required"),
    ({"edits": []}, "edits is empty"),
    ({"old_string": "mean", "new_string": "mean"}, "old_string and new_string are the same"),
    ({"edits": [{"old_string": "a"}]}, "edits.0.new_string is required"),
])
async def test_malformed_calls_change_nothing(server: Harness, workspace: Path, arguments: dict[str, object],
                                              words: str) -> None:
    (workspace / "stats.py").write_text(STATS)
    msg = await server.err("edit_file", root="workspace", path="stats.py", **arguments)
    assert words in msg
    assert (workspace / "stats.py").read_text() == STATS


# -- creating -------------------------------------------------------------------------------------------------


async def test_empty_old_string_creates_a_missing_file_and_its_folders(server: Harness, workspace: Path) -> None:
    result = await server.call("edit_file", root="workspace", path="pkg/new/mod.py", old_string="",
                               new_string="X = 1\n")
    assert not result.is_error and result.structured_content is not None
    assert result.structured_content["created"] is True
    assert text_of(result).startswith("Created pkg/new/mod.py (6 bytes).")
    assert (workspace / "pkg/new/mod.py").read_text() == "X = 1\n"
    assert (workspace / "pkg/new/mod.py").stat().st_mode & 0o777 == 0o644


async def test_empty_old_string_fills_an_empty_file_but_not_a_full_one(server: Harness, workspace: Path) -> None:
    (workspace / "empty.txt").write_text("")
    got = await edit(server, "empty.txt", "", "now\n")
    assert got["created"] is False and (workspace / "empty.txt").read_text() == "now\n"
    msg = await edit_err(server, "empty.txt", "", "again\n")
    assert "old_string is empty, but empty.txt is not empty" in msg
    assert (workspace / "empty.txt").read_text() == "now\n"


async def test_missing_file_with_old_text(server: Harness, workspace: Path) -> None:
    msg = await edit_err(server, "nope/missing.py", "x", "y")
    assert msg.startswith("file not found: nope/missing.py")
    assert not (workspace / "nope").exists()


async def test_binary_file_is_refused(server: Harness, workspace: Path) -> None:
    (workspace / "b.bin").write_bytes(b"\xff\xfe\x00abc")
    assert "not UTF-8 text" in await edit_err(server, "b.bin", "abc", "xyz")
    assert (workspace / "b.bin").read_bytes() == b"\xff\xfe\x00abc"


# -- guard rails, as write_file -----------------------------------------------------------------------------


async def test_expected_sha256(server: Harness, workspace: Path) -> None:
    (workspace / "f.txt").write_text("a\n")
    msg = await edit_err(server, "f.txt", "a", "b", expected_sha256="0" * 64)
    assert msg.startswith("file changed since you last read it: f.txt has sha256 "
                          + hashlib.sha256(b"a\n").hexdigest())
    assert (workspace / "f.txt").read_text() == "a\n"
    got = await edit(server, "f.txt", "a", "b", expected_sha256=hashlib.sha256(b"a\n").hexdigest())
    await edit(server, "f.txt", "b", "c", expected_sha256=str(got["sha256"]))
    assert (workspace / "f.txt").read_text() == "c\n"
    assert "does not exist" in await edit_err(server, "g.txt", "", "x", expected_sha256="0" * 64)


async def test_keeps_mode_and_refuses_directories_and_the_root(server: Harness, workspace: Path) -> None:
    (workspace / "run.sh").write_text("echo a\n")
    (workspace / "run.sh").chmod(0o755)
    await edit(server, "run.sh", "echo a", "echo b")
    assert (workspace / "run.sh").stat().st_mode & 0o777 == 0o755
    (workspace / "d").mkdir()
    assert "directory" in await edit_err(server, "d", "", "x")
    assert "root directory" in await edit_err(server, "", "", "x")


@pytest.mark.parametrize("path", [".git/config", ".git/hooks/pre-commit", ".bashrc", "sub/.mcp.json"])
async def test_protected_paths_cannot_be_edited(server: Harness, workspace: Path, path: str) -> None:
    (workspace / path).parent.mkdir(parents=True, exist_ok=True)
    (workspace / path).write_text("[core]\n")
    msg = await edit_err(server, path, "[core]", "[core] evil")
    # Inside .git the repository rule speaks (gitdirs.py); elsewhere the protected_paths rule.
    rule = "is inside a git directory" if path.startswith(".git/") else "matches the protected_paths rule"
    assert msg.startswith(f"protected path: {path} {rule}")
    assert (workspace / path).read_text() == "[core]\n"


async def test_a_symlink_to_a_protected_file_is_refused(server: Harness, workspace: Path) -> None:
    (workspace / ".git").mkdir()
    (workspace / ".git" / "config").write_text("[core]\n")
    (workspace / "cfg").symlink_to(".git/config")
    assert "git directory" in await edit_err(server, "cfg", "[core]", "[core] x")
    assert (workspace / ".git" / "config").read_text() == "[core]\n"


async def test_symlinks_are_followed_only_inside_the_root(server: Harness, workspace: Path, outside: Path) -> None:
    (workspace / "real.txt").write_text("inside\n")
    (workspace / "alias.txt").symlink_to("real.txt")
    await edit(server, "alias.txt", "inside", "changed")
    assert (workspace / "real.txt").read_text() == "changed\n" and (workspace / "alias.txt").is_symlink()
    (workspace / "out.txt").symlink_to(outside / "secret.txt")
    (workspace / "outdir").symlink_to(outside)
    for path in ("out.txt", "outdir/secret.txt", "outdir/new.txt"):
        old = "" if path.endswith("new.txt") else "OUTSIDE-SECRET"
        assert await edit_err(server, path, old, "PWNED") == "path resolves outside root boundary"
    assert sorted(os.listdir(outside)) == ["secret.txt"]
    assert (outside / "secret.txt").read_text() == "OUTSIDE-SECRET\n"


async def test_allowlist_names_edit_file_and_star_includes_it(make_server: MakeServer, tmp_path: Path) -> None:
    for name in ("ro", "ed", "all"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "f.txt").write_text("a\n")
    h = await make_server({"ro": (tmp_path / "ro", ["read_file", "write_file", "patch_file"]),
                           "ed": (tmp_path / "ed", ["edit_file"]), "all": (tmp_path / "all", ["*"])})
    args = {"path": "f.txt", "old_string": "a", "new_string": "b"}
    assert await h.err("edit_file", root="ro", **args) == "tool edit_file not allowed on root ro"
    await h.ok("edit_file", root="ed", **args)
    await h.ok("edit_file", root="all", **args)
    assert (tmp_path / "ro/f.txt").read_text() == "a\n" and (tmp_path / "ed/f.txt").read_text() == "b\n"
    roots = {r["name"]: r["allowed_tools"] for r in (await h.ok("list_roots"))["roots"]}
    assert roots["ed"] == ["edit_file"] and "edit_file" in roots["all"] and "edit_file" not in roots["ro"]


async def test_unknown_tool_name_in_allowed_tools_lists_edit_file(make_server: MakeServer, tmp_path: Path) -> None:
    with pytest.raises(Exception, match=r"valid tools: .*edit_file"):
        await make_server({"x": (tmp_path, ["edit_files"])})


# -- what clients see -----------------------------------------------------------------------------------------


async def test_definition_fits_in_1200_bytes_of_tools_list(server: Harness) -> None:
    """Every byte of a tool definition is sent to the model on every turn."""
    tools = {t.name: t for t in (await server.client.list_tools()).tools}
    tool = tools["edit_file"]
    sent = json.dumps(tool.model_dump(by_alias=True, exclude_none=True, mode="json"), separators=(",", ":"))
    assert len(sent.encode()) <= 1200, len(sent.encode())
    assert tool.output_schema is not None and tool.description is not None
    props = tool.input_schema["properties"]
    assert set(props) == {"root", "path", "old_string", "new_string", "replace_all", "edits", "expected_sha256"}
    assert set(tool.output_schema["properties"]) == {"path", "replacements", "sha256", "first_changed_line", "size",
                                                     "created"}
    assert tool.annotations is not None and tool.annotations.destructive_hint is True
    assert tool.annotations.read_only_hint is not True and tool.annotations.open_world_hint is False
    sentences = [s for s in re.split(r"(?<=[.!?])\s+", tool.description) if s]
    assert 2 <= len(sentences) <= 3 and "write_file" in tool.description
