"""Process control over the real protocol: timeouts, tree kill, cancellation, daemons holding the pipe, big
output with a spill file, no stdin, the concurrency cap and progress notifications."""

from __future__ import annotations

from contextlib import AsyncExitStack
from functools import partial
from pathlib import Path

import anyio
import pytest
from mcp import Client

from tests.conftest import text_of
from tests.test_commands_support import CommandServers, eventually, file_text, gone

pytestmark = pytest.mark.anyio

# These tests follow processes by the pids they write ($$, $!), which must be host pids: under bubblewrap they
# would be pids of its own PID namespace (where, besides, nothing outlives the command: tests/test_sandbox_*).
HOST_PIDS = "landlock"


async def test_timeout_returns_partial_output(servers: CommandServers) -> None:
    h = await servers({"allowed": ["sh"]})
    result = await h.call("execute_command", command="sh -c 'echo started; sleep 30'", timeout=1)
    assert result.is_error
    meta = result.structured_content
    assert meta is not None
    assert meta["timed_out"] is True and meta["stdout"] == "started\n"
    assert meta["exit_code"] is None and meta["signal"] == "SIGTERM"
    assert "timed_out: true\ntimeout_seconds: 1\n" in text_of(result)


async def test_timeout_kills_a_grandchild_that_ignores_sigterm(servers: CommandServers, tmp_path: Path) -> None:
    h = await servers({"allowed": "*", "sandbox": HOST_PIDS})
    script = ("sh -c 'trap \"\" TERM; echo $$ > grandchild.pid; while :; do sleep 0.05; done' & "
              "echo $$ > parent.pid; wait")
    result = await h.call("shell", command=script, root="workspace", timeout=1)
    assert text_of(result).startswith("Command timed out after 1 seconds")
    grandchild = int(await file_text(tmp_path / "workspace" / "grandchild.pid"))
    parent = int(await file_text(tmp_path / "workspace" / "parent.pid"))
    assert await eventually(lambda: gone(grandchild) and gone(parent), 5)


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_cancellation_kills_the_process_group(servers: CommandServers, tmp_path: Path, mode: str) -> None:
    h = await servers({"allowed": "*", "sandbox": HOST_PIDS}, mode=mode)
    pid_file = tmp_path / "workspace" / "pid"
    child_file = tmp_path / "workspace" / "child.pid"
    script = "sleep 60 & echo $! > child.pid; echo $$ > pid; wait"
    with anyio.move_on_after(20) as scope:  # the client sends notifications/cancelled when this scope ends
        async with anyio.create_task_group() as tg:
            tg.start_soon(partial(h.call, "shell", command=script, root="workspace"))
            await file_text(pid_file)
            await file_text(child_file)
            tg.cancel_scope.cancel()
    assert not scope.cancelled_caught
    pid, child = int(pid_file.read_text()), int(child_file.read_text())
    assert await eventually(lambda: gone(pid) and gone(child), 5)


async def test_server_shutdown_kills_running_commands(servers: CommandServers, tmp_path: Path) -> None:
    h = await servers({"allowed": "*", "sandbox": HOST_PIDS})
    pid_file = tmp_path / "workspace" / "pid"
    async with AsyncExitStack() as stack:
        client = await stack.enter_async_context(Client(h.app.server))
        async with anyio.create_task_group() as tg:
            tg.start_soon(client.call_tool, "shell", {"command": "echo $$ > pid; exec sleep 60", "root": "workspace"})
            await file_text(pid_file)
            tg.cancel_scope.cancel()
    assert await eventually(lambda: gone(int(pid_file.read_text())), 5)


async def test_daemonized_grandchild_holding_the_pipe_does_not_hang(servers: CommandServers, tmp_path: Path) -> None:
    h = await servers({"allowed": "*", "sandbox": HOST_PIDS})
    for script in ("setsid sh -c 'echo $$ > daemon.pid; exec sleep 60' & echo done",  # left the process group
                   "sh -c 'echo $$ > daemon.pid; exec sleep 60' & echo done"):  # still in it
        (tmp_path / "workspace" / "daemon.pid").unlink(missing_ok=True)
        with anyio.fail_after(15):
            got = await h.ok("shell", command=script, root="workspace")
        assert got["stdout"] == "done\n" and got["exit_code"] == 0
        assert "kept its output open" in got["note"]
        daemon = int(await file_text(tmp_path / "workspace" / "daemon.pid"))
        assert await eventually(lambda: gone(daemon), 5)  # noqa: B023


async def test_background_job_does_not_outlive_the_call(servers: CommandServers, tmp_path: Path) -> None:
    h = await servers({"allowed": "*", "sandbox": HOST_PIDS})
    got = await h.ok("shell", command="sleep 60 >/dev/null 2>&1 & echo $! > bg.pid", root="workspace")
    assert "note" not in got  # its output was not held open, yet it is stopped all the same
    assert await eventually(lambda: gone(int((tmp_path / "workspace" / "bg.pid").read_text())), 5)


async def test_interactive_program_gets_eof_at_once(servers: CommandServers) -> None:
    h = await servers({"allowed": ["cat", "sh"]})
    with anyio.fail_after(10):  # would hang until the timeout if stdin were inherited
        got = await h.ok("execute_command", command="cat")
        assert (got["exit_code"], got["stdout"]) == (0, "")
        got = await h.ok("execute_command", command="sh -c 'read x; echo read=$?'")
        assert got["stdout"] == "read=1\n"


async def test_fifty_megabytes_of_output_is_cut_and_spilled(servers: CommandServers) -> None:
    size = 50 * 1024 * 1024
    h = await servers({"allowed": ["sh"], "max_output_size": 1024 * 1024})
    got = await h.ok("execute_command", command=f"sh -c 'yes 0123456789abcde | head -c {size}; echo err >&2'")
    assert got["truncated"] is True and got["stdout_bytes"] == size
    assert got["stderr"] == "err\n"
    out = got["stdout"]
    assert out.startswith("0123456789abcde\n") and out.endswith("abcde\n")
    assert len(out) < 1024 * 1024 + 1000
    assert f"bytes of stdout cut here ({size} in all)" in out
    [spill] = got["output_files"]
    assert (spill["stream"], spill["root"], spill["size"], spill["complete"]) == ("stdout", "command-output",
                                                                                   size, True)
    # The agent pages through the whole output with read_file, confined to the spill root.
    page = await h.ok("read_file", root=spill["root"], path=spill["path"], offset_bytes=size - 32, limit_bytes=32)
    assert page["content"] == "0123456789abcde\n" * 2 and page["size"] == size
    middle = await h.ok("read_file", root=spill["root"], path=spill["path"], offset_bytes=16 * 1000, limit_bytes=16)
    assert middle["content"] == "0123456789abcde\n"
    roots = (await h.ok("list_roots"))["roots"]
    assert {"name": "command-output", "allowed_tools": ["list_folder", "read_file", "stat_file", "hash_file",
                                                        "grep", "glob"]} in roots
    assert "tool write_file not allowed" in await h.err("write_file", root="command-output", path="x", content="")


async def test_a_connections_spill_files_are_removed_when_it_ends(servers: CommandServers) -> None:
    h = await servers({"allowed": ["seq"], "max_output_size": 1024})
    assert h.app.spill is not None
    store = Path(h.app.spill.path)
    async with Client(h.app.server, mode="legacy") as client:  # a handshake-era connection of its own
        got = await client.call_tool("execute_command", {"command": "seq 1 5000"})
        assert got.structured_content is not None
        [spill] = got.structured_content["output_files"]
        [area] = store.glob("client-*")
        assert (area / spill["path"]).stat().st_size == got.structured_content["stdout_bytes"]
        # The client's command-output root is that area, and nothing else.
        listed = await client.call_tool("list_folder", {"root": "command-output", "path": "."})
        assert [e["name"] for e in (listed.structured_content or {})["entries"]] == [spill["path"]]
    assert not area.exists()
    # Before its first spill a client sees an empty command-output root.
    assert (await h.ok("list_folder", root="command-output", path="."))["entries"] == []


async def test_binary_output_never_crashes(servers: CommandServers) -> None:
    h = await servers({"allowed": ["head"], "max_output_size": 4096})
    got = await h.ok("execute_command", command="head -c 100000 /dev/urandom")
    assert got["stdout_bytes"] == 100000 and got["truncated"] is True


async def test_concurrency_cap_queues_the_rest(servers: CommandServers, tmp_path: Path) -> None:
    script = "touch run.$$; ls run.* | wc -l > count.$$; sleep 0.4; rm run.$$"
    for cap, expect in ((2, lambda m: m == 2), (8, lambda m: m >= 3)):
        work = tmp_path / "workspace" / f"cap{cap}"  # in the root: sandboxed commands write only there
        work.mkdir(parents=True)
        h = await servers({"allowed": "*", "max_concurrent": cap, "sandbox": HOST_PIDS})  # $$ names files
        async with anyio.create_task_group() as tg:
            for _ in range(5):
                tg.start_soon(partial(h.ok, "shell", command=script, working_directory=str(work)))
        counts = [int(p.read_text()) for p in work.glob("count.*")]
        assert len(counts) == 5 and expect(max(counts)), counts


async def test_output_lines_stream_as_progress(servers: CommandServers) -> None:
    h = await servers({"allowed": "*"})
    seen: list[tuple[float, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append((progress, message))

    result = await h.client.call_tool("shell", {"command": "for i in 1 2 3; do echo line$i; sleep 0.25; done"},
                                      progress_callback=on_progress)
    assert not result.is_error
    assert "line1" in (seen[0][1] or "")
    assert "line3" in "".join(m or "" for _, m in seen)
    assert [p for p, _ in seen] == sorted({p for p, _ in seen})  # strictly increasing
    # Throttled: 100,000 lines arrive as a handful of notifications, not one each.
    seen.clear()
    await h.client.call_tool("shell", {"command": "seq 100000"}, progress_callback=on_progress)
    assert 1 <= len(seen) < 200
    assert seen[-1][0] == 100000 and (seen[-1][1] or "").endswith("100000")
