"""grep and glob over the real protocol: seed cases, bounds, and confinement of the walk."""

from __future__ import annotations

import contextlib
import os
import resource
import shutil
import socket
import tempfile
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from rootbound.grep import helper as fanout
from rootbound.grep.helper import Helper, SharedHelper
from rootbound.grep.scanner import CUT, LINE_CAP
from tests.conftest import Harness, MakeServer, no_host_path, text_of
from tests.test_wire_form import same_over_the_wire

pytestmark = pytest.mark.anyio

SECRET = "OUTSIDE-SECRET"


def lines(data: dict[str, Any]) -> list[tuple[str, int]]:
    return [(m["file"], m["line_number"]) for m in data["matches"]]


def paths(data: dict[str, Any]) -> list[str]:
    return [m["path"] for m in data["matches"]]


def sparse(path: Path, size: int, chunks: dict[int, bytes]) -> None:
    """A file of `size` bytes, zeros (holes, no disk) except `chunks` written at their offsets."""
    with open(path, "wb") as f:
        f.truncate(size)
        for offset, data in chunks.items():
            f.seek(offset)
            f.write(data)


@pytest.fixture
async def big(make_server: MakeServer, tmp_path: Path) -> AsyncIterator[tuple[Harness, Path]]:
    """A server whose root sits on tmpfs when there is one: reading a sparse file's holes there
    costs neither disk nor page cache, so multi-GiB files are cheap to build and to search."""
    shm = Path("/dev/shm")
    base = Path(tempfile.mkdtemp(dir=shm)) if shm.is_dir() and os.access(shm, os.W_OK) else tmp_path / "big"
    base.mkdir(exist_ok=True)
    try:
        yield await make_server({"workspace": base}), base
    finally:
        shutil.rmtree(base, ignore_errors=True)


def helper_ready(server: Harness) -> None:
    """Wait until the server's grep helper process has started (the first calls start it) and is free."""
    deadline = time.monotonic() + 30
    while (helper := server.app.grep_helper.acquire()) is None:
        assert time.monotonic() < deadline, "the grep helper process did not start"
        time.sleep(0.02)
    helper.release()


@pytest.fixture(params=["here", "helper"])
def grep_mode(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Run a grep test with the search in this process only, and with the test server's helper process taking
    batches (the test's `server`, or the one of `big`)."""
    if request.param == "here":
        monkeypatch.setenv("ROOTBOUND_GREP_HELPER", "off")
        return "here"
    monkeypatch.delenv("ROOTBOUND_GREP_HELPER", raising=False)
    helper_ready(request.getfixturevalue("big")[0] if "big" in request.fixturenames
                 else request.getfixturevalue("server"))
    return "helper"


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


async def without_and_with_helper(server: Harness, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[str]:
    """Each mode of grep in turn ("off": in the server, "on": in its helper process); after each, every directory
    handle handed around has been closed."""
    for mode in ("off", "on"):
        monkeypatch.setenv("ROOTBOUND_GREP_HELPER", mode)
        if mode == "on":
            helper_ready(server)
        before = open_fds()
        yield mode
        assert open_fds() == before


# -- grep: seed cases -----------------------------------------------------------------------------


async def test_e2e048_match_with_context_lines(server: Harness, workspace: Path, grep_mode: str) -> None:
    body = [f"line {i}" for i in range(1, 15)]
    body[9] = "// TODO: fix this"
    (workspace / "code.go").write_text("\n".join(body) + "\n")
    got = await server.ok("grep", root="workspace", pattern="TODO", context_lines=2)
    assert got["total_matches"] == 1 and not got["truncated"] and not got["timed_out"]
    assert got["matches"] == [{"file": "code.go", "line_number": 10, "line_content": "// TODO: fix this",
                               "context_before": ["line 8", "line 9"], "context_after": ["line 11", "line 12"]}]


async def test_context_is_clipped_at_file_edges(server: Harness, workspace: Path) -> None:
    (workspace / "a.txt").write_text("hit first\nmiddle\nhit last")
    got = await server.ok("grep", root="workspace", pattern="hit", context_lines=3)
    assert got["matches"] == [  # an empty context list is left out
        {"file": "a.txt", "line_number": 1, "line_content": "hit first", "context_after": ["middle", "hit last"]},
        {"file": "a.txt", "line_number": 3, "line_content": "hit last", "context_before": ["hit first", "middle"]}]


async def test_e2e049_case_insensitive(server: Harness, workspace: Path) -> None:
    (workspace / "a.log").write_text("Error one\nerror two\nERROR three\nfine\n")
    got = await server.ok("grep", root="workspace", pattern="error", case_insensitive=True)
    assert [m["line_content"] for m in got["matches"]] == ["Error one", "error two", "ERROR three"]
    exact = await server.ok("grep", root="workspace", pattern="error")
    assert [m["line_content"] for m in exact["matches"]] == ["error two"]


async def test_e2e050_glob_filter(server: Harness, workspace: Path) -> None:
    (workspace / "file.go").write_text("// TODO go\n")
    (workspace / "file.py").write_text("# TODO py\n")
    (workspace / "sub").mkdir()
    (workspace / "sub" / "deep.go").write_text("// TODO deep\n")
    got = await server.ok("grep", root="workspace", pattern="TODO", glob_filter="*.go")
    assert sorted(m["file"] for m in got["matches"]) == ["file.go", "sub/deep.go"]
    # With a "/", the glob is matched against the path below `path`, not the name.
    got = await server.ok("grep", root="workspace", pattern="TODO", glob_filter="sub/*.go")
    assert [m["file"] for m in got["matches"]] == ["sub/deep.go"]


async def test_e2e051_no_matches(server: Harness, workspace: Path) -> None:
    (workspace / "a.txt").write_text("nothing to see\n")
    got = await server.ok("grep", root="workspace", pattern="ZZZZUNIQUEZZZZZ")
    assert got == {"matches": [], "total_matches": 0, "truncated": False, "timed_out": False}


async def test_e2e052_invalid_regex_carries_parser_message(server: Harness) -> None:
    # (issue 15: the message also says what RE2 lacks and how to search for the text itself)
    assert await server.err("grep", root="workspace", pattern="[invalid") == (
        "invalid pattern: missing ]: [invalid; the syntax is RE2 (no lookaround, no backreferences); "
        "to search for the text itself: \\[invalid")
    # Go/RE2 syntax: no lookaround, and the message says which construct.
    message = await server.err("grep", root="workspace", pattern="(?<=a)b")
    assert message.startswith("invalid pattern: invalid perl operator: (?<")


async def test_e2e053_max_results_truncates(server: Harness, workspace: Path, grep_mode: str) -> None:
    for i in range(210):
        (workspace / f"f{i:03}.txt").write_text("a match here\n")
    got = await server.ok("grep", root="workspace", pattern="match", max_results=5)
    assert got["total_matches"] == 5 and len(got["matches"]) == 5 and got["truncated"] is True
    assert lines(got) == [(f"f{i:03}.txt", 1) for i in range(5)]  # a stable order: the first files by name


async def test_exactly_max_results_is_not_truncated(server: Harness, workspace: Path) -> None:
    (workspace / "a.txt").write_text("m\nm\nm\n")
    got = await server.ok("grep", root="workspace", pattern="m", max_results=3)
    assert got["total_matches"] == 3 and got["truncated"] is False


async def test_e2e054_binary_files_skipped(server: Harness, workspace: Path, grep_mode: str) -> None:
    (workspace / "blob.bin").write_bytes(b"\x00\x01needle\x00\x02")
    (workspace / "late.bin").write_bytes(b"\x00" + b"x" * 9000 + b"\nneedle\n")
    (workspace / "text.txt").write_text("a needle in text\n")
    got = await server.ok("grep", root="workspace", pattern="needle")
    assert lines(got) == [("text.txt", 1)]


async def test_nul_after_the_first_8k_is_still_text(server: Harness, workspace: Path) -> None:
    (workspace / "mostly.txt").write_bytes(b"x" * 9000 + b"\n\x00 needle\n")
    got = await server.ok("grep", root="workspace", pattern="needle")
    assert lines(got) == [("mostly.txt", 2)]


async def test_regex_semantics_are_per_line(server: Harness, workspace: Path) -> None:
    (workspace / "a.txt").write_text("foo\nbar foo\nfoo bar\nfoobar\r\n")
    anchored = await server.ok("grep", root="workspace", pattern="^foo$")
    assert [m["line_number"] for m in anchored["matches"]] == [1]
    # `$` is the end of the line's text: before "\r\n" there is still the "\r" (as in ripgrep without --crlf).
    assert [m["line_number"] for m in (await server.ok("grep", root="workspace", pattern="bar$"))["matches"]] == [3]
    across = await server.ok("grep", root="workspace", pattern=r"foo\nbar")
    assert across["total_matches"] == 0  # a match never spans lines
    once = await server.ok("grep", root="workspace", pattern="o")
    assert [m["line_number"] for m in once["matches"]] == [1, 2, 3, 4]  # a line is reported once
    assert once["matches"][3]["line_content"] == "foobar"  # shown without its line ending


async def test_alternation_uses_prefilter_and_stays_exact(server: Harness, workspace: Path, grep_mode: str) -> None:
    (workspace / "a.py").write_text("x = 1  # TODO later\nTODOS are not words\n# FIXME\nXXXL\nfine\n")
    got = await server.ok("grep", root="workspace", pattern=r"\b(TODO|FIXME|XXX)\b")
    assert [m["line_number"] for m in got["matches"]] == [1, 3]
    ci = await server.ok("grep", root="workspace", pattern=r"\b(todo|fixme)\b", case_insensitive=True)
    assert [m["line_number"] for m in ci["matches"]] == [1, 3]
    inline = await server.ok("grep", root="workspace", pattern=r"(?i)\bfixme\b")
    assert [m["line_number"] for m in inline["matches"]] == [3]
    # The literals are looked for together, as one alternation: their own metacharacters stay literal.
    (workspace / "b.py").write_text("axb\na.b\ncc+d\ncd\n(?x\n")
    meta = await server.ok("grep", root="workspace", pattern=r"a\.b|c\+d", path="b.py")
    assert [m["line_number"] for m in meta["matches"]] == [2, 3]


async def test_grep_a_subdirectory_or_a_single_file(server: Harness, workspace: Path) -> None:
    (workspace / "src").mkdir()
    (workspace / "src" / "a.txt").write_text("hit\n")
    (workspace / "b.txt").write_text("hit\n")
    assert lines(await server.ok("grep", root="workspace", pattern="hit", path="src")) == [("src/a.txt", 1)]
    assert lines(await server.ok("grep", root="workspace", pattern="hit", path="b.txt")) == [("b.txt", 1)]
    assert await server.err("grep", root="workspace", pattern="hit", path="nope") == "file not found: nope"


async def test_grep_max_depth(server: Harness, workspace: Path) -> None:
    deep = workspace / "a" / "b" / "c"
    deep.mkdir(parents=True)
    for d in (workspace, workspace / "a", workspace / "a" / "b", deep):
        (d / "f.txt").write_text("hit\n")
    files = lambda data: [m["file"] for m in data["matches"]]  # noqa: E731
    assert files(await server.ok("grep", root="workspace", pattern="hit", max_depth=1)) == ["f.txt"]
    assert files(await server.ok("grep", root="workspace", pattern="hit", max_depth=2)) == ["a/f.txt", "f.txt"]
    assert len(files(await server.ok("grep", root="workspace", pattern="hit"))) == 4
    assert files(await server.ok("grep", root="workspace", pattern="hit", path="a/b", max_depth=1)) == ["a/b/f.txt"]


async def test_grep_tool_not_allowed(make_server: MakeServer, workspace: Path) -> None:
    h = await make_server({"ro": (workspace, ["read_file"])})
    assert await h.err("grep", root="ro", pattern="x") == "tool grep not allowed on root ro"
    assert await h.err("glob", root="ro", pattern="*") == "tool glob not allowed on root ro"


async def test_tools_are_annotated_read_only(server: Harness) -> None:
    tools = {t.name: t for t in (await server.client.list_tools()).tools}
    for name in ("grep", "glob"):
        ann = tools[name].annotations
        assert ann is not None and ann.read_only_hint is True and ann.destructive_hint is not True


# -- grep: long lines, big files, time ------------------------------------------------------------


async def test_long_lines_are_cut_and_marked(server: Harness, workspace: Path) -> None:
    long_before = "b" * 5000
    long_match = "x" * 3000 + " needle " + "y" * 3000
    (workspace / "wide.txt").write_text(f"{long_before}\n{long_match}\nshort\n")
    got = await server.ok("grep", root="workspace", pattern="needle", context_lines=1)
    [m] = got["matches"]
    assert m["line_number"] == 2
    line = m["line_content"]
    assert line.startswith(CUT) and line.endswith(CUT) and " needle " in line
    assert len(line) <= LINE_CAP + 2 * len(CUT)
    assert m["context_before"] == ["b" * LINE_CAP + CUT]
    assert m["context_after"] == ["short"]


async def test_multibyte_text_is_not_split_by_the_cut(server: Harness, workspace: Path) -> None:
    (workspace / "u.txt").write_text("é" * 3000 + "needle\n", encoding="utf-8")
    [m] = (await server.ok("grep", root="workspace", pattern="needle"))["matches"]
    assert "\ufffd" not in m["line_content"] and m["line_content"].endswith("needle")


TEXT_START = b"t" * 9000  # no NUL in the first 8 KiB: the sparse zeros after it do not make the file binary


async def test_two_gib_file_of_long_lines_in_bounded_memory(big: tuple[Harness, Path]) -> None:
    server, workspace = big
    # 2 GiB in 32 lines of 64 MiB (sparse: no disk), a match in line 20 and one at the very end.
    size, step = 2 << 30, 64 << 20
    chunks = {0: TEXT_START} | {i * step - 1: b"\n" for i in range(1, 32)}
    chunks[19 * step + 1000] = b"needle in line 20"
    chunks[size - 18] = b"needle at the end\n"
    sparse(workspace / "big.txt", size, chunks)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    got = await server.ok("grep", root="workspace", pattern="needle", context_lines=1)
    grown_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    assert grown_kib < 200 * 1024, f"peak memory grew by {grown_kib} KiB"
    assert [m["line_number"] for m in got["matches"]] == [20, 32]
    first, last = got["matches"]
    assert "needle in line 20" in first["line_content"] and first["line_content"].startswith(CUT)
    assert len(first["line_content"]) <= LINE_CAP + 2 * len(CUT)
    assert len(first["context_before"]) == 1 and first["context_before"][0].endswith(CUT)  # line 19, cut
    assert len(first["context_after"]) == 1 and first["context_after"][0].endswith(CUT)  # line 21
    assert "needle at the end" in last["line_content"] and "context_after" not in last


async def test_single_200mb_line(big: tuple[Harness, Path]) -> None:
    server, workspace = big
    size = 200 << 20
    sparse(workspace / "one.txt", size, {0: b"start " + TEXT_START, size // 2: b" needle ", size - 4: b"end\n"})
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    got = await server.ok("grep", root="workspace", pattern="needle|^start|end$")
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 100 * 1024
    [m] = got["matches"]  # one line, reported once
    assert m["line_number"] == 1 and m["line_content"].startswith("start ") and m["line_content"].endswith(CUT)
    tail = await server.ok("grep", root="workspace", pattern="end$")
    [t] = tail["matches"]
    assert t["line_number"] == 1 and t["line_content"].startswith(CUT) and t["line_content"].endswith("end")
    mid = await server.ok("grep", root="workspace", pattern=" needle ")
    assert mid["total_matches"] == 1 and " needle " in mid["matches"][0]["line_content"]


async def test_match_straddling_a_block_edge_in_a_long_line(server: Harness, workspace: Path) -> None:
    # A long line is searched in 1 MiB windows that overlap: a match across a window edge is still found.
    edge = 1 << 20
    sparse(workspace / "edge.txt", 3 * edge, {0: TEXT_START, edge - 5: b"straddling-match", 3 * edge - 1: b"\n"})
    got = await server.ok("grep", root="workspace", pattern="straddling-match")
    assert [m["line_number"] for m in got["matches"]] == [1]


async def test_e2e079_timeout_returns_partial_results(big: tuple[Harness, Path], grep_mode: str) -> None:
    # A tree far too big to search in a second: 256 files of 1 GiB (sparse), each starting with matches.
    server, workspace = big
    for i in range(256):
        sparse(workspace / f"part{i:03}.log", 1 << 30, {0: b"match one\nmatch two\n" + TEXT_START})
    start = time.monotonic()
    got = await server.ok("grep", root="workspace", pattern="match", timeout_seconds=1, max_results=100_000)
    elapsed = time.monotonic() - start
    assert got["timed_out"] is True and got["truncated"] is False
    assert 0 < got["total_matches"] < 512 and got["matches"][0]["file"] == "part000.log"
    assert elapsed < 5, elapsed  # loose on purpose: timing is the benchmarks' business


async def test_timeout_inside_one_huge_file(big: tuple[Harness, Path]) -> None:
    server, workspace = big
    sparse(workspace / "huge.txt", 1 << 40, {0: b"match at the start\n" + TEXT_START})  # 1 TiB of holes
    start = time.monotonic()
    got = await server.ok("grep", root="workspace", pattern="zzz|match", timeout_seconds=1)
    assert time.monotonic() - start < 5
    assert got["timed_out"] is True and lines(got) == [("huge.txt", 1)]


# -- glob: seed cases -----------------------------------------------------------------------------


async def test_e2e055_glob_pattern(server: Harness, workspace: Path) -> None:
    for name in ("a.go", "b.go", "c.txt"):
        (workspace / name).write_text("x")
    (workspace / "sub").mkdir()
    (workspace / "sub" / "d.go").write_text("x")
    got = await server.ok("glob", root="workspace", pattern="*.go")
    assert paths(got) == ["a.go", "b.go"] and got["total_matches"] == 2
    first = got["matches"][0]
    assert first["type"] == "file" and first["size"] == 1 and first["modified_at"].endswith("Z")


async def test_e2e056_glob_regex(server: Harness, workspace: Path) -> None:
    for name in ("test_1.go", "test_2.go", "main.go"):
        (workspace / name).write_text("x")
    got = await server.ok("glob", root="workspace", regex=r"test_\d+\.go")
    assert paths(got) == ["test_1.go", "test_2.go"]


async def test_e2e057_doublestar(server: Harness, workspace: Path) -> None:
    (workspace / "src" / "pkg" / "sub").mkdir(parents=True)
    for rel in ("src/a.go", "src/pkg/b.go", "src/pkg/sub/c.go", "src/pkg/sub/d.txt", ".hidden/e.go"):
        (workspace / rel).parent.mkdir(parents=True, exist_ok=True)
        (workspace / rel).write_text("x")
    got = await server.ok("glob", root="workspace", pattern="**/*.go")
    assert paths(got) == [".hidden/e.go", "src/a.go", "src/pkg/b.go", "src/pkg/sub/c.go"]
    # Relative to `path`, returned relative to the root.
    below = await server.ok("glob", root="workspace", pattern="*.go", path="src/pkg")
    assert paths(below) == ["src/pkg/b.go"]


async def test_a_name_ending_in_a_newline_does_not_match_a_glob_that_ends_otherwise(
        server: Harness, workspace: Path) -> None:
    # A regex's "$" also matches before a last newline: "*.go" took "b.go\n", a different file.
    for rel in ("a.go", "b.go\n", "sub/c.go\n", "sub/d.go"):
        (workspace / rel).parent.mkdir(parents=True, exist_ok=True)
        (workspace / rel).write_text("TODO\n")
    for pattern, expected in (("*.go", ["a.go"]), ("**/*.go", ["a.go", "sub/d.go"]), ("sub/*.go", ["sub/d.go"]),
                              ("{a,b}.go", ["a.go"])):
        assert paths(await server.ok("glob", root="workspace", pattern=pattern)) == expected, pattern
    for glob_filter, expected in (("*.go", ["a.go", "sub/d.go"]), ("sub/*.go", ["sub/d.go"])):
        got = await server.ok("grep", root="workspace", pattern="TODO", glob_filter=glob_filter)
        assert sorted(m["file"] for m in got["matches"]) == expected, glob_filter
    # A glob that does take a newline still finds it.
    assert paths(await server.ok("glob", root="workspace", pattern="b.go?")) == ["b.go\n"]


@pytest.mark.parametrize("name", ["*.go", "?.go", "*", ".*", "a*", "*.go*", "e.go"])
async def test_doublestar_name_globs_match_as_path_globs_do(server: Harness, workspace: Path, name: str) -> None:
    # "**/<name>" is decided by the name alone; "{**/<name>,none}" (braces) still goes through the path regex.
    # Both must find the same entries: hidden ones, folders, links, dotted and newline names, at every depth.
    for rel in ("a.go", ".h/e.go", "x/y/.go", "x/b.go", "x/y/z/c.gox", "dir.go/f.txt", "n\nl.go"):
        (workspace / rel).parent.mkdir(parents=True, exist_ok=True)
        (workspace / rel).write_text("x")
    os.symlink("a.go", workspace / "x" / "l.go")
    by_name = await server.ok("glob", root="workspace", pattern=f"**/{name}", max_results=1000)
    by_path = await server.ok("glob", root="workspace", pattern=f"{{**/{name},none}}", max_results=1000)
    assert by_name["matches"] == by_path["matches"] and by_name["total_matches"] > 0


async def test_e2e058_type_filter(server: Harness, workspace: Path) -> None:
    (workspace / "dir").mkdir()
    (workspace / "file.txt").write_text("x")
    os.symlink("file.txt", workspace / "link")
    assert paths(await server.ok("glob", root="workspace", pattern="*", type_filter="file")) == ["file.txt"]
    assert paths(await server.ok("glob", root="workspace", pattern="*", type_filter="directory")) == ["dir"]
    links = await server.ok("glob", root="workspace", pattern="*", type_filter="symlink")
    assert links["matches"][0]["path"] == "link" and links["matches"][0]["type"] == "symlink"
    assert paths(await server.ok("glob", root="workspace", pattern="*")) == ["dir", "file.txt", "link"]
    bad = await server.err("glob", root="workspace", pattern="*", type_filter="socket")
    assert "type_filter" in bad


async def test_e2e059_glob_no_matches(server: Harness, workspace: Path) -> None:
    (workspace / "a.go").write_text("x")
    got = await server.ok("glob", root="workspace", pattern="*.xyz")
    assert got == {"matches": [], "total_matches": 0, "truncated": False, "timed_out": False}


@pytest.mark.parametrize("args", [{"pattern": "*.go", "regex": r".*\.go"}, {}])
async def test_e2e060_exactly_one_of_pattern_or_regex(server: Harness, args: dict[str, str]) -> None:
    assert await server.err("glob", root="workspace", **args) == "exactly one of pattern or regex must be provided"


async def test_e2e076_invalid_glob_regex(server: Harness) -> None:
    assert await server.err("glob", root="workspace", regex="[unclosed") == (
        "invalid regex: missing ]: [unclosed; the syntax is RE2 (no lookaround, no backreferences); "
        "to search for the text itself: \\[unclosed")


async def test_glob_max_results_max_depth_and_sorting(server: Harness, workspace: Path) -> None:
    for rel in ("b/x.txt", "a/y.txt", "a/deeper/z.txt", "c.txt"):
        (workspace / rel).parent.mkdir(parents=True, exist_ok=True)
        (workspace / rel).write_text("x")
    got = await server.ok("glob", root="workspace", pattern="**/*.txt")
    assert paths(got) == ["a/deeper/z.txt", "a/y.txt", "b/x.txt", "c.txt"]
    shallow = await server.ok("glob", root="workspace", pattern="**/*.txt", max_depth=2)
    assert paths(shallow) == ["a/y.txt", "b/x.txt", "c.txt"]
    few = await server.ok("glob", root="workspace", pattern="**", type_filter="file", max_results=2)
    assert few["total_matches"] == 2 and few["truncated"] is True
    assert await server.err("glob", root="workspace", pattern="*", path="c.txt") == "not a directory: c.txt"


async def test_glob_truncates_in_walk_order_then_sorts(server: Harness, workspace: Path) -> None:
    # The walk goes a, a/x.py, a-b.py, a.py (each folder's names sorted, its contents right after it); the paths
    # sorted are a-b.py, a.py, a/x.py. max_results keeps the first two the walk met, then sorts them.
    (workspace / "a").mkdir()
    for rel in ("a/x.py", "a-b.py", "a.py"):
        (workspace / rel).write_text("x")
    few = await server.ok("glob", root="workspace", pattern="**/*.py", max_results=2)
    assert paths(few) == ["a-b.py", "a/x.py"] and few["truncated"] is True
    assert paths(await server.ok("glob", root="workspace", pattern="**/*.py", max_results=3)) == [
        "a-b.py", "a.py", "a/x.py"]


async def test_glob_lists_symlinks_without_entering_them_and_hides_temp_names(
        server: Harness, workspace: Path, outside: Path) -> None:
    (workspace / "real").mkdir()
    (workspace / "real" / "in.py").write_text("x")
    (outside / "secret.py").write_text("x")
    os.symlink("real", workspace / "inlink")
    os.symlink(outside, workspace / "outlink")
    os.symlink("real/in.py", workspace / "file.py")
    (workspace / ".rootbound-0123456789abcdef.tmp").write_text("being written")
    (workspace / "real" / ".rootbound-fedcba9876543210.tmp.py").write_text("not ours: listed")
    got = await server.ok("glob", root="workspace", pattern="**", max_results=100)
    assert paths(got) == ["file.py", "inlink", "outlink", "real", "real/.rootbound-fedcba9876543210.tmp.py",
                          "real/in.py"]
    assert {m["path"]: m["type"] for m in got["matches"]}["inlink"] == "symlink"
    link = next(m for m in got["matches"] if m["path"] == "file.py")
    assert link["size"] == len("real/in.py")  # the link's own size, not its target's
    files = await server.ok("glob", root="workspace", pattern="**/*.py", type_filter="file", max_depth=1)
    assert paths(files) == []
    assert paths(await server.ok("glob", root="workspace", pattern="**/*.py", type_filter="file")) == [
        "real/.rootbound-fedcba9876543210.tmp.py", "real/in.py"]


async def test_glob_timeout_returns_partial_results(server: Harness, workspace: Path) -> None:
    for i in range(1500):
        (workspace / f"d{i:04}").mkdir()
        (workspace / f"d{i:04}" / "f.txt").write_text("x")
    got = await server.ok("glob", root="workspace", pattern="**", timeout_seconds=0.001, max_results=10_000)
    assert got["timed_out"] is True and got["truncated"] is False and got["total_matches"] < 3000
    full = await server.ok("glob", root="workspace", pattern="**", max_results=10_000)
    assert full["timed_out"] is False and full["total_matches"] == 3000


async def test_a_huge_glob_is_refused_at_once(server: Harness, workspace: Path) -> None:
    """Brace expansion (bracex) spent over 25 s on a 10 MB glob, holding a worker thread the whole time."""
    (workspace / "a.txt").write_text("x\n")
    huge = "{a,b}" + "c" * 1_000_000
    start = time.monotonic()
    assert await server.err("glob", root="workspace", pattern=huge) == \
        "invalid pattern: 1000005 characters is too long for a glob (at most 10000); shorten it"
    assert await server.err("grep", root="workspace", pattern="x", glob_filter=huge) == \
        "invalid glob_filter: 1000005 characters is too long for a glob (at most 10000); shorten it"
    assert time.monotonic() - start < 2
    # The longest glob accepted still works.
    longest = "*" + "{,x}" * 3 + "*" * (10_000 - 13)
    assert paths(await server.ok("glob", root="workspace", pattern=longest)) == ["a.txt"]


@pytest.mark.parametrize("shape", ["{a,b}", "{,x}", "{a,", "{", "[", "[a-z]", "**/", "{1..9}", "@(a|b)",
                                   "{a,{b,{c,d}}}"])
async def test_the_worst_globs_within_the_length_limit_answer_at_once(server: Harness, workspace: Path,
                                                                      shape: str) -> None:
    """The length limit is what keeps brace expansion cheap: the most nested or repetitive glob it lets through is
    answered (matches, or 'invalid pattern: ...') within a second, as glob and as grep's glob_filter."""
    (workspace / "a.txt").write_text("x\n")
    longest = (shape * (10_000 // len(shape) + 1))[:10_000]
    start = time.monotonic()
    for tool, key, extra in (("glob", "pattern", {}), ("grep", "glob_filter", {"pattern": "x"})):
        result = await server.call(tool, root="workspace", **{key: longest}, **extra)
        assert not result.is_error or text_of(result).startswith(f"invalid {key}: "), text_of(result)
    assert time.monotonic() - start < 2


async def test_braces_that_expand_too_far_are_an_error_not_a_crash(server: Harness) -> None:
    """`{a,b}` twenty times over is a million patterns: wcmatch refuses it, which was an internal error."""
    wide = "{a,b}" * 20
    assert await server.err("glob", root="workspace", pattern=wide) == \
        "invalid pattern: its {a,b} alternatives expand to more than 1000 patterns; use fewer"
    assert await server.err("grep", root="workspace", pattern="x", glob_filter=wide) == \
        "invalid glob_filter: its {a,b} alternatives expand to more than 1000 patterns; use fewer"
    assert await server.err("grep", root="workspace", pattern="x", glob_filter="src/" + wide) == \
        "invalid glob_filter: its {a,b} alternatives expand to more than 1000 patterns; use fewer"


# -- E2E-003: search, patch, search again -----------------------------------------------------------


async def test_e2e003_search_then_patch(server: Harness, workspace: Path) -> None:
    (workspace / "cmd").mkdir()
    (workspace / "main.go").write_text("package main\n\n// TODO: wire flags\nfunc main() {}\n")
    (workspace / "cmd" / "run.go").write_text("package cmd\n// TODO: errors\n// TODO: logging\n")
    (workspace / "notes.txt").write_text("TODO: not go\n")
    got = await server.ok("grep", root="workspace", pattern="TODO", glob_filter="*.go", context_lines=1)
    assert lines(got) == [("cmd/run.go", 2), ("cmd/run.go", 3), ("main.go", 3)]
    assert got["matches"][2]["context_before"] == [""] and got["matches"][2]["context_after"] == ["func main() {}"]
    listed = await server.ok("glob", root="workspace", pattern="**/*.go")
    assert paths(listed) == ["cmd/run.go", "main.go"]
    patch = ("--- a/main.go\n+++ b/main.go\n@@ -1,4 +1,4 @@\n package main\n \n-// TODO: wire flags\n"
             "+// flags are wired\n func main() {}\n")
    await server.ok("patch_file", root="workspace", path="main.go", patch=patch)
    again = await server.ok("grep", root="workspace", pattern="TODO", glob_filter="*.go", context_lines=1)
    assert again["total_matches"] == got["total_matches"] - 1


# -- confinement ------------------------------------------------------------------------------------


def build_escapes(workspace: Path, outside: Path) -> None:
    (workspace / "inside.txt").write_text("inside text\n")
    (workspace / "dir").mkdir()
    (workspace / "dir" / "real.txt").write_text("real text\n")
    os.symlink(outside, workspace / "abs_dir")
    os.symlink(outside / "secret.txt", workspace / "abs_file")
    os.symlink("../../outside", workspace / "dir" / "rel_dir")
    os.symlink("../../outside/secret.txt", workspace / "dir" / "rel_file")
    os.symlink("dir", workspace / "in_dir")  # in-root: listed, not descended
    os.symlink("inside.txt", workspace / "in_file")  # in-root: listed, not searched twice


async def test_nothing_outside_ever_appears(server: Harness, workspace: Path, outside: Path, resolver: str,
                                            grep_mode: str) -> None:
    build_escapes(workspace, outside)
    everything = await server.ok("grep", root="workspace", pattern="", max_results=1000)
    assert SECRET not in str(everything)
    assert sorted(m["file"] for m in everything["matches"]) == ["dir/real.txt", "inside.txt"]
    assert (await server.ok("grep", root="workspace", pattern=SECRET))["total_matches"] == 0
    listed = await server.ok("glob", root="workspace", pattern="**", max_results=1000)
    assert paths(listed) == ["abs_dir", "abs_file", "dir", "dir/real.txt", "dir/rel_dir", "dir/rel_file", "in_dir",
                             "in_file", "inside.txt"]
    assert {m["type"] for m in listed["matches"] if m["path"] not in ("dir", "dir/real.txt", "inside.txt")} == \
        {"symlink"}
    assert (await server.ok("glob", root="workspace", regex="secret"))["total_matches"] == 0
    for path in ("abs_dir", "dir/rel_dir", "abs_file", "dir/rel_file", "../outside", "dir/../../outside"):
        assert await server.err("grep", root="workspace", pattern="x", path=path) == \
            "path resolves outside root boundary"
    assert await server.err("glob", root="workspace", pattern="*", path="abs_dir") == \
        "path resolves outside root boundary"
    # A path the agent names through an in-root symlink is followed, as every file tool does.
    assert lines(await server.ok("grep", root="workspace", pattern="real", path="in_dir")) == [("in_dir/real.txt", 1)]


async def test_swapping_entries_during_searches_never_leaks(server: Harness, workspace: Path,
                                                             outside: Path, grep_mode: str) -> None:
    # Another thread keeps swapping an in-root directory and an in-root file for symlinks leading
    # outside, while grep and glob walk the tree. The walk opens each entry beneath its parent's
    # handle with O_NOFOLLOW, so a swapped-in symlink is skipped, never followed.
    (workspace / "real_d").mkdir()
    (workspace / "real_d" / "inner.txt").write_text("inner text\n")
    (workspace / "real_f").write_text("file text\n")
    os.symlink(outside, workspace / "link_d")
    os.symlink(outside / "secret.txt", workspace / "link_f")
    for i in range(20):
        (workspace / f"pad{i:02}.txt").write_text("padding text\n")
    stop = threading.Event()
    swaps = 0

    def swapper() -> None:
        nonlocal swaps
        while not stop.is_set():
            for real, link, name in (("real_d", "link_d", "d"), ("real_f", "link_f", "f")):
                os.rename(workspace / real, workspace / name)
                os.rename(workspace / name, workspace / real)
                os.rename(workspace / link, workspace / name)
                os.rename(workspace / name, workspace / link)
            swaps += 1

    thread = threading.Thread(target=swapper)
    thread.start()
    try:
        seen: set[str] = set()
        for _ in range(150):
            got = await server.ok("grep", root="workspace", pattern="text|SECRET", max_results=1000)
            assert SECRET not in str(got)
            seen.update(m["file"] for m in got["matches"])
            listed = await server.ok("glob", root="workspace", pattern="**", max_results=1000)
            assert not any("secret" in p for p in paths(listed)), paths(listed)
            seen.update(paths(listed))
    finally:
        stop.set()
        thread.join()
    assert swaps > 10
    assert "d" in seen or "f" in seen  # the walks did meet the names being swapped


# -- the helper process ------------------------------------------------------------------------------


async def test_many_batches_give_the_same_answer_both_ways(server: Harness, workspace: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    for d in range(12):
        (workspace / f"d{d:02}").mkdir()
        for f in range(40):
            (workspace / f"d{d:02}" / f"f{f:02}.txt").write_text("x\n" * (f % 3) + f"hit {d} {f}\nno\n")
    os.mkfifo(workspace / "d00" / "pipe.txt")  # never opened: a FIFO is not a file
    (workspace / "odd\udcff.txt").write_bytes(b"hit in an oddly named file\n")  # not UTF-8: shown escaped
    answers = {}
    async for mode in without_and_with_helper(server, monkeypatch):
        answers[mode] = await server.ok("grep", root="workspace", pattern="hit", max_results=10_000,
                                        context_lines=1)
        cut = await server.ok("grep", root="workspace", pattern="hit", max_results=300)
        assert cut["truncated"] is True and lines(cut) == lines(answers[mode])[:300]
    assert answers["on"] == answers["off"]
    assert answers["on"]["total_matches"] == 12 * 40 + 1
    assert answers["on"]["matches"][-1]["file"] == "odd\\xff.txt"


async def test_batches_spanning_many_small_folders_give_the_same_answer_both_ways(
        server: Harness, workspace: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A batch carries up to MAX_DIRS folders' handles: 60 folders of two files make batches of several
    # folders each, and each file must come back under its own folder, in walk order, every handle closed.
    for d in range(60):
        (workspace / f"d{d:02}" / "e").mkdir(parents=True)
        (workspace / f"d{d:02}" / "a.txt").write_text(f"hit a {d}\n")
        (workspace / f"d{d:02}" / "e" / "b.txt").write_text(f"no\nhit b {d}\n")
    answers = {}
    async for mode in without_and_with_helper(server, monkeypatch):
        answers[mode] = await server.ok("grep", root="workspace", pattern="hit", max_results=10_000)
    assert answers["on"] == answers["off"]
    assert lines(answers["on"])[:3] == [("d00/a.txt", 1), ("d00/e/b.txt", 2), ("d01/a.txt", 1)]
    assert [m["line_content"] for m in answers["on"]["matches"]][-1] == "hit b 59"
    assert answers["on"]["total_matches"] == 120


async def test_helper_dying_mid_search_loses_nothing(server: Harness, workspace: Path, grep_mode: str,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    for i in range(400):
        (workspace / f"f{i:03}.txt").write_text(f"hit {i}\n")
    expected = await server.ok("grep", root="workspace", pattern="hit", max_results=10_000)
    real_replies = fanout.Helper.replies

    def dying_replies(self: Helper, wait: float) -> Any:
        self._proc.kill()
        self._proc.wait()
        return real_replies(self, 1.0)

    monkeypatch.setattr(fanout.Helper, "replies", dying_replies)
    got = await server.ok("grep", root="workspace", pattern="hit", max_results=10_000)
    assert got == expected and got["total_matches"] == 400


async def test_a_call_finding_the_helper_dead_leaves_it_to_the_call_using_it(server: Harness, workspace: Path,
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """Seen under load (bench/soak.py's load-http pass, 1 call in 20,000): a grep found the shared helper dead and
    closed it, shared memory included, while another grep still held it; that grep then crashed in its clean-up
    with "ValueError: mmap closed or invalid" (an internal error instead of its answer)."""
    for i in range(400):
        (workspace / f"f{i:03}.txt").write_text(f"hit {i}\n")
    monkeypatch.delenv("ROOTBOUND_GREP_HELPER", raising=False)
    helper_ready(server)
    real_replies = fanout.Helper.replies
    others: list[Helper | None] = []

    def dying_replies(self: Helper, wait: float) -> Any:
        if not others:
            self._proc.kill()
            self._proc.wait()
            others.append(server.app.grep_helper.acquire())  # another grep meanwhile: finds it dead
        return real_replies(self, 1.0)

    monkeypatch.setattr(fanout.Helper, "replies", dying_replies)
    got = await server.ok("grep", root="workspace", pattern="hit", max_results=10_000)
    assert got["total_matches"] == 400
    assert others == [None]  # the other call went on without it (and started a new one)


async def test_the_helper_outlives_the_thread_that_started_it(server: Harness, workspace: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """PR_SET_PDEATHSIG fires when the *thread* that started a process ends: the helper, started from a grep's worker
    thread, was killed when that thread retired (anyio ends workers idle for 10 s), under load in mid-search."""
    monkeypatch.delenv("ROOTBOUND_GREP_HELPER", raising=False)
    starter = threading.Thread(target=helper_ready, args=(server,))  # its first acquire starts the helper
    starter.start()
    starter.join()
    time.sleep(0.3)  # time for a parent-death signal to land
    helper = server.app.grep_helper.acquire()
    assert helper is not None, "the helper died with the thread that started it"
    helper.release()


async def test_cancelled_call_stops_its_search(big: tuple[Harness, Path], grep_mode: str) -> None:
    server, workspace = big
    sparse(workspace / "huge.txt", 1 << 40, {0: b"match at the start\n" + TEXT_START})
    with anyio.move_on_after(0.5):
        await server.call("grep", root="workspace", pattern="zzz", timeout_seconds=300)
    start = time.monotonic()
    # The search behind the cancelled call stops within a block or two: the helper is free again.
    if grep_mode == "helper":
        while (helper := server.app.grep_helper.acquire()) is None:
            assert time.monotonic() - start < 5, "the cancelled search kept the helper busy"
            await anyio.sleep(0.02)
        helper.release()
    got = await server.ok("grep", root="workspace", pattern="match", timeout_seconds=1)
    assert lines(got) == [("huge.txt", 1)]


async def test_output_budget_truncates(server: Harness, workspace: Path, grep_mode: str,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    from rootbound.grep import contents as search

    monkeypatch.setattr(search, "OUTPUT_BUDGET", 50_000)
    for i in range(100):
        (workspace / f"f{i:02}.txt").write_text(("w" * 900 + "\n") * 3 + "hit " + "z" * 900 + "\n")
    got = await server.ok("grep", root="workspace", pattern="hit", context_lines=3, max_results=1000)
    assert got["truncated"] is True and 0 < got["total_matches"] < 100
    assert [m["file"] for m in got["matches"]] == [f"f{i:02}.txt" for i in range(got["total_matches"])]


# -- searches never leave the root, and stay bounded ----------------------------------------------------


async def test_search_never_leaves_the_root(server: Harness, workspace: Path, outside: Path, tmp_path: Path,
                                            resolver: str) -> None:
    (workspace / "out").symlink_to("../outside")
    (workspace / "f.txt").write_text("inside\n")
    for path in ("out", "../outside", "out/secret.txt", "/../outside"):
        text = await server.err("grep", root="workspace", pattern="SECRET", path=path)
        assert "outside root boundary" in text
        no_host_path(text, tmp_path)
        assert "outside root boundary" in await server.err("glob", root="workspace", pattern="*", path=path)
    for glob_filter in ("../outside/*", f"{outside}/*", "**/../../outside/*", "../*"):
        got = await server.ok("grep", root="workspace", pattern="SECRET", glob_filter=glob_filter)
        assert got["matches"] == []
    for pattern in ("../**", "../outside/*", f"{outside}/**", "**/../**"):
        got = await server.ok("glob", root="workspace", pattern=pattern)
        assert all(not m["path"].startswith("..") for m in got["matches"])
    got = await server.ok("glob", root="workspace", regex=".*", type_filter="all")
    assert {m["path"] for m in got["matches"]} == {"out", "f.txt"}


async def test_grep_special_files_and_odd_names(server: Harness, workspace: Path, outside: Path) -> None:
    os.mkfifo(workspace / "fifo")
    sock = socket.socket(socket.AF_UNIX)
    with contextlib.suppress(OSError):  # a socket path too long for sun_path: the test goes on without it
        sock.bind(str(workspace / "sock"))
    (workspace / "new\nline.txt").write_text("needle one\n")
    (workspace / os.fsdecode(b"bad\xff.txt")).write_text("needle two\n")
    (workspace / "..txt").write_text("needle three\n")
    (workspace / "out").symlink_to("../outside")
    (workspace / "secret_link.txt").symlink_to("../outside/secret.txt")
    for n in range(300):  # several batches: the helper process takes some
        (workspace / f"f{n:03}.txt").write_text("needle\n" if n % 3 == 0 else "hay\n")
    got = await server.ok("grep", root="workspace", pattern="needle|SECRET", max_results=1000)
    files = [m["file"] for m in got["matches"]]
    assert all("SECRET" not in m["line_content"] for m in got["matches"])
    assert "..txt" in files and len(files) == len(set(files)) == 103
    assert "not a regular file" in await server.err("grep", root="workspace", pattern="x", path="fifo")
    sock.close()


async def test_grep_deep_tree_and_regex_blowup(server: Harness, workspace: Path) -> None:
    p = workspace
    for _ in range(300):
        p = p / "d"
        p.mkdir()
    (p / "bottom.txt").write_text("needle\n")
    got = await server.ok("grep", root="workspace", pattern="needle")
    assert got["matches"] == []  # below the walk's depth cap: skipped, not a crash
    (workspace / "long.txt").write_text("a" * 200_000 + "\n")
    got = await server.ok("grep", root="workspace", pattern="(a*)*b|(a|aa)+c|(x+x+)+y", max_depth=1)
    assert got["matches"] == [] and not got["timed_out"]
    got = await server.ok("glob", root="workspace", pattern="*a*a*a*a*a*a*a*a*a*a*a*a*c", max_depth=1)
    assert got["matches"] == []


async def test_limits_are_bounded(server: Harness) -> None:
    for bad in ({"max_results": 10**9}, {"context_lines": 10**6}):
        assert "invalid arguments" in await server.err("grep", root="workspace", pattern="x", **bad)


async def test_greps_survive_the_helper_closing_and_their_own_cancellation(server: Harness, workspace: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """The helper is closed (the App shutting down) and calls are cancelled while batches are in flight, round after
    round: every grep answers in full, or is cancelled (with nothing, or what it found so far, marked timed_out);
    none ends in an internal error such as "ValueError: mmap closed or invalid" (closing the helper's shared memory
    under a call still reading it)."""
    for i in range(2000):
        (workspace / f"f{i:04}.txt").write_text(f"hit {i}\n" + "filler line\n" * 50)
    monkeypatch.delenv("ROOTBOUND_GREP_HELPER", raising=False)
    errors: list[str] = []
    answers: list[tuple[int, bool]] = []

    async def grep(cancel_after: float) -> None:
        with anyio.move_on_after(cancel_after):
            result = await server.call("grep", root="workspace", pattern="hit", max_results=10_000)
            if result.is_error:
                errors.append(text_of(result))
            else:
                got = result.structured_content or {}
                answers.append((got["total_matches"], got["timed_out"]))

    for round_ in range(15):
        helper_ready(server)
        async with anyio.create_task_group() as tg:
            for k in range(3):
                tg.start_soon(grep, 0.005 * (round_ % 5 + k) if k else 60.0)
            await anyio.sleep(0.002 * (round_ % 7))
            old, server.app.grep_helper = server.app.grep_helper, SharedHelper()
            await anyio.to_thread.run_sync(old.close)
    assert not errors
    assert sum(1 for total, _ in answers if total == 2000) >= 15  # each round's uncancelled call, at least
    assert all(total == 2000 or timed_out for total, timed_out in answers), answers


async def test_grep_and_glob_results_reach_the_client_as_made(server: Harness, workspace: Path) -> None:
    # Both results are PlainResults: their rows go out as the engine built them (no model_dump), so the client must
    # see exactly what the tool made, context left out where empty, on both sides.
    (workspace / "a.py").write_text("one\nneedle\nthree\n")
    (workspace / "b.py").write_text("needle\n")
    got = await same_over_the_wire(server, "grep", root="workspace", pattern="needle", context_lines=1)
    assert got["structuredContent"]["matches"] == [
        {"file": "a.py", "line_number": 2, "line_content": "needle", "context_before": ["one"],
         "context_after": ["three"]},
        {"file": "b.py", "line_number": 1, "line_content": "needle"}]
    globbed = await same_over_the_wire(server, "glob", root="workspace", pattern="*.py")
    assert [m["path"] for m in globbed["structuredContent"]["matches"]] == ["a.py", "b.py"]
