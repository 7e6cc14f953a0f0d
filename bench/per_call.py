"""Per-call overhead end to end over stdio: rootbound's stat_file, read_file (10 KB) and write_file (100 KB, atomic,
fsynced, journaled as shipped) beside the SDK's own floor.

    .venv/bin/python bench/per_call.py [--rounds N] [--reference PATH] [--against CHECKOUT] [--echo]

The floor is a lowlevel `Server` of the `mcp` SDK answering a constant `stat_file` result on rootbound's stdio
transport (bench/_floor_server.py): what any Python MCP server pays per call before doing anything. rootbound runs
from this checkout on a temp folder. With `--reference` (the reference filesystem server's executable, as
bench/peers.py installs it into ~/.cache/rootbound-bench), it takes its turn too. All are driven by the SDK client,
one call at a time, round-robin in one run (in a new random order each round); medians and p90s in ms, and each
row's distance from the floor. Issue 18 item 2 wants all three at or under the reference server: the table shows how
much of what is left is the SDK's (the floor) and how much is rootbound's (a write's fsync is not the reference's:
it does not fsync). Each server's own CPU time per call (user + system, from /proc, summed over the run) is printed
too: steadier than wall-clock medians on a shared machine.

`--echo` adds `execute_command echo hi` under the default sandbox (a server of its own, with `echo` allowed; with
`--against`, the other checkout's too): the command path's cost above the same floor.

`--against CHECKOUT` adds another checkout's rootbound (its `src/` first on the import path, run by this
interpreter: `git worktree add /tmp/before HEAD~1`) for the same three calls: an A/B of a change in one run.
Separate runs of this machine class differ by tenths of a millisecond; only an interleaved A/B shows a change
that size.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import time
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import anyio
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

HERE = Path(__file__).resolve().parent


async def run(rounds: int, reference: str | None, against: str | None, echo: bool, work: Path) -> None:
    (work / "files").mkdir()
    text = "".join(f"line {i:05d} " + "x" * 20 + "\n" for i in range(10240 // 32))
    (work / "files" / "read-10k.txt").write_text(text)
    content = "".join(f"line {i:06d} " + "y" * 50 + "\n" for i in range(100_000 // 63))  # as bench/peers.py's
    # As shipped: the change journal on (a write records its undo), in a state folder of the run's own.
    config = work / "rootbound.json"
    config.write_text(json.dumps({"roots": [{"name": "bench", "path": str(work / "files")}],
                                  "state_dir": str(work / "state")}))  # outside the root, as the server insists
    rootbound = [sys.executable, "-m", "rootbound", "--config", str(config)]
    rel = {"path": "read-10k.txt"}
    absolute = {"path": str(work / "files" / "read-10k.txt")}
    servers: list[tuple[str, list[str], str, dict[str, Any]]] = [
        ("SDK floor (constant stat)", [sys.executable, str(HERE / "_floor_server.py")], "stat_file", {}),
        ("rootbound stat_file", rootbound, "stat_file", rel),
        ("rootbound read_file 10 KB", rootbound, "read_file", rel),
        ("rootbound write_file 100 KB", rootbound, "write_file", {"path": "rb.txt", "content": content}),
    ]
    commands = work / "rootbound-echo.json"  # (a server of its own: the rows above stay as shipped)
    commands.write_text(json.dumps({"roots": [{"name": "bench", "path": str(work / "files")}],
                                    "state_dir": str(work / "state-echo"), "commands": {"allowed": ["echo"]}}))
    echo_call = {"command": "echo hi", "root": "bench"}  # (run in the root: a cwd outside it gets a bubblewrap)
    if echo:
        servers += [("rootbound echo hi (default sandbox)", [*rootbound[:-1], str(commands)], "execute_command",
                     echo_call)]
    if against:  # `env` puts the other checkout's package first; the rest of the environment as stdio_client's
        other = ["env", f"PYTHONPATH={Path(against).resolve() / 'src'}", *rootbound]
        servers += [("  against: stat_file", other, "stat_file", rel),
                    ("  against: read_file 10 KB", other, "read_file", rel),
                    ("  against: write_file 100 KB", other, "write_file", {"path": "ab.txt", "content": content})]
        if echo:
            servers += [("  against: echo hi", [*other[:-1], str(commands)], "execute_command", echo_call)]
    if reference:
        servers += [("reference get_file_info", [reference, str(work)], "get_file_info", absolute),
                    ("reference read_text_file 10 KB", [reference, str(work)], "read_text_file", absolute),
                    ("reference write_file 100 KB", [reference, str(work)], "write_file",
                     {"path": str(work / "files" / "ref.txt"), "content": content})]
    async with AsyncExitStack() as stack:
        sessions = []
        pids: dict[str, int] = {}
        for label, argv, tool, args in servers:
            params = StdioServerParameters(command=argv[0], args=argv[1:])
            devnull = stack.enter_context(open(os.devnull, "w"))  # noqa: SIM115 - closed by the stack
            before = _children()
            read, write = await stack.enter_async_context(stdio_client(params, errlog=devnull))
            session = await stack.enter_async_context(ClientSession(read, write))
            await session.initialize()
            sessions.append((label, session, tool, args))
            pids[label] = min(_children() - before)
        times: dict[str, list[float]] = {label: [] for label, *_ in sessions}
        cpu: dict[str, float] = {}
        shuffler = random.Random(18)
        for round_no in range(rounds + 30):
            if round_no == 30:
                cpu = {label: -_cpu_seconds(pid) for label, pid in pids.items()}
            # A random order each round: a row must not always follow the same one (a write's fsync and its
            # journal's note, finishing after the reply, slowed whichever call came next: always the same one).
            shuffler.shuffle(sessions)
            for label, session, tool, args in sessions:
                start = time.perf_counter()
                result = await session.call_tool(tool, args)
                elapsed = time.perf_counter() - start
                assert not result.is_error, (label, result)
                if round_no >= 30:
                    times[label].append(elapsed)
        for label, pid in pids.items():
            cpu[label] += _cpu_seconds(pid)
    floor = statistics.median(times[servers[0][0]])
    floor_cpu = cpu[servers[0][0]]
    print(f"load average {os.getloadavg()[0]:.2f}; {rounds} calls each, round-robin")
    print(f"{'':34s} {'median ms':>10s} {'p90 ms':>8s} {'over floor':>11s} {'server CPU':>11s} {'over floor':>11s}")
    for label, samples in times.items():
        samples.sort()
        median = statistics.median(samples)
        print(f"{label:34s} {median * 1000:10.3f} {samples[int(len(samples) * 0.9)] * 1000:8.3f} "
              f"{(median - floor) * 1000:+10.3f} {cpu[label] * 1000 / rounds:11.3f} "
              f"{(cpu[label] - floor_cpu) * 1000 / rounds:+10.3f}")
    print("server CPU: ms of the server process's user + system time per call over the whole run (clock ticks "
          "summed, so steadier than the medians on a shared machine)")


def _children() -> set[int]:
    """This process's children (the servers stdio_client started)."""
    me = str(os.getpid())
    found = set()
    for pid in os.listdir("/proc"):
        try:
            with open(f"/proc/{pid}/stat") as f:
                if pid.isdigit() and f.read().rsplit(")", 1)[1].split()[1] == me:
                    found.add(int(pid))
        except (OSError, IndexError):
            continue
    return found


def _cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=500)
    default = Path.home() / ".cache/rootbound-bench/npm/modelcontextprotocol+server-filesystem-2026.8.31" \
        / "node_modules/.bin/mcp-server-filesystem"
    parser.add_argument("--reference", default=str(default) if default.exists() else None)
    parser.add_argument("--against", help="another checkout of rootbound, for an A/B in the same run")
    parser.add_argument("--echo", action="store_true",
                        help="also `execute_command echo hi` under the default sandbox (issue 18 item 3), and against")
    args = parser.parse_args()
    if args.against and not (Path(args.against) / "src" / "rootbound").is_dir():
        parser.error(f"--against {args.against}: no src/rootbound there (a checkout of rootbound is wanted)")
    with tempfile.TemporaryDirectory() as tmp:
        anyio.run(run, args.rounds, args.reference, args.against, args.echo, Path(tmp))


if __name__ == "__main__":
    main()
