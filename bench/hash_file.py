"""hash_file (sha256) of a 1 GiB file vs `sha256sum`, and the server's peak RSS growth while hashing.

    .venv/bin/python bench/hash_file.py [--size-mib N] [--runs N] [--file PATH]

The file is made once (or given with --file) and read once to warm the page cache, so
every run hashes from memory and the comparison is CPU against CPU. Each run, in turns:
- `sha256sum FILE` as a subprocess (wall time; its start-up is a millisecond);
- the server in a child process: a rootbound app with an in-memory MCP client calls
  hash_file once on a small file (imports, worker thread and buffers in place), resets
  the kernel's peak-RSS mark (`/proc/self/clear_refs`), then hashes the big file through
  `call_tool`; it reports the call's duration and VmHWM growth (peak RSS minus RSS before);
- `hashlib.file_digest` in this process, for reference (it reads 256 KiB at a time).
Targets (issue 2): throughput at least 90% of sha256sum's; peak RSS growth under 16 MiB.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import anyio

MIB = 1024 * 1024


def make_file(path: Path, size_mib: int) -> None:
    """Incompressible enough for a hash (content does not change its speed), and quick to write."""
    block = os.urandom(8 * MIB)
    with open(path, "wb") as f:
        for i in range(size_mib // 8):
            f.write(i.to_bytes(8, "little") + block[8:])
        f.write(block[: (size_mib % 8) * MIB])


def warm(path: Path) -> None:
    with open(path, "rb", buffering=0) as f:
        while f.read(8 * MIB):
            pass


def vm_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/self/status")


async def child(path: Path) -> None:
    """The server side: runs in its own process so its RSS is the server's alone."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from _util import checked, served

    small = path.parent / "warmup.bin"
    small.write_bytes(os.urandom(MIB))
    async with served(path.parent) as (_, client):
        checked(await client.call_tool("hash_file", {"root": "bench", "path": small.name}))
        Path("/proc/self/clear_refs").write_text("5")  # VmHWM := current RSS
        before = vm_kib("VmHWM")
        start = time.perf_counter()
        result = checked(await client.call_tool("hash_file", {"root": "bench", "path": path.name}))
        elapsed = time.perf_counter() - start
        peak = vm_kib("VmHWM")
    small.unlink()
    print(json.dumps({"seconds": elapsed, "growth_kib": peak - before, "rss_kib": before, "hash": result["hash"]}))


def run_child(path: Path) -> dict[str, float | str]:
    out = subprocess.run([sys.executable, __file__, "--child", str(path)], check=True, capture_output=True,
                         text=True).stdout
    return json.loads(out.splitlines()[-1])  # type: ignore[no-any-return]


def run_sha256sum(path: Path) -> tuple[float, str]:
    start = time.perf_counter()
    out = subprocess.run(["sha256sum", str(path)], check=True, capture_output=True, text=True).stdout
    return time.perf_counter() - start, out.split()[0]


def run_file_digest(path: Path) -> tuple[float, str]:
    start = time.perf_counter()
    with open(path, "rb") as f:
        digest = hashlib.file_digest(f, "sha256").hexdigest()
    return time.perf_counter() - start, digest


def main(size_mib: int, runs: int, given: Path | None) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = given or Path(tmp) / "big.bin"
        if given is None:
            make_file(path, size_mib)
        size = path.stat().st_size
        warm(path)
        times: dict[str, list[float]] = {"sha256sum": [], "hash_file (server)": [], "hashlib.file_digest": []}
        growth: list[float] = []
        hashes: set[str] = set()
        for _ in range(runs):
            seconds, digest = run_sha256sum(path)
            times["sha256sum"].append(seconds)
            hashes.add(digest)
            report = run_child(path)
            times["hash_file (server)"].append(float(report["seconds"]))
            growth.append(float(report["growth_kib"]) / 1024)
            hashes.add(str(report["hash"]))
            seconds, digest = run_file_digest(path)
            times["hashlib.file_digest"].append(seconds)
            hashes.add(digest)
        assert len(hashes) == 1, f"the methods disagree: {hashes}"

    medians = {name: statistics.median(ts) for name, ts in times.items()}
    base_rate = size / MIB / medians["sha256sum"]
    print(f"\nsha256 of a {size / MIB:,.0f} MiB file, warm cache, {runs} runs (median)")
    print(f"  {'case':20}  {'seconds':>8}  {'MiB/s':>8}  {'x sha256sum throughput':>22}")
    for name, med in medians.items():
        rate = size / MIB / med
        print(f"  {name:20}  {med:8.3f}  {rate:8.0f}  {rate / base_rate:22.2f}")
    ratio = medians["sha256sum"] / medians["hash_file (server)"]
    worst_growth = max(growth)
    print(f"  server peak RSS growth while hashing: max {worst_growth:.2f} MiB over {runs} runs "
          f"(each: {', '.join(f'{g:.2f}' for g in growth)})")
    print(f"  target throughput >= 90% of sha256sum: {'MET' if ratio >= 0.9 else 'MISSED'} ({ratio:.0%})")
    print(f"  target RSS growth < 16 MiB: {'MET' if worst_growth < 16 else 'MISSED'} ({worst_growth:.2f} MiB)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size-mib", type=int, default=1024)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--file", type=Path, help="hash this file instead of making one")
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    opts = parser.parse_args()
    if opts.child:
        anyio.run(child, opts.child)
    else:
        main(opts.size_mib, opts.runs, opts.file)
