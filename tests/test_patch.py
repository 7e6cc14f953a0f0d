"""patch_file over the real protocol: seed 003 E2E-001/022/023/024, diffs as LLMs write them, and atomicity."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from tests.conftest import Harness

pytestmark = pytest.mark.anyio

CODE = "".join(f"line {i}\n" for i in range(1, 61))


async def patch(server: Harness, path: str, diff: str) -> dict[str, object]:
    return await server.ok("patch_file", root="workspace", path=path, patch=diff)


async def test_e2e_001_read_modify_verify(server: Harness, workspace: Path) -> None:
    (workspace / "hello.txt").write_text("Hello World\n")
    got = await server.ok("read_file", root="workspace", path="hello.txt")
    assert got["content"] == "Hello World\n" and got["size"] == 12
    result = await patch(server, "hello.txt", "--- a/hello.txt\n+++ b/hello.txt\n@@ -1 +1 @@\n-Hello World\n"
                                              "+Hello Agent\n")
    assert result["hunks_applied"] == 1
    assert (await server.ok("read_file", root="workspace", path="hello.txt"))["content"] == "Hello Agent\n"
    digest = await server.ok("hash_file", root="workspace", path="hello.txt", algorithm="sha256")
    assert digest["hash"] == hashlib.sha256(b"Hello Agent\n").hexdigest() == result["sha256"]


async def test_e2e_022_several_hunks(server: Harness, workspace: Path) -> None:
    (workspace / "code.go").write_text(CODE)
    diff = ("--- a/code.go\n+++ b/code.go\n"
            "@@ -2,3 +2,3 @@\n line 2\n-line 3\n+LINE THREE\n line 4\n"
            "@@ -40,3 +40,4 @@\n line 40\n+inserted\n line 41\n line 42\n")
    got = await patch(server, "code.go", diff)
    assert got["hunks_applied"] == 2
    assert got["hunks"] == [{"hunk": 1, "line": 2, "offset": 0}, {"hunk": 2, "line": 40, "offset": 0}]
    expected = CODE.replace("line 3\n", "LINE THREE\n").replace("line 41\n", "inserted\nline 41\n")
    assert (await server.ok("read_file", root="workspace", path="code.go"))["content"] == expected


async def test_e2e_023_mismatch_fails_atomically(server: Harness, workspace: Path) -> None:
    (workspace / "code.go").write_text("line A\nline B\nline C\n")
    msg = await server.err("patch_file", root="workspace", path="code.go",
                           patch="@@ -1,3 +1,3 @@\n line A\n-line X\n+line Y\n line C\n")
    assert msg.startswith("patch failed: hunk 1 does not match at line 2")
    assert "'line X'" in msg and "'line B'" in msg
    assert (workspace / "code.go").read_bytes() == b"line A\nline B\nline C\n"


async def test_second_hunk_failing_leaves_file_byte_for_byte_unchanged(server: Harness, workspace: Path) -> None:
    original = CODE.encode().replace(b"\n", b"\r\n", 3)  # mixed line ends, to prove nothing is normalised
    (workspace / "f.txt").write_bytes(original)
    before = (workspace / "f.txt").stat()
    diff = "@@ -10 +10 @@\n-line 10\n+changed\n@@ -42 +42 @@\n-line 99\n+changed\n"
    msg = await server.err("patch_file", root="workspace", path="f.txt", patch=diff)
    assert msg.startswith("patch failed: hunk 2 does not match at line 42")
    assert (workspace / "f.txt").read_bytes() == original
    assert (workspace / "f.txt").stat().st_ino == before.st_ino  # not even rewritten


async def test_e2e_024_patch_creates_a_new_file_and_its_parents(server: Harness, workspace: Path) -> None:
    diff = "--- /dev/null\n+++ b/src/new_file.txt\n@@ -0,0 +1,2 @@\n+first\n+second\n"
    got = await patch(server, "src/new_file.txt", diff)
    assert got["created"] is True and got["hunks_applied"] == 1
    assert (await server.ok("read_file", root="workspace", path="src/new_file.txt"))["content"] == "first\nsecond\n"


async def test_creation_patch_refuses_to_clobber_an_existing_file(server: Harness, workspace: Path) -> None:
    (workspace / "there.txt").write_text("precious\n")
    msg = await server.err("patch_file", root="workspace", path="there.txt",
                           patch="--- /dev/null\n+++ b/there.txt\n@@ -0,0 +1 @@\n+new\n")
    assert "already exists" in msg and (workspace / "there.txt").read_text() == "precious\n"


async def test_wrong_line_numbers_apply_at_nearest_match_and_report_offsets(server: Harness,
                                                                            workspace: Path) -> None:
    (workspace / "f.txt").write_text(CODE)
    # Headers written by an LLM: both 20 lines off, and the counts are wrong too.
    diff = "@@ -10,9 +10,2 @@\n line 30\n-line 31\n+LINE 31\n@@ -25 +25 @@\n-line 45\n+LINE 45\n"
    got = await patch(server, "f.txt", diff)
    assert got["hunks"] == [{"hunk": 1, "line": 30, "offset": 20}, {"hunk": 2, "line": 45, "offset": 20}]
    text = (workspace / "f.txt").read_text()
    assert "LINE 31\n" in text and "LINE 45\n" in text and text.count("\n") == 60


async def test_nearest_of_several_matches_wins(server: Harness, workspace: Path) -> None:
    (workspace / "f.txt").write_text("x\n" * 10 + "end\n" + "x\n" * 10)
    await patch(server, "f.txt", "@@ -14 +14 @@\n-x\n+Y\n")
    lines = (workspace / "f.txt").read_text().splitlines()
    assert lines.index("Y") == 13  # exactly where the header said, not the first "x"


async def test_no_newline_at_end_of_file_markers(server: Harness, workspace: Path) -> None:
    (workspace / "a.txt").write_bytes(b"a\nb")
    await patch(server, "a.txt", "@@ -1,2 +1,2 @@\n a\n-b\n\\ No newline at end of file\n+c\n")
    assert (workspace / "a.txt").read_bytes() == b"a\nc\n"
    await patch(server, "a.txt", "@@ -1,2 +1,2 @@\n a\n-c\n+d\n\\ No newline at end of file\n")
    assert (workspace / "a.txt").read_bytes() == b"a\nd"
    # No marker at all: the file keeps having no final newline.
    await patch(server, "a.txt", "@@ -2 +2,2 @@\n-d\n+e\n+f\n")
    assert (workspace / "a.txt").read_bytes() == b"a\ne\nf"


async def test_crlf_file_keeps_its_line_endings(server: Harness, workspace: Path) -> None:
    (workspace / "w.txt").write_bytes(b"one\r\ntwo\r\nthree\r\n")
    await patch(server, "w.txt", "@@ -1,3 +1,4 @@\n one\n-two\n+TWO\n+2.5\n three\n")
    assert (workspace / "w.txt").read_bytes() == b"one\r\nTWO\r\n2.5\r\nthree\r\n"


async def test_blank_context_line_without_its_space(server: Harness, workspace: Path) -> None:
    (workspace / "p.py").write_text("def f():\n\n    return 1\n")
    await patch(server, "p.py", "@@ -1,3 +1,3 @@\n def f():\n\n-    return 1\n+    return 2\n")
    assert (workspace / "p.py").read_text() == "def f():\n\n    return 2\n"


async def test_hunk_header_without_line_numbers(server: Harness, workspace: Path) -> None:
    (workspace / "f.txt").write_text(CODE)
    got = await patch(server, "f.txt", "@@\n line 7\n-line 8\n+eight\n")
    assert got["hunks"] == [{"hunk": 1, "line": 7}]
    assert "eight\n" in (workspace / "f.txt").read_text()


async def test_removing_a_line_that_starts_with_dashes(server: Harness, workspace: Path) -> None:
    (workspace / "q.sql").write_text("-- comment\nSELECT 1;\n")
    await patch(server, "q.sql", "--- a/q.sql\n+++ b/q.sql\n@@ -1,2 +1,2 @@\n--- comment\n+++ note\n SELECT 1;\n")
    assert (workspace / "q.sql").read_text() == "++ note\nSELECT 1;\n"


# -- which file a diff is for ---------------------------------------------------------------------


MULTI = ("diff --git a/one.txt b/one.txt\n--- a/one.txt\n+++ b/one.txt\n@@ -1 +1 @@\n-1\n+ONE\n"
         "diff --git a/two.txt b/two.txt\n--- a/two.txt\n+++ b/two.txt\n@@ -1 +1 @@\n-2\n+TWO\n")


async def test_single_file_diff_applies_to_path_whatever_its_header_says(server: Harness,
                                                                         workspace: Path) -> None:
    (workspace / "real.txt").write_text("x\n")
    await patch(server, "real.txt", "--- a/other_name.txt\n+++ b/other_name.txt\n@@ -1 +1 @@\n-x\n+y\n")
    assert (workspace / "real.txt").read_text() == "y\n" and not (workspace / "other_name.txt").exists()


async def test_multi_file_diff_uses_the_section_named_by_path(server: Harness, workspace: Path) -> None:
    (workspace / "one.txt").write_text("1\n")
    (workspace / "two.txt").write_text("2\n")
    await patch(server, "two.txt", MULTI)
    assert (workspace / "two.txt").read_text() == "TWO\n" and (workspace / "one.txt").read_text() == "1\n"


async def test_multi_file_diff_not_naming_path_is_refused(server: Harness, workspace: Path) -> None:
    (workspace / "three.txt").write_text("3\n")
    msg = await server.err("patch_file", root="workspace", path="three.txt", patch=MULTI)
    assert "does not name three.txt" in msg and (workspace / "three.txt").read_text() == "3\n"


# -- malformed patches ----------------------------------------------------------------------------


@pytest.mark.parametrize(("diff", "words"), [
    ("just some text\n", "no hunks found"),
    ("@@ -1,2 +1,2 @@\n", "has no lines"),
    ("@@ -one +1 @@\n-a\n+b\n", "not a valid hunk header"),
    ("@@ -1 +1 @@\n-a\n+b\n-stray\n+lines\nexplanation\n extra\n", None),  # ok: lines beyond count still a hunk
    ("@@ -1 +1 @@\n-a\n+b\nsome prose\n-orphan\n", "outside any hunk"),
    ("diff --git a/x b/x\nBinary files a/x and b/x differ\n", "binary"),
    ("--- a/f.txt\n+++ /dev/null\n@@ -1 +0,0 @@\n-a\n", "use remove_file"),
])
async def test_malformed_patches_change_nothing(server: Harness, workspace: Path, diff: str,
                                                words: str | None) -> None:
    (workspace / "f.txt").write_text("a\n")
    result = await server.call("patch_file", root="workspace", path="f.txt", patch=diff)
    text = result.content[0].text if result.content and result.content[0].type == "text" else ""
    assert result.is_error, text
    if words:
        assert words in text
    assert (workspace / "f.txt").read_text() == "a\n"


# -- guard rails ----------------------------------------------------------------------------------


async def test_patch_expected_sha256(server: Harness, workspace: Path) -> None:
    (workspace / "f.txt").write_text("a\n")
    diff = "@@ -1 +1 @@\n-a\n+b\n"
    msg = await server.err("patch_file", root="workspace", path="f.txt", patch=diff, expected_sha256="0" * 64)
    assert hashlib.sha256(b"a\n").hexdigest() in msg and (workspace / "f.txt").read_text() == "a\n"
    got = await server.ok("patch_file", root="workspace", path="f.txt", patch=diff,
                          expected_sha256=hashlib.sha256(b"a\n").hexdigest())
    assert got["sha256"] == hashlib.sha256(b"b\n").hexdigest()


async def test_patch_keeps_mode_and_refuses_directories(server: Harness, workspace: Path) -> None:
    (workspace / "run.sh").write_text("echo a\n")
    (workspace / "run.sh").chmod(0o755)
    await patch(server, "run.sh", "@@ -1 +1 @@\n-echo a\n+echo b\n")
    assert (workspace / "run.sh").stat().st_mode & 0o777 == 0o755
    (workspace / "d").mkdir()
    assert "directory" in await server.err("patch_file", root="workspace", path="d", patch="@@ -0,0 +1 @@\n+x\n")


async def test_failed_creation_patch_leaves_no_parent_folders(server: Harness, workspace: Path) -> None:
    msg = await server.err("patch_file", root="workspace", path="new/dir/f.txt", patch="@@ -1 +1 @@\n-a\n+b\n")
    assert msg.startswith("patch failed: hunk 1 does not match at line 1")
    assert not (workspace / "new").exists()


# -- never a guess: equal places, near misses, order (issue 16) ------------------------------------


TWIN = ("def total(x):\n"
        "    if x is None:\n"
        "        return 0\n"
        "    return sum(x)\n"
        "\n"
        "\n"
        "def count(x):\n"
        "    if x is None:\n"
        "        return 0\n"
        "    return len(x)\n")
TWIN_HUNK = "     if x is None:\n-        return 0\n+        return -1\n"


@pytest.mark.parametrize("header", ["@@ -5,2 +5,2 @@", "@@", "@@ -1,2 +1,2 @@"])
async def test_identical_blocks_are_refused_unless_the_header_names_one(server: Harness, workspace: Path,
                                                                        header: str) -> None:
    """Two identical blocks (lines 2-3 and 8-9): a header naming neither used to pick the nearer one silently."""
    (workspace / "twin.py").write_text(TWIN)
    msg = await server.err("patch_file", root="workspace", path="twin.py", patch=f"{header}\n{TWIN_HUNK}")
    assert msg.startswith("patch failed: hunk 1 matches 2 places (lines 2, 8)"), msg
    assert "add context lines that tell them apart" in msg
    assert (workspace / "twin.py").read_text() == TWIN


@pytest.mark.parametrize(("header", "changed"), [("@@ -8,2 +8,2 @@", "count"), ("@@ -2,2 +2,2 @@", "total")])
async def test_identical_blocks_apply_where_the_header_says(server: Harness, workspace: Path, header: str,
                                                            changed: str) -> None:
    (workspace / "twin.py").write_text(TWIN)
    await patch(server, "twin.py", f"{header}\n{TWIN_HUNK}")
    text = (workspace / "twin.py").read_text()
    body = text.split(f"def {changed}(x):\n")[1][:60]
    assert "return -1" in body and text.count("return -1") == 1


async def test_more_context_tells_identical_blocks_apart(server: Harness, workspace: Path) -> None:
    (workspace / "twin.py").write_text(TWIN)
    got = await patch(server, "twin.py", "@@ -1,3 +1,3 @@\n def count(x):\n" + TWIN_HUNK)
    assert got["hunks"] == [{"hunk": 1, "line": 7, "offset": 6}]
    assert (workspace / "twin.py").read_text() == TWIN.replace("0\n    return len", "-1\n    return len")


MEDIAN = ("import math\n"
          "\n"
          "\n"
          "def mean(values):\n"
          "    return sum(values) / len(values)\n"
          "\n"
          "\n"
          "def median(values):\n"
          "    if not values:\n"
          "        raise ValueError('empty')\n"
          "    ordered = sorted(values)\n"
          "    n = len(ordered)\n"
          "    mid = n // 2\n"
          "    if n % 2:\n"
          "        return ordered[mid]\n"
          "    return (ordered[mid - 1] + ordered[mid]) / 2\n")


async def test_a_failed_hunk_names_its_closest_place_not_the_header_line(server: Harness,
                                                                         workspace: Path) -> None:
    """The header says line 2; the hunk's lines are at 11-13, where one line is indented with a tab."""
    (workspace / "stats.py").write_text(MEDIAN.replace("    n = len(ordered)", "\tn = len(ordered)"))
    diff = ("@@ -2,3 +2,3 @@\n     ordered = sorted(values)\n-    n = len(ordered)\n+    n = len(values)\n"
            "     mid = n // 2\n")
    msg = await server.err("patch_file", root="workspace", path="stats.py", patch=diff)
    assert msg.startswith("patch failed: hunk 1 does not match at line 12 (expected '    n = len(ordered)', "
                          "found '\\tn = len(ordered)': indentation differs: the file has 1 tab, the hunk has "
                          "4 spaces (tabs vs spaces))"), msg
    assert "closest place is lines 11-13" in msg and "    12\t\tn = len(ordered)" in msg


async def test_an_omitted_context_line_is_named(server: Harness, workspace: Path) -> None:
    (workspace / "stats.py").write_text(MEDIAN)
    diff = "@@ -11,3 +11,3 @@\n     ordered = sorted(values)\n-    mid = n // 2\n+    mid = n >> 1\n"
    msg = await server.err("patch_file", root="workspace", path="stats.py", patch=diff)
    assert msg.startswith("patch failed: hunk 1 does not match at line 12 (found '    n = len(ordered)', a line "
                          "the hunk lacks here: was a context line left out?)"), msg


async def test_trailing_whitespace_is_tolerated_in_context_lines_only(server: Harness, workspace: Path) -> None:
    (workspace / "t.py").write_text("a = 1  \nb = 2\t\nc = 3 \n")
    # Context lines without the file's trailing whitespace apply, and keep it; '+' lines are written as given.
    await patch(server, "t.py", "@@ -1,3 +1,3 @@\n a = 1\n-b = 2\t\n+b = 20  \n c = 3\n")
    assert (workspace / "t.py").read_text() == "a = 1  \nb = 20  \nc = 3 \n"
    # A removed line must match exactly, trailing whitespace included.
    msg = await server.err("patch_file", root="workspace", path="t.py", patch="@@ -2 +2 @@\n-b = 20\n+b = 3\n")
    assert msg.startswith("patch failed: hunk 1 does not match at line 2 (expected 'b = 20', found 'b = 20  ': "
                          "trailing whitespace differs"), msg
    assert (workspace / "t.py").read_text() == "a = 1  \nb = 20  \nc = 3 \n"


async def test_hunks_out_of_order_apply_by_position(server: Harness, workspace: Path) -> None:
    (workspace / "f.txt").write_text(CODE)
    diff = "@@ -40,3 +40,3 @@\n line 40\n-line 41\n+LINE 41\n@@ -2,3 +2,3 @@\n line 2\n-line 3\n+LINE 3\n"
    got = await patch(server, "f.txt", diff)
    assert got["hunks"] == [{"hunk": 1, "line": 40, "offset": 0}, {"hunk": 2, "line": 2, "offset": 0}]
    assert (workspace / "f.txt").read_text() == CODE.replace("line 41\n", "LINE 41\n").replace("line 3\n", "LINE 3\n")


async def test_overlapping_hunks_are_refused(server: Harness, workspace: Path) -> None:
    (workspace / "f.txt").write_text(CODE)
    diff = "@@ -2,3 +2,3 @@\n line 2\n-line 3\n+LINE 3\n line 4\n@@ -4,2 +4,2 @@\n line 4\n-line 5\n+LINE 5\n"
    await patch(server, "f.txt", diff)  # sharing a context line is not overlapping
    diff = "@@ -2,3 +2,3 @@\n line 2\n-LINE 3\n+3\n line 4\n@@ -3,2 +3,2 @@\n-LINE 3\n+three\n line 4\n"
    msg = await server.err("patch_file", root="workspace", path="f.txt", patch=diff)
    assert msg.startswith("patch failed: hunks 1 and 2 overlap at line 3 of the file"), msg


async def test_only_added_lines_without_a_line_number_are_refused(server: Harness, workspace: Path) -> None:
    (workspace / "f.txt").write_text("a\n")
    assert "nothing says where it goes" in await server.err("patch_file", root="workspace", path="f.txt",
                                                            patch="@@\n+b\n")
    assert (workspace / "f.txt").read_text() == "a\n"


# -- the *** Begin Patch envelope (OpenAI apply_patch) --------------------------------------------


async def test_begin_patch_update_with_an_anchor(server: Harness, workspace: Path) -> None:
    (workspace / "stats.py").write_text(MEDIAN)
    envelope = ("*** Begin Patch\n*** Update File: stats.py\n@@ def median(\n     ordered = sorted(values)\n"
                "-    n = len(ordered)\n+    n = len(values)\n     mid = n // 2\n*** End Patch\n")
    got = await patch(server, "stats.py", envelope)
    assert got["hunks"] == [{"hunk": 1, "line": 11}]
    assert (workspace / "stats.py").read_text() == MEDIAN.replace("n = len(ordered)", "n = len(values)")


async def test_begin_patch_anchor_chooses_between_identical_blocks(server: Harness, workspace: Path) -> None:
    (workspace / "twin.py").write_text(TWIN)
    body = f"{TWIN_HUNK}*** End Patch\n"
    msg = await server.err("patch_file", root="workspace", path="twin.py",
                           patch=f"*** Begin Patch\n*** Update File: twin.py\n@@\n{body}")
    assert msg.startswith("patch failed: hunk 1 matches 2 places (lines 2, 8)")
    await patch(server, "twin.py", f"*** Begin Patch\n*** Update File: twin.py\n@@ def count(x):\n{body}")
    assert (workspace / "twin.py").read_text() == TWIN.replace("0\n    return len", "-1\n    return len")
    msg = await server.err("patch_file", root="workspace", path="twin.py",
                           patch=f"*** Begin Patch\n*** Update File: twin.py\n@@ def nothing(\n{body}")
    assert "anchor '@@ def nothing(' names no line of the file" in msg


async def test_begin_patch_several_hunks_end_of_file_and_fences(server: Harness, workspace: Path) -> None:
    (workspace / "stats.py").write_text(MEDIAN)
    envelope = ("Here is the patch:\n```\n*** Begin Patch\n*** Update File: src/stats.py\n"
                "@@ def mean(values):\n-    return sum(values) / len(values)\n"
                "+    return math.fsum(values) / len(values)\n"
                "@@\n     if n % 2:\n         return ordered[mid]\n     return (ordered[mid - 1] + ordered[mid]) / 2\n"
                "+\n+\n+MEDIAN = median\n*** End of File\n*** End Patch\n```\n")
    await patch(server, "stats.py", envelope)
    assert (workspace / "stats.py").read_text() == MEDIAN.replace("return sum(", "return math.fsum(") + \
        "\n\nMEDIAN = median\n"


async def test_begin_patch_add_and_delete(server: Harness, workspace: Path) -> None:
    got = await patch(server, "pkg/new.py", "*** Begin Patch\n*** Add File: pkg/new.py\n+X = 1\n+Y = 2\n*** End Patch")
    assert got["created"] is True and (workspace / "pkg/new.py").read_text() == "X = 1\nY = 2\n"
    msg = await server.err("patch_file", root="workspace", path="pkg/new.py",
                           patch="*** Begin Patch\n*** Add File: pkg/new.py\n+Z = 3\n*** End Patch")
    assert "already exists" in msg
    msg = await server.err("patch_file", root="workspace", path="pkg/new.py",
                           patch="*** Begin Patch\n*** Delete File: pkg/new.py\n*** End Patch")
    assert "use remove_file" in msg
    msg = await server.err("patch_file", root="workspace", path="pkg/new.py", patch=(
        "*** Begin Patch\n*** Update File: pkg/new.py\n*** Move to: pkg/old.py\n@@\n-X = 1\n+X = 0\n*** End Patch"))
    assert "use move" in msg or "with move" in msg
    assert (workspace / "pkg/new.py").read_text() == "X = 1\nY = 2\n"


async def test_begin_patch_with_several_files_uses_the_one_named_path(server: Harness, workspace: Path) -> None:
    (workspace / "a.py").write_text("A = 1\n")
    (workspace / "b.py").write_text("B = 1\n")
    envelope = ("*** Begin Patch\n*** Update File: a.py\n@@\n-A = 1\n+A = 2\n"
                "*** Update File: b.py\n@@\n-B = 1\n+B = 2\n*** End Patch\n")
    await patch(server, "b.py", envelope)
    assert (workspace / "a.py").read_text() == "A = 1\n" and (workspace / "b.py").read_text() == "B = 2\n"


# -- a patch touches only its path, in linear time ------------------------------------------------------


async def test_patch_headers_naming_other_files_touch_only_path(server: Harness, workspace: Path,
                                                                outside: Path) -> None:
    (workspace / "a.txt").write_text("one\n")
    patch = "--- a/../../outside/secret.txt\n+++ b/../../outside/secret.txt\n@@ -1 +1 @@\n-one\n+two\n"
    await server.ok("patch_file", root="workspace", path="a.txt", patch=patch)
    assert (workspace / "a.txt").read_text() == "two\n"
    assert (outside / "secret.txt").read_text() == "OUTSIDE-SECRET\n"
    evil = "--- /etc/passwd\n+++ /etc/passwd\n@@ -1 +1 @@\n-two\n+three\n" \
           "--- .git/config\n+++ .git/config\n@@ -0,0 +1 @@\n+x\n"
    await server.err("patch_file", root="workspace", path="a.txt", patch=evil)
    assert not (workspace / ".git").exists()


async def test_patch_search_is_linear_on_repetitive_files(server: Harness, workspace: Path) -> None:
    """A file of identical lines and a long hunk that fails only on its last line: every position matches
    the first line. The old search compared hunk-length slices at each one (a million x 50,000 here:
    over a minute of a worker thread, growing with both); now it is linear, and a real match is still found."""
    (workspace / "same.txt").write_bytes(b"a\n" * 1_000_000 + b"b\n")
    hunk = "@@ -1,50001 +1,50001 @@\n" + " a\n" * 50_000 + "-c\n+d\n"
    text = await server.err("patch_file", root="workspace", path="same.txt", patch=hunk)
    assert "does not match" in text
    ok = "@@ -10,3 +10,3 @@\n a\n a\n-b\n+B\n"  # header far off: the match is found near the end
    got = await server.ok("patch_file", root="workspace", path="same.txt", patch=ok)
    assert got["hunks"] == [{"hunk": 1, "line": 999_999, "offset": 999_989}]
    assert (workspace / "same.txt").read_bytes().endswith(b"a\nB\n")
