"""write_file of 100 KB through an in-memory MCP client vs a raw atomic write, in the same run.

    .venv/bin/python bench/write_file.py [--runs N] [--size-kb N] [--dir PATH]

Cases, taking turns each round (median of N runs):
- raw atomic write: what a careful script does by path — O_EXCL temp file in the same
  directory, write, fsync, rename over the target (the baseline);
- atomic.write_file: rootbound's primitive alone (O_TMPFILE, fsync, link, rename through a
  directory handle);
- write_file (MCP): the whole tool call — JSON-RPC, argument validation, resolution beneath
  the root, protected-path check, the atomic write, sha256 of the content, the result;
- write_file + expected_sha256: the same with the compare-and-swap guard (hashes the old file);
- stat_file (MCP floor): the cheapest tool call, for the protocol's own cost. It runs first among
  the MCP cases because the first async call after the synchronous cases pays ~0.5 ms of wake-up
  that would otherwise be charged to whichever write case came first.
The files live on the filesystem of --dir (default: the system temp dir), so fsync costs real time.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import os
import secrets
import tempfile
from pathlib import Path

import anyio

from _util import checked, measure, print_table, served
from rootbound.fs import atomic
from rootbound.fs.content import write_all


def raw_atomic_write(directory: Path, name: str, data: bytes) -> None:
    tmp = directory / f".{name}.{secrets.token_hex(6)}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, directory / name)


async def main(runs: int, size_kb: int, base: str | None) -> None:
    data = os.urandom(size_kb * 1024 // 4 * 3)  # base64 text of ~size_kb: what an agent's content looks like
    text = base64.b64encode(data).decode()
    payload = text.encode()
    with tempfile.TemporaryDirectory(dir=base) as tmp:
        root = Path(tmp)
        dirfd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
        async with served(root) as (_, client):
            checked(await client.call_tool("write_file", {"root": "bench", "path": "mcp.txt", "content": text}))
            digest = hashlib.sha256(payload).hexdigest()

            async def via_mcp() -> None:
                checked(await client.call_tool("write_file", {"root": "bench", "path": "mcp.txt", "content": text}))

            async def via_mcp_cas() -> None:
                checked(await client.call_tool("write_file", {"root": "bench", "path": "mcp.txt", "content": text,
                                                              "expected_sha256": digest}))

            async def floor() -> None:
                checked(await client.call_tool("stat_file", {"root": "bench", "path": "mcp.txt"}))

            def via_primitive() -> None:
                atomic.write_file(dirfd, "prim.txt", lambda fd: write_all(fd, payload), replace=True,
                                 perms=0o644)

            samples = await measure({
                "raw atomic write": lambda: raw_atomic_write(root, "raw.txt", payload),
                "atomic.write_file": via_primitive,
                "stat_file (MCP floor)": floor,
                "write_file (MCP)": via_mcp,
                "write_file + expected_sha256": via_mcp_cas,
            }, runs)
        os.close(dirfd)
        assert (root / "mcp.txt").read_bytes() == (root / "raw.txt").read_bytes() == payload
        leftovers = [n for n in os.listdir(root) if n not in ("mcp.txt", "raw.txt", "prim.txt")]
        assert not leftovers, leftovers
    medians = print_table(f"write of {len(payload) / 1024:.0f} KB, {runs} runs, fsync on "
                          f"{base or tempfile.gettempdir()}", samples, "raw atomic write")
    ratio = medians["write_file (MCP)"] / medians["raw atomic write"]
    print(f"  write_file (MCP) / raw atomic write: {ratio:.2f}x "
          f"(+{(medians['write_file (MCP)'] - medians['raw atomic write']) * 1000:.2f} ms per call)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--size-kb", type=int, default=100)
    parser.add_argument("--dir", help="directory (filesystem) to write in")
    opts = parser.parse_args()
    anyio.run(main, opts.runs, opts.size_kb, opts.dir)
