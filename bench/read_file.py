"""read_file of 1 MiB vs a raw read of the same file.

    .venv/bin/python bench/read_file.py [--runs N]

Three files, each timed in turns on a warm cache:
- 1 MiB of UTF-8 text, read whole (content comes back as text);
- 1 MiB of random bytes, read whole (content comes back as base64);
- a 16 MiB log, 100 lines read from line 1,000,000 (the line index is found by
  counting newlines from the start, and lines_total needs a full count too).
Baselines: `os.open` + `os.read` + `os.close` of the whole file (the text file also
with a UTF-8 decode). Cases: the tool handler alone, `App.call` (server-side: argument
validation, worker thread, handler, JSON text block, log line) and an in-memory MCP
client's `call_tool`. No target is set by the issue; the ratios are for regressions.
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path
from typing import Any

import anyio

from _util import Case, checked, measure, print_table, served
from rootbound.tools import reading

MIB = 1024 * 1024


def raw_read(path: Path) -> bytes:
    fd = os.open(path, os.O_RDONLY)
    try:
        return os.read(fd, os.fstat(fd).st_size + 1)
    finally:
        os.close(fd)


def make_files(base: Path) -> None:
    line = "The quick brown fox jumps over the lazy dog — naïve café 日本語\n"
    text = (line * (MIB // len(line.encode()) + 1)).encode()[:MIB]
    (base / "text.txt").write_bytes(text[: text.rfind(b"\n") + 1])
    (base / "random.bin").write_bytes(os.urandom(MIB))
    with open(base / "log.txt", "w") as f:
        f.writelines(f"{i:07d} INFO request served\n" for i in range(1, 16 * MIB // 30))


async def main(runs: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        make_files(base)
        async with served(base) as (app, client):
            ctx = app.context()
            scenarios: list[tuple[str, str, dict[str, Any], dict[str, Case]]] = [
                ("1 MiB UTF-8 text, full read", "text.txt", {}, {
                    "raw read + decode": lambda: raw_read(base / "text.txt").decode()}),
                ("1 MiB random bytes, full read (base64)", "random.bin", {}, {}),
                ("16 MiB log, 100 lines from line 1,000,000", "log.txt",
                 {"offset_lines": 1_000_000, "limit_lines": 100}, {}),
            ]
            for title, name, extra, more in scenarios:
                args = {"root": "bench", "path": name, **extra}
                typed = reading.ReadFileArgs(**args)
                first = checked(await client.call_tool("read_file", args))
                assert not first["truncated"] or extra, first

                async def dispatch(args: dict[str, Any] = args) -> None:
                    checked(await app.call("read_file", args))

                async def mcp_call(args: dict[str, Any] = args) -> None:
                    checked(await client.call_tool("read_file", args))

                path = base / name
                samples = await measure({
                    "raw read": lambda path=path: raw_read(path),
                    **more,
                    "handler": lambda typed=typed: reading.read_file(ctx, typed),
                    "server dispatch": dispatch,
                    "MCP client call": mcp_call,
                }, runs)
                print_table(f"{title} ({os.path.getsize(path) / MIB:.1f} MiB file, {runs} runs)", samples, "raw read")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=30)
    anyio.run(main, parser.parse_args().runs)
