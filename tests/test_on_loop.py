"""Quick looks run on the event loop (fs/onloop.py): stat_file and small reads need no worker thread, so they
answer even while every quick worker is busy; a big file, a path through a mount point beneath the root
(which could be NFS or FUSE, and hang), or a file another process holds a lease on, still goes to a worker."""

from __future__ import annotations

import contextlib
import os
import stat
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import anyio
import pytest

from rootbound.fs import Root, onloop
from rootbound.tools.base import QUICK_THREADS

from .conftest import Harness

pytestmark = pytest.mark.anyio


@contextlib.asynccontextmanager
async def busy_workers(server: Harness) -> AsyncIterator[None]:
    """Every quick worker slot taken, as by slow calls of other clients."""
    holders = [object() for _ in range(QUICK_THREADS)]
    for holder in holders:
        await server.app.workers.quick.acquire_on_behalf_of(holder)
    try:
        yield
    finally:
        for holder in holders:
            server.app.workers.quick.release_on_behalf_of(holder)


async def test_stat_and_small_reads_answer_while_every_worker_is_busy(server: Harness, workspace: Path) -> None:
    (workspace / "small.txt").write_text("one\ntwo\n")
    async with busy_workers(server):
        with anyio.fail_after(5):
            assert (await server.ok("stat_file", path="small.txt"))["size"] == 8
            read = await server.call("read_file", path="small.txt")
            assert not read.is_error
            assert read.content[0].text == "     1\tone\n     2\ttwo"  # type: ignore[union-attr]


async def test_a_big_file_is_read_in_a_worker(server: Harness, workspace: Path) -> None:
    body = "x" * 99 + "\n"
    (workspace / "big.txt").write_text(body * (onloop.MAX_BYTES // len(body) + 1))
    async with busy_workers(server):
        with anyio.move_on_after(0.5) as waited:
            await server.call("read_file", path="big.txt")
        assert waited.cancelled_caught, "a file over MAX_BYTES was read on the event loop"
    data = await server.ok("read_file", path="big.txt")  # and with a worker free, it is read whole
    assert data["content"] == (workspace / "big.txt").read_text()


@contextlib.contextmanager
def mounted_tmpfs(where: Path) -> Iterator[None]:
    where.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(where)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root with CAP_SYS_ADMIN): {done.stderr.decode().strip()}")
    try:
        yield
    finally:
        subprocess.run(["umount", "-l", str(where)], check=True)


async def test_a_mount_point_beneath_the_root_is_never_entered_on_the_event_loop(server: Harness,
                                                                               workspace: Path) -> None:
    """A mount beneath the root could be a hung NFS or FUSE filesystem: calls that cross it run in a worker
    (which may wait), never on the event loop (which would stall every client). Both still answer."""
    if os.geteuid() != 0:
        pytest.skip("mounting needs root")
    with mounted_tmpfs(workspace / "mnt"):
        (workspace / "mnt" / "f.txt").write_text("on another filesystem\n")
        (workspace / "mnt-link").symlink_to("mnt/f.txt")
        async with busy_workers(server):
            for tool, path in (("stat_file", "mnt/f.txt"), ("stat_file", "mnt"), ("read_file", "mnt/f.txt"),
                               ("read_file", "mnt-link"), ("stat_file", "mnt-link")):
                with anyio.move_on_after(0.3) as waited:
                    await server.call(tool, path=path)
                assert waited.cancelled_caught, f"{tool} {path} crossed a mount point on the event loop"
        assert (await server.ok("read_file", path="mnt/f.txt"))["content"] == "on another filesystem\n"
        assert (await server.ok("stat_file", path="mnt"))["type"] == "directory"
        assert (await server.ok("stat_file", path="mnt-link"))["target"]["type"] == "file"


async def test_escapes_are_refused_on_the_event_loop_as_in_a_worker(server: Harness, workspace: Path,
                                                                    outside: Path) -> None:
    """RESOLVE_NO_XDEV's EXDEV is not taken for an escape or an answer: the call goes to a worker, whose
    resolution says what it is (here: an escape, refused with the usual error)."""
    (workspace / "out").symlink_to(outside / "secret.txt")
    for tool in ("stat_file", "read_file"):
        text = await server.err(tool, path="../outside/secret.txt")
        assert "OUTSIDE-SECRET" not in text and str(outside) not in text
    text = await server.err("read_file", path="out")
    assert "OUTSIDE-SECRET" not in text and str(outside) not in text
    assert (await server.ok("stat_file", path="out"))["target"]["type"] == "external"


@contextlib.contextmanager
def write_lease(path: Path) -> Iterator[subprocess.Popen[bytes]]:
    """Another process holding a write lease on `path` (as Samba or an NFS server may, and any process owning the
    file): an open for reading waits for the holder to give it up, up to /proc/sys/fs/lease-break-time (45 s)."""
    holder = subprocess.Popen(
        ["python3", "-c", "import fcntl, os, signal, sys\n"
         "fd = os.open(sys.argv[1], os.O_RDONLY)\n"
         "signal.signal(signal.SIGIO, lambda *_: None)  # told of a lease break: hold on regardless\n"
         "fcntl.fcntl(fd, fcntl.F_SETLEASE, fcntl.F_WRLCK)\n"
         "print('held', flush=True)\n"
         "sys.stdin.read()\n", str(path)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == b"held\n"
        yield holder
    finally:
        holder.kill()
        holder.wait()


async def test_a_file_under_a_lease_is_read_in_a_worker(server: Harness, workspace: Path) -> None:
    """Opening a leased file for reading waits until its holder lets go: on the event loop that wait would
    stall every call of every client (up to 45 s), so the loop's open does not wait, and the read goes to a
    worker, which waits there while other calls answer."""
    (workspace / "leased.txt").write_text("under a lease\n")
    (workspace / "other.txt").write_text("free\n")
    with write_lease(workspace / "leased.txt") as holder:
        async with anyio.create_task_group() as tg:
            read: dict[str, object] = {}

            async def read_leased() -> None:
                read.update(await server.ok("read_file", path="leased.txt"))

            tg.start_soon(read_leased)
            await anyio.sleep(0.2)  # the read is waiting for the lease now
            with anyio.fail_after(2):
                assert (await server.ok("stat_file", path="other.txt"))["size"] == 5
                assert (await server.ok("read_file", path="other.txt"))["content"] == "free\n"
            assert not read, "the read did not wait for the lease"
            holder.kill()  # the lease goes with its holder: the waiting read goes on
    assert read["content"] == "under a lease\n"


@contextlib.contextmanager
def mounted_bpffs(where: Path) -> Iterator[None]:
    where.mkdir()
    done = subprocess.run(["mount", "-t", "bpf", "bpf", str(where)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a bpf filesystem here (needs root): {done.stderr.decode().strip()}")
    try:
        yield
    finally:
        subprocess.run(["umount", "-l", str(where)], check=True)


def test_a_root_on_a_filesystem_not_known_local_is_not_looked_at_on_the_event_loop(tmp_path: Path) -> None:
    """Every call checks first that its root is still there (a stat of its handle and of its path): on NFS or FUSE
    that stat can hang, so on the event loop a root not on a known local filesystem sends the call to a worker
    before it is looked at, the availability check included. bpffs stands in for the remote filesystem (a test
    cannot make NFS hang; what matters is that its magic is not a local one's)."""
    if os.geteuid() != 0:
        pytest.skip("mounting needs root")
    with mounted_bpffs(tmp_path / "bpf"):
        (tmp_path / "bpf" / "d").mkdir()
        root = Root.at("remote", str(tmp_path / "bpf" / "d"), ["*"])
        try:
            assert not root.local
            with onloop.on_loop(), pytest.raises(onloop.Offload):
                root.check_available()
            root.check_available()  # in a worker it is checked as ever
            assert stat.S_ISDIR(root.stat(".").st_mode)
        finally:
            root.close()


_NO_PROC_LEASE = """
import os, subprocess, sys, threading, time
from rootbound.fs import Root, onloop
here = sys.argv[1]
holder = subprocess.Popen([sys.executable, "-c", sys.argv[2], os.path.join(here, "leased.txt")],
                          stdin=subprocess.PIPE, stdout=subprocess.PIPE)
assert holder.stdout.readline() == b"held\\n"
root = Root.at("w", here, ["*"])
subprocess.run(["mount", "-t", "tmpfs", "none", "/proc"], check=True)  # from here on there is no /proc
assert not os.path.exists("/proc/self/fd")
threading.Timer(5, holder.kill).start()  # whatever happens, the lease ends in 5 s
started = time.monotonic()
try:
    with onloop.on_loop():
        root.open("leased.txt")
    outcome = "opened"
except onloop.Offload:
    outcome = "offloaded"
print(outcome, round(time.monotonic() - started, 2))
"""


def test_a_file_under_a_lease_is_not_waited_for_on_the_event_loop_without_proc(tmp_path: Path) -> None:
    """Without /proc (some containers) the loop's reopen of a file falls back to a non-blocking open beneath the
    root (openat2): a lease makes that fail with EAGAIN, which openat2 also returns when a rename races a `..`
    step, and which was retried at once, over and over, on the event loop, until the holder let go (up to
    lease-break-time, 45 s, the loop spinning): every call of every client stalled. The call goes to a worker."""
    if os.geteuid() != 0:
        pytest.skip("a mount namespace without /proc needs root")
    (tmp_path / "leased.txt").write_text("under a lease\n")
    holder = ("import fcntl, os, signal, sys\n"
              "fd = os.open(sys.argv[1], os.O_RDONLY)\n"
              "signal.signal(signal.SIGIO, lambda *_: None)\n"
              "fcntl.fcntl(fd, fcntl.F_SETLEASE, fcntl.F_WRLCK)\n"
              "print('held', flush=True)\n"
              "sys.stdin.read()\n")
    done = subprocess.run(["unshare", "-m", "--propagation", "private", sys.executable, "-c", _NO_PROC_LEASE,
                           str(tmp_path), holder], capture_output=True, text=True, timeout=60)
    if done.returncode != 0 and "unshare" in done.stderr:
        pytest.skip(f"no mount namespace here: {done.stderr.strip()}")
    assert done.returncode == 0, done.stderr
    outcome, seconds = done.stdout.split()
    assert outcome == "offloaded" and float(seconds) < 2, done.stdout
