"""A slow call never stalls the others: blocking work runs off the event loop."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from tests.conftest import MakeServer

pytestmark = pytest.mark.anyio


async def test_quick_calls_finish_while_a_slow_command_runs(make_server: MakeServer, workspace: Path) -> None:
    for i in range(20):
        (workspace / f"f{i}.txt").write_text(f"{i}\n")
    h = await make_server(commands={"allowed": ["sleep"]})
    finished: list[str] = []

    async def slow() -> None:
        await h.ok("execute_command", command="sleep 2")
        finished.append("slow")

    async def quick(i: int) -> None:
        got = await h.ok("read_file", root="workspace", path=f"f{i}.txt")
        assert got["content"] == f"{i}\n"
        finished.append("quick")

    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            tg.start_soon(slow)
            await anyio.sleep(0.2)  # the command is running
            for i in range(20):
                tg.start_soon(quick, i)
    assert finished == ["quick"] * 20 + ["slow"]


async def test_fifty_calls_in_flight_on_one_session(make_server: MakeServer,
                                                    workspace: Path) -> None:
    for i in range(50):
        (workspace / f"f{i}.txt").write_text(f"{i}\n")
    h = await make_server()
    results: dict[int, str] = {}

    async def one(i: int) -> None:
        results[i] = (await h.ok("read_file", root="workspace", path=f"f{i}.txt"))["content"]

    with anyio.fail_after(60):
        async with anyio.create_task_group() as tg:
            for i in range(50):
                tg.start_soon(one, i)
    assert results == {i: f"{i}\n" for i in range(50)}
