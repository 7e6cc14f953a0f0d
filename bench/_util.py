"""Shared by the file-tool benchmarks: a served root, interleaved timing, and the results table."""

from __future__ import annotations

import gc
import inspect
import statistics
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from mcp import Client
from mcp.types import CallToolResult

from rootbound.config import load_config
from rootbound.server import App

Case = Callable[[], Any] | Callable[[], Awaitable[Any]]


@asynccontextmanager
async def served(root: Path, name: str = "bench", **config: Any) -> AsyncIterator[tuple[App, Client]]:
    """A rootbound app serving `root` as root `name`, and an in-memory MCP client connected to it."""
    app = App(load_config(None, [f"{name}={root}"], overrides=config, env={}))
    try:
        async with Client(app.server) as client:
            yield app, client
    finally:
        app.close()


def checked(result: CallToolResult) -> dict[str, Any]:
    """The structured result of a call that must have succeeded."""
    data = result.structured_content
    assert not result.is_error and data is not None, result
    return dict(data)


async def measure(cases: dict[str, Case], runs: int, warmup: int = 2) -> dict[str, list[float]]:
    """Seconds per run of each case. Cases take turns within each round, so drift hits them all alike."""
    samples: dict[str, list[float]] = {name: [] for name in cases}
    for round_no in range(warmup + runs):
        gc.collect()
        for name, case in cases.items():
            gc.disable()  # as timeit does: one case's garbage must not be collected on another's clock
            try:
                start = time.perf_counter()
                outcome = case()
                if inspect.isawaitable(outcome):
                    await outcome
                elapsed = time.perf_counter() - start
            finally:
                gc.enable()
            if round_no >= warmup:
                samples[name].append(elapsed)
    return samples


def print_table(title: str, samples: dict[str, list[float]], baseline: str) -> dict[str, float]:
    """Median milliseconds per case and its ratio to `baseline`; returns the medians (seconds)."""
    medians = {name: statistics.median(times) for name, times in samples.items()}
    width = max(len(name) for name in medians)
    print(f"\n{title}")
    print(f"  {'case':{width}}  {'median ms':>10}  {'min ms':>9}  {'x baseline':>10}")
    for name, med in medians.items():
        ratio = med / medians[baseline]
        print(f"  {name:{width}}  {med * 1000:10.2f}  {min(samples[name]) * 1000:9.2f}  {ratio:10.2f}")
    return medians


def verdict(label: str, ok: bool, detail: str) -> None:
    print(f"  target {label}: {'MET' if ok else 'MISSED'} ({detail})")
