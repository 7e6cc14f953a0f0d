"""50 concurrent read_file calls vs the same 50 calls one at a time, in the same run.

Over Streamable HTTP (a real `rootbound serve --transport http` process, one session) and over the
in-memory transport. Prints throughput and p50/p99 latency per mode, and the speed-up.

    python bench/concurrency.py
"""

from __future__ import annotations

import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import anyio
import httpx2
from mcp import Client

from rootbound.config import load_config
from rootbound.server import App

N = 50
ROUNDS = 5


def pct(values: list[float], p: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, round(p / 100 * (len(values) - 1)))]


async def measure(call: Callable[[int], Awaitable[None]]) -> dict[str, float]:
    seq_lat: list[float] = []
    con_lat: list[float] = []
    seq_wall: list[float] = []
    con_wall: list[float] = []
    for _ in range(ROUNDS):
        start = time.perf_counter()
        for i in range(N):
            t = time.perf_counter()
            await call(i)
            seq_lat.append(time.perf_counter() - t)
        seq_wall.append(time.perf_counter() - start)

        async def timed(i: int) -> None:
            t = time.perf_counter()
            await call(i)
            con_lat.append(time.perf_counter() - t)

        start = time.perf_counter()
        async with anyio.create_task_group() as tg:
            for i in range(N):
                tg.start_soon(timed, i)
        con_wall.append(time.perf_counter() - start)
    seq, con = statistics.median(seq_wall), statistics.median(con_wall)
    return {"seq_tput": N / seq, "con_tput": N / con, "seq_p50": pct(seq_lat, 50) * 1e3,
            "seq_p99": pct(seq_lat, 99) * 1e3, "con_p50": pct(con_lat, 50) * 1e3,
            "con_p99": pct(con_lat, 99) * 1e3, "speedup": seq / con}


def report(name: str, r: dict[str, float]) -> None:
    seq = f"{r['seq_tput']:7.0f} calls/s  p50 {r['seq_p50']:6.2f} ms  p99 {r['seq_p99']:6.2f} ms"
    con = f"{r['con_tput']:7.0f} calls/s  p50 {r['con_p50']:6.2f} ms  p99 {r['con_p99']:6.2f} ms"
    print(f"{name:10} one-at-a-time {seq} | 50 concurrent {con} | throughput x{r['speedup']:.2f}")


async def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        ws = Path(tmp)
        for i in range(N):
            (ws / f"f{i}.txt").write_bytes(os.urandom(16 * 1024).hex().encode())

        app = App(load_config(None, [f"workspace={ws}"], env={}))
        async with Client(app.server) as c:
            async def mem(i: int) -> None:
                r = await c.call_tool("read_file", {"root": "workspace", "path": f"f{i}.txt"})
                assert not r.is_error
            await mem(0)
            report("in-memory", await measure(mem))

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        proc = subprocess.Popen([sys.executable, "-m", "rootbound", "serve", "--transport", "http", "--port",
                                 str(port), "--root", f"workspace={ws}", "--log-level", "WARNING"])
        try:
            for _ in range(300):
                try:
                    httpx2.get(f"http://127.0.0.1:{port}/health", timeout=0.5)
                    break
                except httpx2.TransportError:
                    time.sleep(0.05)
            async with Client(f"http://127.0.0.1:{port}/mcp") as c:
                async def http(i: int) -> None:
                    r = await c.call_tool("read_file", {"root": "workspace", "path": f"f{i}.txt"})
                    assert not r.is_error
                await http(0)
                report("http", await measure(http))
        finally:
            proc.terminate()
            proc.wait(timeout=15)


if __name__ == "__main__":
    anyio.run(main)
