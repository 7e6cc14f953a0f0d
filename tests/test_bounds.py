"""Long file operations are bounded: sparse files stay sparse, every call has a time bound and honours
cancellation, heavy calls cannot starve cheap ones, queued commands hold no descriptors, and list_folder
returns pages (issue 11, item 9)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

from rootbound import fsops
from tests.conftest import Harness, MakeServer

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
        assert fsops.copy_fd(s.fileno(), d.fileno(), offset, count) == len(expected)
        assert os.lseek(d.fileno(), 0, os.SEEK_CUR) == 4 + len(expected)
    assert (tmp_path / "dst").read_bytes() == b"head" + expected
