"""A root on a filesystem that stops answering (an NFS server gone, a FUSE daemon stuck) stalls only the calls
that touch it: every other call, of every client, is still answered. The hung filesystem is a real FUSE mount
(tests/_hung_fs.py) where a lookup of `hang` never returns."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from ._hung_fs import HungFs, available, hung_fs
from .conftest import Harness, MakeServer

pytestmark = [pytest.mark.anyio, pytest.mark.skipif(available() is not None, reason=str(available()))]


@pytest.fixture
def hung(tmp_path: Path) -> Iterator[HungFs]:
    mountpoint = tmp_path / "remote"
    mountpoint.mkdir()
    try:
        mounted = hung_fs(mountpoint, deadline=8.0)
        fs = mounted.__enter__()
    except OSError as exc:  # e.g. a container without CAP_SYS_ADMIN
        pytest.skip(str(exc))
    try:
        yield fs
    finally:
        mounted.__exit__(None, None, None)


@pytest.fixture(params=["off", "landlock", "bwrap"])
async def two_roots(request: pytest.FixtureRequest, make_server: MakeServer, workspace: Path,
                    hung: HungFs) -> AsyncIterator[Harness]:
    """A local root and one on the hung filesystem; commands under each sandbox (all look at every root)."""
    (workspace / "a.txt").write_text("local\n")
    yield await make_server({"workspace": workspace, "remote": hung.mountpoint},
                            commands={"allowed": ["echo"], "sandbox": request.param})
    hung.release()  # what still waits on it fails now, before the server is torn down


async def answered_meanwhile(server: Harness, hung: HungFs, tool: str, arguments: dict[str, Any]) -> float:
    """Start `tool` on the hung root; once it waits, call the local root: a stat_file, and a command
    unless the sandbox is bubblewrap (whose guards look at the top of every writable root, the hung one too:
    there a command waits, in its own thread, as long as the filesystem does). How long all of it took."""
    await server.ok("execute_command", root="workspace", command="echo ready")  # the sandbox chosen and probed
    async with anyio.create_task_group() as tg:
        start = time.monotonic()
        tg.start_soon(lambda: server.call(tool, **arguments))
        while not hung.waiting.is_set():  # (on a stalled event loop this wait lasts until the watchdog's release)
            await anyio.sleep(0.01)
        got = await server.ok("stat_file", root="workspace", path="a.txt")
        assert got["type"] == "file"
        assert {"workspace", "remote"} <= {r["name"] for r in (await server.ok("list_roots"))["roots"]}
        if server.app.config.commands.sandbox != "bwrap":
            ran = await server.ok("execute_command", root="workspace", command="echo still here")
            assert ran["stdout"] == "still here\n"
        elapsed = time.monotonic() - start
        hung.release()  # the waiting call ends (an error), and the task group with it
    return elapsed


async def test_a_file_call_on_a_hung_root_leaves_the_others_answered(two_roots: Harness, hung: HungFs) -> None:
    assert await answered_meanwhile(two_roots, hung, "stat_file", {"root": "remote", "path": "hang"}) < 2.0


async def test_a_command_in_a_hung_root_leaves_the_others_answered(two_roots: Harness, hung: HungFs) -> None:
    # Its working directory is looked up before it runs: on the event loop that froze the whole server.
    elapsed = await answered_meanwhile(two_roots, hung, "execute_command",
                                       {"root": "remote", "cwd": "hang", "command": "echo never"})
    assert elapsed < 2.0


async def test_a_root_whose_filesystem_went_away_is_unavailable_and_nothing_else_breaks(
        two_roots: Harness, hung: HungFs) -> None:
    hung.abort()  # the daemon is gone: every call on its mount fails with ENOTCONN
    assert "no longer available" in await two_roots.err("stat_file", root="remote", path=".")
    ran = await two_roots.ok("execute_command", root="workspace", command="echo fine")
    assert ran["stdout"] == "fine\n"
    assert (await two_roots.ok("stat_file", root="workspace", path="a.txt"))["type"] == "file"
