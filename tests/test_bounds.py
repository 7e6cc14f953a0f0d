"""Long file operations are bounded: sparse files stay sparse, every call has a time bound and honours
cancellation, heavy calls cannot starve cheap ones, queued commands hold no descriptors, and list_folder
returns pages (issue 11, item 9)."""

from __future__ import annotations

import os
import resource
import tempfile
import time
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import anyio
import pytest

from rootbound.fs import content
from tests.conftest import CommandServers, Harness, MakeServer, text_of

pytestmark = pytest.mark.anyio

GiB = 1 << 30


def make_sparse(path: Path, size: int = GiB) -> dict[int, bytes]:
    """A `size`-byte file that is almost all holes, ending in one; returns the data it holds, by offset."""
    pieces = {0: b"start", size // 2: b"middle", size - 4096 * 8: b"near the end"}
    with open(path, "wb") as f:
        for offset, data in pieces.items():
            f.seek(offset)
            f.write(data)
        f.truncate(size)
    assert os.stat(path).st_blocks * 512 < 1 << 20, "this filesystem does not keep holes"
    return pieces


def assert_same_sparse(path: Path, pieces: dict[int, bytes], size: int = GiB) -> None:
    st = os.stat(path)
    assert st.st_size == size
    assert st.st_blocks * 512 < 1 << 20, f"the copy allocated {st.st_blocks * 512} bytes"
    with open(path, "rb") as f:
        for offset, data in pieces.items():
            f.seek(offset)
            assert f.read(len(data)) == data
        f.seek(size // 4)
        assert f.read(4096) == bytes(4096)


async def test_copy_keeps_holes(server: Harness, workspace: Path) -> None:
    pieces = make_sparse(workspace / "sparse.bin")
    got = await server.ok("copy", source_root="workspace", source_path="sparse.bin", dest_root="workspace",
                          dest_path="copy.bin")
    assert got["size"] == GiB
    assert_same_sparse(workspace / "copy.bin", pieces)
    # In a folder copy too.
    (workspace / "dir").mkdir()
    os.rename(workspace / "copy.bin", workspace / "dir" / "inner.bin")
    await server.ok("copy", source_root="workspace", source_path="dir", dest_root="workspace", dest_path="dir2")
    assert_same_sparse(workspace / "dir2" / "inner.bin", pieces)


async def test_a_move_across_filesystems_keeps_holes(make_server: MakeServer, tmp_path: Path) -> None:
    if not os.path.isdir("/dev/shm") or os.stat("/dev/shm").st_dev == os.stat(tmp_path).st_dev:
        pytest.skip("needs /dev/shm on another filesystem than the test's temp directory")
    with tempfile.TemporaryDirectory(dir="/dev/shm") as shm:
        pieces = make_sparse(Path(shm) / "sparse.bin")
        h = await make_server({"shm": shm, "workspace": tmp_path / "workspace"})
        got = await h.ok("move", source_root="shm", source_path="sparse.bin", dest_root="workspace",
                         dest_path="moved.bin")
        assert got["method"] == "copy"
        assert_same_sparse(tmp_path / "workspace" / "moved.bin", pieces)
        assert not (Path(shm) / "sparse.bin").exists()


@pytest.mark.parametrize("offset,count", [(0, None), (3, None), (0, 5000), (4096 * 3, 4096 * 300), (10, 0)])
def test_copy_fd_copies_exactly_the_range_asked(tmp_path: Path, offset: int, count: int | None) -> None:
    # Data, a hole, data, and a trailing hole: every kind of boundary a range can start or stop in.
    src = tmp_path / "src"
    with open(src, "wb") as f:
        f.write(os.urandom(10_000))
        f.seek(1 << 20)
        f.write(os.urandom(10_000))
        f.truncate(2 << 20)
    expected = src.read_bytes()[offset:None if count is None else offset + count]
    with open(src, "rb") as s, open(tmp_path / "dst", "wb") as d:
        d.write(b"head")  # copied to the destination's position, whatever it is
        d.flush()
        assert content.copy_fd(s.fileno(), d.fileno(), offset, count) == len(expected)
        assert os.lseek(d.fileno(), 0, os.SEEK_CUR) == 4 + len(expected)
    assert (tmp_path / "dst").read_bytes() == b"head" + expected


# -- list_folder pages -------------------------------------------------------------------------------------------


async def test_list_folder_pages_through_a_folder_in_name_order(server: Harness, workspace: Path) -> None:
    names = [f"n{i:03d}" for i in range(250)]
    for name in reversed(names):
        (workspace / name).write_text(name)
    seen: list[str] = []
    offset = 0
    while True:
        page = await server.ok("list_folder", root="workspace", path=".", limit=100, offset=offset)
        assert page["total"] == 250 and page["count"] == len(page["entries"]) <= 100
        seen += [e["name"] for e in page["entries"]]
        offset += page["count"]
        if not page["truncated"]:
            break
    assert seen == names
    assert [e["size"] for e in page["entries"]] == [4] * 50
    past = await server.ok("list_folder", root="workspace", path=".", offset=1000)
    assert (past["entries"], past["count"], past["total"], past["truncated"]) == ([], 0, 250, False)
    only_total = await server.ok("list_folder", root="workspace", path=".", limit=0)
    assert (only_total["count"], only_total["total"], only_total["truncated"]) == (0, 250, True)
    assert "limit" in await server.err("list_folder", root="workspace", path=".", limit=100_001)
    assert "offset" in await server.err("list_folder", root="workspace", path=".", offset=-1)


async def test_list_folder_of_100k_entries_returns_one_page_quickly(server: Harness, workspace: Path) -> None:
    big = workspace / "big"
    big.mkdir()
    for i in range(100_000):
        os.close(os.open(big / f"entry-{i:06d}.txt", os.O_CREAT | os.O_WRONLY, 0o644))
    took = []
    for _ in range(3):
        start = time.perf_counter()
        result = await server.call("list_folder", root="workspace", path="big")
        took.append(time.perf_counter() - start)
    got = result.structured_content
    assert got is not None
    assert (got["count"], got["total"], got["truncated"]) == (1000, 100_000, True)
    assert [e["name"] for e in got["entries"]] == [f"entry-{i:06d}.txt" for i in range(1000)]
    assert len(text_of(result)) < 200_000  # was 28 MB
    print(f"list_folder page of 1,000 from 100,000 entries: {min(took) * 1000:.0f} ms (best of 3), "
          f"{max(took) * 1000:.0f} ms worst")
    assert min(took) < 2.0
    last = await server.ok("list_folder", root="workspace", path="big", offset=99_990, limit=100)
    assert [e["name"] for e in last["entries"]] == [f"entry-{i:06d}.txt" for i in range(99_990, 100_000)]


# -- time bounds and cancellation --------------------------------------------------------------------------------


def huge_sparse(path: Path, size: int = 64 * GiB) -> None:
    """A file far too big to hash or scan in a second, that costs no disk (all one hole, no newline)."""
    with open(path, "wb") as f:
        f.truncate(size)


async def test_long_file_operations_stop_at_file_timeout(make_server: MakeServer, workspace: Path) -> None:
    huge_sparse(workspace / "big.bin")
    h = await make_server(file_timeout=1)
    for tool, args in (("hash_file", {"path": "big.bin"}),
                       ("read_file", {"path": "big.bin", "offset_lines": 2}),  # skips lines: scans it all
                       ("read_file", {"path": "big.bin", "offset_lines": 1, "limit_lines": 1})):  # counts lines
        start = time.perf_counter()
        error = await h.err(tool, root="workspace", **args)
        took = time.perf_counter() - start
        assert error.startswith(f"{tool} timed out after 1 s on big.bin"), error
        assert "file_timeout" in error
        assert took < 5, f"{tool} stopped after {took:.1f} s"

async def test_a_tree_copy_stops_at_file_timeout_and_leaves_nothing(make_server: MakeServer, workspace: Path) -> None:
    tree = workspace / "tree"
    for d in range(5):
        (tree / f"d{d}").mkdir(parents=True)
        for i in range(1000):
            os.close(os.open(tree / f"d{d}" / f"f{i}", os.O_CREAT | os.O_WRONLY, 0o644))
    h = await make_server(file_timeout=0.05)
    error = await h.err("copy", source_root="workspace", source_path="tree", dest_root="workspace", dest_path="t2")
    assert error.startswith("copy timed out after 0.05 s on tree"), error
    assert os.listdir(workspace) == ["tree"]  # not even the hidden temporary folder


async def test_heavy_calls_neither_starve_cheap_ones_nor_outlive_their_cancellation(
        make_server: MakeServer, workspace: Path) -> None:
    huge_sparse(workspace / "big.bin")
    (workspace / "small.txt").write_text("small\n")
    h = await make_server()
    cheap: dict[str, float] = {}

    async def timed(tool: str, **args: object) -> float:
        start = time.perf_counter()
        with anyio.move_on_after(30):
            await h.ok(tool, **args)
            return time.perf_counter() - start
        return float("inf")

    async with anyio.create_task_group() as tg:
        for _ in range(48):  # more than anyio's whole default pool of 40 threads
            tg.start_soon(partial(h.call, "hash_file", root="workspace", path="big.bin"))
        await anyio.sleep(2)  # every hash is running or waiting for a worker by now
        for tool, args in (("list_roots", {}), ("stat_file", {"root": "workspace", "path": "small.txt"}),
                           ("read_file", {"root": "workspace", "path": "small.txt"}),
                           ("list_folder", {"root": "workspace", "path": "."})):
            cheap[tool] = await timed(tool, **args)
        tg.cancel_scope.cancel()
    print("while 48 hash_file calls of a 64 GiB file ran or waited: " +
          ", ".join(f"{tool} {took * 1000:.0f} ms" for tool, took in cheap.items()))
    assert all(took < 2 for took in cheap.values()), cheap
    # The cancelled hashes stopped and gave their workers back: another heavy call runs at once.
    took = await timed("hash_file", root="workspace", path="small.txt")
    print(f"hash_file of a small file right after cancelling them: {took * 1000:.0f} ms")
    assert took < 2


async def test_waiting_for_a_worker_counts_against_file_timeout(make_server: MakeServer, workspace: Path) -> None:
    # A text file grep scans to its end: 64 GiB of one endless line after the first 8 KiB.
    with open(workspace / "huge.txt", "wb") as f:
        f.write(b"hello world\n" * 1000)
        f.truncate(64 * GiB)
    (workspace / "small.txt").write_text("small\n")
    h = await make_server(file_timeout=1)
    async with anyio.create_task_group() as tg:
        for _ in range(4):  # a client's whole share of heavy workers, held for up to 30 s (grep's own timeout)
            tg.start_soon(partial(h.call, "grep", root="workspace", path="huge.txt", pattern="absent",
                                  timeout_seconds=30))
        await anyio.sleep(0.5)
        start = time.perf_counter()
        error = await h.err("hash_file", root="workspace", path="small.txt")
        assert error.startswith("hash_file timed out after 1 s on small.txt waiting for a free worker"), error
        assert time.perf_counter() - start < 5
        tg.cancel_scope.cancel()  # grep honours cancellation too: its workers are free again at once
    assert (await h.ok("hash_file", root="workspace", path="small.txt"))["size"] == 6


# -- queued commands ---------------------------------------------------------------------------------------------


@pytest.fixture
def nofile_1024() -> Iterator[None]:
    """This process's RLIMIT_NOFILE lowered to 1024 (a common default), restored afterwards."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(1024, hard), hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


async def test_queued_commands_hold_no_descriptors(servers: CommandServers, tmp_path: Path,
                                                   nofile_1024: None) -> None:
    h = await servers({"allowed": ["sleep"], "max_concurrent": 1})
    (tmp_path / "workspace" / "a.txt").write_text("still readable\n")
    finished: list[str] = []

    async def command() -> None:
        result = await h.call("execute_command", command="sleep 120", root="workspace")
        finished.append(text_of(result))

    async with anyio.create_task_group() as tg:
        tg.start_soon(command)  # holds the only slot
        await anyio.sleep(1)
        for _ in range(1100):
            tg.start_soon(command)
        await anyio.sleep(5)  # all of them checked and waiting in the queue by now
        open_fds = len(os.listdir("/proc/self/fd"))
        got = await h.ok("read_file", root="workspace", path="a.txt")
        assert got["content"] == "still readable\n"
        assert finished == []  # nothing failed meanwhile (on the old code: EMFILE for everyone)
        tg.cancel_scope.cancel()
    print(f"open descriptors with 1 command running and 1,100 queued: {open_fds}")
    assert open_fds < 200


async def test_a_working_directory_swapped_while_queued_is_refused(servers: CommandServers, tmp_path: Path) -> None:
    ws = tmp_path / "workspace"
    (ws / "build").mkdir(parents=True)
    h = await servers({"allowed": ["sleep", "touch"], "max_concurrent": 1, "sandbox": "off"})
    sleeper = anyio.CancelScope()
    outcome: list[str] = []

    async def hold_the_slot() -> None:
        with sleeper:
            await h.call("execute_command", command="sleep 120", root="workspace")

    async def queued() -> None:
        outcome.append(await h.err("execute_command", command="touch MARKER", root="workspace", cwd="build"))

    async with anyio.create_task_group() as tg:
        tg.start_soon(hold_the_slot)
        await anyio.sleep(0.5)
        tg.start_soon(queued)
        await anyio.sleep(0.5)  # checked, and waiting for its turn
        (ws / "build").rename(ws / "elsewhere")  # then replaced by another directory of the same name
        (ws / "build").mkdir()
        sleeper.cancel()  # its turn comes
    assert "build was replaced or moved while the command waited for its turn; nothing was run" in outcome[0]
    assert not (ws / "build" / "MARKER").exists() and not (ws / "elsewhere" / "MARKER").exists()
