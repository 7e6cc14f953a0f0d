"""The read-only tools over the real protocol: seed 003 §9 cases and the edge cases around them."""

from __future__ import annotations

import base64
import grp
import hashlib
import os
import pwd
import socket
import stat
import tracemalloc
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.conftest import Harness, MakeServer

pytestmark = pytest.mark.anyio

READ_TOOLS = ("list_folder", "read_file", "stat_file", "hash_file", "permissions_file")


def content_bytes(result: dict[str, Any]) -> bytes:
    """What read_file returned, as the bytes of the file."""
    if result["encoding"] == "base64":
        return base64.b64decode(result["content"])
    assert result["encoding"] == "utf-8"
    return str(result["content"]).encode("utf-8")


def parse_iso(text: str) -> datetime:
    assert text.endswith("Z"), text
    return datetime.fromisoformat(text.removesuffix("Z") + "+00:00")


# -- list_roots --------------------------------------------------------------------------------


async def test_list_roots_returns_configured_roots(make_server: MakeServer, tmp_path: Path) -> None:
    """E2E-061."""
    h = await make_server({
        "workspace": tmp_path / "ws",
        "config": (tmp_path / "cfg", ["list_folder", "read_file"]),
        "logs": (tmp_path / "logs", ["read_file"]),
    })
    got = await h.ok("list_roots")
    assert [r["name"] for r in got["roots"]] == ["workspace", "config", "logs"]
    by_name = {r["name"]: r["allowed_tools"] for r in got["roots"]}
    assert by_name["config"] == ["list_folder", "read_file"]
    assert by_name["logs"] == ["read_file"]
    assert {"list_folder", "read_file", "write_file", "grep", "glob"} <= set(by_name["workspace"])


async def test_list_roots_does_not_expose_host_paths(make_server: MakeServer, tmp_path: Path) -> None:
    """E2E-062: neither the structured result nor the text block mentions where a root lives."""
    h = await make_server({"workspace": tmp_path / "data" / "workspace"})
    result = await h.call("list_roots")
    text = result.content[0].text  # type: ignore[union-attr]
    assert "workspace" in text
    for leak in (str(tmp_path), "/data/", "/tmp"):
        assert leak not in text
        assert leak not in repr(result.structured_content)


# -- list_folder -------------------------------------------------------------------------------


async def test_list_folder_happy_path(server: Harness, workspace: Path) -> None:
    """E2E-004: sorted entries, each with name, type, size and an ISO 8601 modified_at."""
    (workspace / "b.txt").write_text("bb")
    (workspace / "a.txt").write_text("a")
    (workspace / "sub").mkdir()
    os.utime(workspace / "a.txt", (1_700_000_000, 1_700_000_000))
    got = await server.ok("list_folder", root="workspace", path=".")
    assert [(e["name"], e["type"]) for e in got["entries"]] == [
        ("a.txt", "file"), ("b.txt", "file"), ("sub", "directory")]
    assert got["count"] == 3
    assert got["path"] == "."
    for entry in got["entries"]:
        assert {"name", "type", "size", "modified_at"} <= set(entry)
    a = got["entries"][0]
    assert a["size"] == 1
    assert parse_iso(a["modified_at"]) == datetime.fromtimestamp(1_700_000_000, UTC)


@pytest.mark.parametrize("spelling", ["", ".", "/", "./", "sub/.."])
async def test_list_folder_root_spellings(server: Harness, workspace: Path, spelling: str) -> None:
    (workspace / "sub").mkdir()
    (workspace / "x.txt").write_text("x")
    got = await server.ok("list_folder", root="workspace", path=spelling)
    assert [e["name"] for e in got["entries"]] == ["sub", "x.txt"]


async def test_list_folder_empty_directory(server: Harness, workspace: Path) -> None:
    """E2E-005."""
    (workspace / "empty").mkdir()
    got = await server.ok("list_folder", root="workspace", path="empty")
    assert got == {"path": "empty", "entries": [], "count": 0, "total": 0, "truncated": False}


async def test_list_folder_on_a_file_is_an_error(server: Harness, workspace: Path) -> None:
    """E2E-006."""
    (workspace / "data.txt").write_text("data")
    message = await server.err("list_folder", root="workspace", path="data.txt")
    assert "not a directory" in message
    assert "data.txt" in message


async def test_list_folder_missing_directory(server: Harness) -> None:
    assert await server.err("list_folder", root="workspace", path="nope") == "file not found: nope"


async def test_list_folder_symlink_target_types(server: Harness, workspace: Path, outside: Path) -> None:
    (workspace / "real.txt").write_text("r")
    (workspace / "dir").mkdir()
    (workspace / "to_file").symlink_to("real.txt")
    (workspace / "to_dir").symlink_to("dir")
    (workspace / "to_outside").symlink_to(outside / "secret.txt")
    (workspace / "dangling").symlink_to("missing")
    got = await server.ok("list_folder", root="workspace", path="")
    types = {e["name"]: (e["type"], e.get("target_type")) for e in got["entries"]}
    assert types == {
        "dangling": ("symlink", "external"),
        "dir": ("directory", None),
        "real.txt": ("file", None),
        "to_dir": ("symlink", "directory"),
        "to_file": ("symlink", "file"),
        "to_outside": ("symlink", "external"),
    }


async def test_list_folder_large_directory(server: Harness, workspace: Path) -> None:
    """E2E-077: all 1500 entries come back, in pages of 1,000 by default (SPEC v2; speed is measured in
    bench/list_folder.py)."""
    big = workspace / "big"
    big.mkdir()
    for i in range(1500):
        (big / f"f{i:04d}.txt").touch()
    got = await server.ok("list_folder", root="workspace", path="big")
    assert (got["count"], got["total"], got["truncated"]) == (1000, 1500, True)
    rest = await server.ok("list_folder", root="workspace", path="big", offset=got["count"])
    assert (rest["count"], rest["total"], rest["truncated"]) == (500, 1500, False)
    assert [e["name"] for e in got["entries"] + rest["entries"]] == [f"f{i:04d}.txt" for i in range(1500)]


async def test_list_folder_shows_special_files_and_odd_names(server: Harness, workspace: Path) -> None:
    os.mkfifo(workspace / "pipe")
    os.close(os.open(os.fsencode(workspace) + b"/bad\xffname", os.O_CREAT | os.O_WRONLY, 0o644))
    got = await server.ok("list_folder", root="workspace", path="")
    types = {e["name"]: e["type"] for e in got["entries"]}
    assert types["pipe"] == "fifo"
    assert types["bad\\xffname"] == "file"  # not UTF-8: shown escaped instead of breaking the JSON


# -- read_file ---------------------------------------------------------------------------------


async def test_read_full_file_under_threshold(server: Harness, workspace: Path) -> None:
    """E2E-007."""
    text = "0123456789" * 9 + "abcdefghi\n"
    (workspace / "small.txt").write_text(text)
    got = await server.ok("read_file", root="workspace", path="small.txt")
    assert got["content"] == text
    assert got["size"] == 100
    assert got["encoding"] == "utf-8"
    assert got["truncated"] is False
    assert got["binary"] is False
    assert got["lines_total"] == 1


async def test_read_full_file_over_threshold(make_server: MakeServer, workspace: Path) -> None:
    """E2E-008: the error names the size and the limit, and points at partial reads."""
    h = await make_server(max_full_read_size=100)
    (workspace / "large.txt").write_text("x" * 500)
    message = await h.err("read_file", root="workspace", path="large.txt")
    assert "500" in message
    assert "100" in message
    assert "offset" in message and "limit" in message


async def test_read_file_exactly_at_threshold(make_server: MakeServer, workspace: Path) -> None:
    h = await make_server(max_full_read_size=100)
    (workspace / "edge.txt").write_text("y" * 100)
    got = await h.ok("read_file", root="workspace", path="edge.txt")
    assert got["content"] == "y" * 100


async def test_read_byte_range(server: Harness, workspace: Path) -> None:
    """E2E-009: exactly bytes 10-29."""
    data = bytes(range(256))
    (workspace / "data.bin").write_bytes(data)
    got = await server.ok("read_file", root="workspace", path="data.bin", offset_bytes=10, limit_bytes=20)
    assert content_bytes(got) == data[10:30]
    assert got["size"] == 256
    assert got["truncated"] is True


async def test_read_byte_range_of_non_utf8_is_base64(server: Harness, workspace: Path) -> None:
    data = bytes(range(256))
    (workspace / "data.bin").write_bytes(data)
    got = await server.ok("read_file", root="workspace", path="data.bin", offset_bytes=200, limit_bytes=56)
    assert got["encoding"] == "base64"
    assert base64.b64decode(got["content"]) == data[200:]
    assert got["truncated"] is False


async def test_read_bytes_offset_only_reads_to_end(server: Harness, workspace: Path) -> None:
    (workspace / "f.txt").write_text("hello world")
    got = await server.ok("read_file", root="workspace", path="f.txt", offset_bytes=6)
    assert got["content"] == "world"
    assert got["truncated"] is False


async def test_read_bytes_past_end_is_empty(server: Harness, workspace: Path) -> None:
    (workspace / "f.txt").write_text("hello")
    got = await server.ok("read_file", root="workspace", path="f.txt", offset_bytes=1000, limit_bytes=10)
    assert got["content"] == ""
    assert got["truncated"] is False
    assert got["size"] == 5


async def test_read_bytes_limit_is_capped(make_server: MakeServer, workspace: Path) -> None:
    h = await make_server(max_full_read_size=100)
    (workspace / "f.txt").write_text("z" * 300)
    got = await h.ok("read_file", root="workspace", path="f.txt", offset_bytes=0, limit_bytes=1000)
    assert got["content"] == "z" * 100
    assert got["truncated"] is True
    assert "max_full_read_size" in got["note"]


async def test_read_line_range(server: Harness, workspace: Path) -> None:
    """E2E-010: lines 50-54."""
    (workspace / "lines.txt").write_text("".join(f"line {i}\n" for i in range(1, 101)))
    got = await server.ok("read_file", root="workspace", path="lines.txt", offset_lines=50, limit_lines=5)
    assert got["content"] == "line 50\nline 51\nline 52\nline 53\nline 54\n"
    assert got["lines_total"] == 100
    assert got["truncated"] is True


async def test_read_last_lines_without_trailing_newline(server: Harness, workspace: Path) -> None:
    (workspace / "f.txt").write_text("one\ntwo\nthree")
    got = await server.ok("read_file", root="workspace", path="f.txt", offset_lines=2)
    assert got["content"] == "two\nthree"
    assert got["lines_total"] == 3
    assert got["truncated"] is False
    got = await server.ok("read_file", root="workspace", path="f.txt", offset_lines=3, limit_lines=1)
    assert got["content"] == "three"
    assert got["truncated"] is False


async def test_mixed_byte_and_line_parameters_rejected(server: Harness, workspace: Path) -> None:
    """E2E-011."""
    (workspace / "file.txt").write_text("x\n")
    message = await server.err("read_file", root="workspace", path="file.txt", offset_bytes=0, offset_lines=1)
    assert "mutually exclusive" in message


async def test_line_offset_beyond_end(server: Harness, workspace: Path) -> None:
    """E2E-012: empty content and the real line count."""
    (workspace / "short.txt").write_text("".join(f"l{i}\n" for i in range(5)))
    got = await server.ok("read_file", root="workspace", path="short.txt", offset_lines=100, limit_lines=10)
    assert got["content"] == ""
    assert got["lines_total"] == 5
    assert got["truncated"] is False


async def test_binary_detection(server: Harness, workspace: Path) -> None:
    """E2E-013."""
    (workspace / "image.bin").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(200))
    got = await server.ok("read_file", root="workspace", path="image.bin", offset_bytes=0, limit_bytes=100)
    assert got["binary"] is True
    assert content_bytes(got) == (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(200))[:100]


async def test_nul_after_first_8k_is_not_binary(server: Harness, workspace: Path) -> None:
    (workspace / "late.txt").write_bytes(b"a" * 9000 + b"\x00")
    got = await server.ok("read_file", root="workspace", path="late.txt", offset_bytes=0, limit_bytes=10)
    assert got["binary"] is False


async def test_non_utf8_full_read_is_base64(server: Harness, workspace: Path) -> None:
    data = "café\n".encode("latin-1")
    (workspace / "latin1.txt").write_bytes(data)
    got = await server.ok("read_file", root="workspace", path="latin1.txt")
    assert got["encoding"] == "base64"
    assert base64.b64decode(got["content"]) == data
    assert got["binary"] is False


async def test_utf8_text_stays_text(server: Harness, workspace: Path) -> None:
    (workspace / "u.txt").write_text("naïve — 日本語\n", encoding="utf-8")
    got = await server.ok("read_file", root="workspace", path="u.txt")
    assert got["encoding"] == "utf-8"
    assert got["content"] == "naïve — 日本語\n"


async def test_huge_single_line_with_line_reads(make_server: MakeServer, workspace: Path) -> None:
    """A line longer than the cap is not returned half-way; the lines after it are still reachable."""
    h = await make_server(max_full_read_size=100)
    (workspace / "long.txt").write_text("x" * 5000 + "\nsecond\nthird\n")
    got = await h.ok("read_file", root="workspace", path="long.txt", offset_lines=1, limit_lines=1)
    assert got["content"] == ""
    assert got["truncated"] is True
    assert "max_full_read_size" in got["note"]
    got = await h.ok("read_file", root="workspace", path="long.txt", offset_lines=2)
    assert got["content"] == "second\nthird\n"
    assert got["lines_total"] == 3
    assert got["truncated"] is False


async def test_line_reads_stop_at_the_cap_on_a_line_boundary(make_server: MakeServer, workspace: Path) -> None:
    h = await make_server(max_full_read_size=100)
    (workspace / "many.txt").write_text("".join(f"{i:09d}\n" for i in range(50)))  # 10-byte lines
    got = await h.ok("read_file", root="workspace", path="many.txt", offset_lines=1)
    assert got["content"] == "".join(f"{i:09d}\n" for i in range(10))
    assert got["truncated"] is True
    got = await h.ok("read_file", root="workspace", path="many.txt", offset_lines=41)
    assert got["content"] == "".join(f"{i:09d}\n" for i in range(40, 50))
    assert got["truncated"] is False


async def test_line_read_deep_into_a_big_file(server: Harness, workspace: Path) -> None:
    with open(workspace / "log.txt", "w") as f:
        f.writelines(f"entry {i}\n" for i in range(1, 300_001))
    got = await server.ok("read_file", root="workspace", path="log.txt", offset_lines=299_998, limit_lines=5)
    assert got["content"] == "entry 299998\nentry 299999\nentry 300000\n"
    assert got["lines_total"] == 300_000
    assert got["truncated"] is False


async def test_read_empty_file(server: Harness, workspace: Path) -> None:
    (workspace / "empty").touch()
    got = await server.ok("read_file", root="workspace", path="empty")
    assert (got["content"], got["size"], got["lines_total"], got["truncated"]) == ("", 0, 0, False)


async def test_read_directory_is_an_error(server: Harness, workspace: Path) -> None:
    (workspace / "d").mkdir()
    assert "directory" in await server.err("read_file", root="workspace", path="d")


async def test_read_missing_file(server: Harness) -> None:
    assert await server.err("read_file", root="workspace", path="no/such.txt") == "file not found: no/such.txt"


async def test_read_through_a_file_as_directory(server: Harness, workspace: Path) -> None:
    (workspace / "f.txt").write_text("x")
    assert "not a directory" in await server.err("read_file", root="workspace", path="f.txt/inner")


async def test_fifo_is_refused_at_once(server: Harness, workspace: Path) -> None:
    """Opening a FIFO for reading would block forever: every reading tool refuses it instead."""
    os.mkfifo(workspace / "pipe")
    with anyio.fail_after(20):  # a hang guard, not a speed assertion
        for tool in ("read_file", "hash_file"):
            message = await server.err(tool, root="workspace", path="pipe")
            assert message == "not a regular file: pipe is a fifo"
        assert "not a directory" in await server.err("list_folder", root="workspace", path="pipe")
        assert "not a directory" in await server.err("read_file", root="workspace", path="pipe/x")
        got = await server.ok("stat_file", root="workspace", path="pipe")
        assert got["type"] == "fifo"


async def test_socket_is_refused(server: Harness, workspace: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(workspace)  # a relative bind keeps the socket path under the 108-byte limit
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind("sock")
        with anyio.fail_after(20):
            for tool in ("read_file", "hash_file"):
                assert "not a regular file: sock" in await server.err(tool, root="workspace", path="sock")


async def test_device_is_refused(server: Harness, workspace: Path) -> None:
    try:
        os.mknod(workspace / "null", stat.S_IFCHR | 0o600, os.makedev(1, 3))
    except PermissionError:
        pytest.skip("creating a device node needs CAP_MKNOD")
    with anyio.fail_after(20):
        message = await server.err("read_file", root="workspace", path="null")
    assert "not a regular file: null" in message


# -- stat_file ---------------------------------------------------------------------------------


async def test_stat_file_metadata(server: Harness, workspace: Path) -> None:
    """E2E-032."""
    (workspace / "data.json").write_text('{"a": 1}')
    os.utime(workspace / "data.json", (1_700_000_000.5, 1_700_000_000.5))
    got = await server.ok("stat_file", root="workspace", path="data.json")
    assert got["name"] == "data.json"
    assert got["path"] == "data.json"
    assert got["size"] == 8
    assert got["is_directory"] is False
    assert got["is_symlink"] is False
    assert parse_iso(got["modified_at"]) == datetime.fromtimestamp(1_700_000_000.5, UTC)


async def test_stat_directory(server: Harness, workspace: Path) -> None:
    """E2E-033."""
    (workspace / "subdir").mkdir()
    got = await server.ok("stat_file", root="workspace", path="subdir")
    assert got["is_directory"] is True
    assert got["type"] == "directory"


async def test_stat_symlink(server: Harness, workspace: Path) -> None:
    """E2E-034: the link itself, plus what it leads to."""
    (workspace / "target.txt").write_text("twelve bytes")
    (workspace / "link").symlink_to("target.txt")
    got = await server.ok("stat_file", root="workspace", path="link")
    assert got["is_symlink"] is True
    assert got["is_directory"] is False
    assert got["target"]["type"] == "file"
    assert got["target"]["size"] == 12


async def test_stat_the_root_and_dotdot(server: Harness, workspace: Path) -> None:
    (workspace / "sub").mkdir()
    (workspace / "sub" / "inner").mkdir()
    assert (await server.ok("stat_file", root="workspace", path=""))["is_directory"] is True
    got = await server.ok("stat_file", root="workspace", path="sub/..")
    assert got["is_directory"] is True
    got = await server.ok("stat_file", root="workspace", path="sub/inner/..")
    assert got["is_directory"] is True


# -- hash_file ---------------------------------------------------------------------------------


async def test_hash_sha256(server: Harness, workspace: Path) -> None:
    """E2E-035."""
    (workspace / "known.txt").write_text("test content\n")
    got = await server.ok("hash_file", root="workspace", path="known.txt", algorithm="sha256")
    assert got == {"path": "known.txt", "algorithm": "sha256", "size": 13,
                   "hash": "a1fff0ffefb9eace7230c24e50731f0a91c62f9cefdfe77121c2f607125dffae"}


async def test_hash_defaults_to_sha256(server: Harness, workspace: Path) -> None:
    (workspace / "known.txt").write_text("test content\n")
    got = await server.ok("hash_file", root="workspace", path="known.txt")
    assert got["algorithm"] == "sha256"


async def test_hash_md5_and_sha1(server: Harness, workspace: Path) -> None:
    """E2E-036."""
    (workspace / "known.txt").write_text("test content\n")
    md5 = await server.ok("hash_file", root="workspace", path="known.txt", algorithm="md5")
    sha1 = await server.ok("hash_file", root="workspace", path="known.txt", algorithm="sha1")
    assert md5["hash"] == "d6eb32081c822ed572b70567826d9d9d"
    assert sha1["hash"] == "4fe2b8dd12cd9cd6a413ea960cd8c09c25f19527"


@pytest.mark.parametrize("algorithm", ["md4", "sha512"])
async def test_hash_unsupported_algorithm(server: Harness, workspace: Path, algorithm: str) -> None:
    """E2E-037 and E2E-075."""
    (workspace / "any.txt").write_text("x")
    message = await server.err("hash_file", root="workspace", path="any.txt", algorithm=algorithm)
    assert message == f"unsupported hash algorithm: {algorithm}; supported: md5, sha1, sha256"


async def test_hash_directory_is_an_error(server: Harness, workspace: Path) -> None:
    """E2E-038."""
    (workspace / "subdir").mkdir()
    message = await server.err("hash_file", root="workspace", path="subdir", algorithm="sha256")
    assert "directory" in message


async def test_hash_large_file_streams(server: Harness, workspace: Path) -> None:
    """E2E-078: 50 MB hashes correctly while the server allocates far less than the file's size."""
    block = os.urandom(1024 * 1024)
    expected = hashlib.sha256()
    with open(workspace / "large.bin", "wb") as f:
        for i in range(50):
            chunk = block[i:] + block[:i]
            f.write(chunk)
            expected.update(chunk)
    tracemalloc.start()
    try:
        got = await server.ok("hash_file", root="workspace", path="large.bin", algorithm="sha256")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert got["hash"] == expected.hexdigest()
    assert got["size"] == 50 * 1024 * 1024
    assert peak < 8 * 1024 * 1024, f"peak allocation {peak} bytes while hashing 50 MiB"


async def test_long_hash_does_not_hold_up_other_calls(server: Harness, workspace: Path) -> None:
    """The hash runs in a worker thread: calls made meanwhile are answered before it ends."""
    block = os.urandom(1024 * 1024)
    with open(workspace / "big.bin", "wb") as f:
        for _ in range(256):
            f.write(block)
    finished: list[str] = []

    async def hash_big() -> None:
        await server.ok("hash_file", root="workspace", path="big.bin")
        finished.append("hash")

    async with anyio.create_task_group() as tg:
        tg.start_soon(hash_big)
        await anyio.sleep(0.01)  # let the hash start
        for _ in range(3):
            await server.ok("list_roots")
        finished.append("list_roots x3")
    assert finished == ["list_roots x3", "hash"]


# -- permissions_file --------------------------------------------------------------------------


async def test_permissions_of_a_file(server: Harness, workspace: Path) -> None:
    """E2E-039."""
    script = workspace / "script.sh"
    script.write_text("#!/bin/sh\n")
    script.chmod(0o755)
    got = await server.ok("permissions_file", root="workspace", path="script.sh")
    st = script.stat()
    assert got["mode"] == "0755"
    assert got["mode_string"] == "-rwxr-xr-x"
    assert got["owner"] == pwd.getpwuid(st.st_uid).pw_name
    assert got["group"] == grp.getgrgid(st.st_gid).gr_name


async def test_permissions_of_a_directory(server: Harness, workspace: Path) -> None:
    """E2E-040."""
    (workspace / "subdir").mkdir()
    (workspace / "subdir").chmod(0o755)
    got = await server.ok("permissions_file", root="workspace", path="subdir")
    assert got["mode"] == "0755"
    assert got["mode_string"] == "drwxr-xr-x"


async def test_permissions_special_bits(server: Harness, workspace: Path) -> None:
    (workspace / "tmp").mkdir()
    (workspace / "tmp").chmod(0o1777)
    got = await server.ok("permissions_file", root="workspace", path="tmp")
    assert (got["mode"], got["mode_string"]) == ("1777", "drwxrwxrwt")


# -- in-root symlinks, errors shared by every tool ----------------------------------------------


async def test_symlink_within_root_is_followed(server: Harness, workspace: Path) -> None:
    """E2E-065."""
    (workspace / "real.txt").write_text("real content\n")
    (workspace / "link.txt").symlink_to("real.txt")
    (workspace / "sub").mkdir()
    (workspace / "sub" / "up.txt").symlink_to("../real.txt")
    for path in ("link.txt", "sub/up.txt"):
        got = await server.ok("read_file", root="workspace", path=path)
        assert got["content"] == "real content\n"


@pytest.mark.parametrize("tool", READ_TOOLS)
async def test_unknown_root(make_server: MakeServer, tmp_path: Path, tool: str) -> None:
    """E2E-072."""
    h = await make_server({"workspace": tmp_path / "ws", "logs": tmp_path / "logs"})
    assert await h.err(tool, root="nonexistent", path="x") == "unknown root: nonexistent; roots: workspace, logs"


async def test_missing_required_parameters(server: Harness) -> None:
    """E2E-073 (root is optional since issue 15: omitted, it is the project root)."""
    message = await server.err("read_file", path="a.txt")
    assert message == "file not found: a.txt"
    message = await server.err("read_file", root="workspace")
    assert "path is required" in message


async def test_unknown_parameter_is_refused(server: Harness, workspace: Path) -> None:
    (workspace / "a.txt").write_text("a")
    message = await server.err("read_file", root="workspace", path="a.txt", encoding="latin-1")
    assert "unknown parameter 'encoding'" in message


async def test_negative_offsets_are_refused(server: Harness, workspace: Path) -> None:
    (workspace / "a.txt").write_text("a")
    assert "offset_bytes" in await server.err("read_file", root="workspace", path="a.txt", offset_bytes=-1)
    assert "offset_lines" in await server.err("read_file", root="workspace", path="a.txt", offset_lines=0)


async def test_read_tools_are_listed_with_honest_annotations(server: Harness) -> None:
    tools = {t.name: t for t in (await server.client.list_tools()).tools}
    for name in ("list_roots", *READ_TOOLS):
        tool = tools[name]
        assert tool.annotations is not None
        assert tool.annotations.read_only_hint is True
        assert tool.annotations.destructive_hint is not True  # (issue 15: omitted, meaningless when read-only)
        assert tool.description and len(tool.description) > 60
        assert tool.output_schema is not None
        assert tool.input_schema.get("additionalProperties") is False
    assert set(tools["read_file"].input_schema["required"]) == {"path"}  # root is optional (issue 15)


async def test_a_command_tool_on_a_server_without_commands_says_how_to_enable_them(server: Harness) -> None:
    error = await server.err("execute_command", command="ls")
    assert error.startswith("unknown tool: execute_command; known tools: list_roots, ")
    assert "--allow-commands LIST or commands.allowed" in error
    assert "--allow-commands" not in await server.err("no_such_tool")
