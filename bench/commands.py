"""`echo hi` through execute_command and through shell, vs a bare `subprocess.run`, in the same run.

Each tool call goes through the in-memory MCP client (the real protocol objects, no
transport); the baselines spawn the same programs directly. Prints medians and the
overhead per call (target: < 5 ms median overhead in-process).

    python bench/commands.py [N]
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable

import anyio
import yaml
from mcp import Client

from rootbound.config import load_config
from rootbound.server import App

N = int(sys.argv[1]) if len(sys.argv) > 1 else 200


def median_ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1000


def time_sync(fn: Callable[[], object]) -> list[float]:
    out = []
    for _ in range(N):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return out


async def time_async(fn: Callable[[], Awaitable[object]]) -> list[float]:
    out = []
    for _ in range(N):
        t = time.perf_counter()
        await fn()
        out.append(time.perf_counter() - t)
    return out


async def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        cfg = os.path.join(tmp, "config.yaml")
        with open(cfg, "w") as f:
            yaml.safe_dump({"roots": [{"name": "workspace", "path": tmp}],
                            "commands": {"allowed": ["echo"], "sandbox": "off"}}, f)
        app = App(load_config(cfg, env={}))
        async with Client(app.server) as client:

            async def via_execute() -> None:
                r = await client.call_tool("execute_command", {"command": "echo hi", "cwd": tmp})
                assert not r.is_error and r.structured_content and r.structured_content["stdout"] == "hi\n"

            async def via_shell() -> None:
                r = await client.call_tool("shell", {"command": "echo hi", "working_directory": tmp})
                assert not r.is_error and r.structured_content and r.structured_content["stdout"] == "hi\n"

            for fn in (via_execute, via_shell):  # warm up imports, parser, caches
                for _ in range(5):
                    await fn()
            async def floor() -> None:  # a tool call that runs nothing: the protocol's own cost
                await client.call_tool("list_roots", {})

            rounds: dict[str, list[float]] = {"bare echo": [], "execute_command": [], "bare sh -c": [], "shell": [],
                                              "list_roots (floor)": []}
            # Interleaved rounds, so drift on a shared machine hits every series alike.
            for _ in range(3):
                rounds["bare echo"] += time_sync(
                    lambda: subprocess.run(["echo", "hi"], capture_output=True, cwd=tmp, check=True))
                rounds["execute_command"] += await time_async(via_execute)
                rounds["bare sh -c"] += time_sync(
                    lambda: subprocess.run(["/bin/sh", "-c", "echo hi"], capture_output=True, cwd=tmp, check=True))
                rounds["shell"] += await time_async(via_shell)
                rounds["list_roots (floor)"] += await time_async(floor)
        app.close()
    med = {k: median_ms(v) for k, v in rounds.items()}
    print(f"N={3 * N} calls per series (medians, ms)")
    print(f"{'series':18} {'median':>8}")
    for name, value in med.items():
        print(f"{name:18} {value:8.3f}")
    print()
    floor_ms = med["list_roots (floor)"]
    print(f"{'tool':18} {'overhead ms':>12} {'ratio':>7} {'beyond protocol floor ms':>25}")
    for tool, base in (("execute_command", "bare echo"), ("shell", "bare sh -c")):
        over = med[tool] - med[base]
        print(f"{tool:18} {over:12.3f} {med[tool] / med[base]:7.2f}x {over - floor_ms:25.3f}")
    print("target: overhead < 5 ms median")


if __name__ == "__main__":
    anyio.run(main)
