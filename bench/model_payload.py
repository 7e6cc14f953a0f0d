"""What the model reads, and what it costs: issue 15 item 8's ratios in one run.

    .venv/bin/python bench/model_payload.py [--rounds 15] [--cache ~/.cache/rootbound-bench]

Times, through the `mcp` client over stdio beside the reference filesystem server (installed by bench/peers.py's
adapters into the same cache; skipped with the reason when npm cannot install it): read 10 KB, list 10,000 entries
(rootbound with `limit: 10000`) and 50 concurrent 10 KB reads, round-robin in one run, with each reply's bytes and
its text block's bytes. Then grep's text block beside what `rg -n` prints for the same matches (a literal in the
stdlib corpus, without and with 2 lines of context): the target is at most 1.3x.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import anyio
from mcp.types import CallToolResult

from _peers.adapters import Adapter, Reference, Rootbound, text_of
from _peers.fixture import LIST_ENTRIES, build
from peers import OPS, Outcome, load, open_sessions, print_op, rg_binary, run_op

TIMED = ("read10k", "list", "concurrent")
TARGET = 1.3


def text_bytes(reply: Any) -> int:
    if isinstance(reply, list):
        return sum(text_bytes(r) for r in reply)
    return len(text_of(reply).encode()) if isinstance(reply, CallToolResult) else 0


async def grep_sizes(rb: Adapter, work: Path, rel: str, literal: str, context: int) -> tuple[int, int, int, int]:
    """(rootbound's matches, its text bytes, rg's matching lines, rg -n's bytes) for one literal search."""
    assert rb.client is not None
    result = await rb.client.call_tool("grep", {"root": "bench", "pattern": literal, "path": rel,
                                                "max_results": 100_000, "context_lines": context})
    assert result.structured_content is not None, text_of(result)
    argv = [rg_binary(), "--no-config", "--no-ignore", "--hidden", "--no-messages", "-F",
            *(["-C", str(context)] if context else []), "-n", "-e", literal, rel]
    out = subprocess.run(argv, cwd=work, capture_output=True, check=False).stdout
    counts = subprocess.run([*argv[:-4], "-c", "-e", literal, rel], cwd=work, capture_output=True, check=False).stdout
    found = sum(int(line.rsplit(b":", 1)[1]) for line in counts.splitlines())
    return len(result.structured_content["matches"]), len(text_of(result).encode()), found, len(out)


async def main(opts: argparse.Namespace) -> None:
    print(f"load average at start: {load()}")
    cache = opts.cache.expanduser().resolve()
    (cache / "logs").mkdir(parents=True, exist_ok=True)
    fx = build(cache / "work", entries=LIST_ENTRIES, copies=1)
    adapters: list[Adapter] = [Reference(cache, fx), Rootbound(cache, fx)]
    skipped: dict[str, str] = {}
    async with AsyncExitStack() as stack:
        sessions = await open_sessions(stack, adapters, cache / "logs", skipped)
        for label, why in skipped.items():
            print(f"{label}: SKIPPED — {why} (compare with the numbers in issue 15)")
        live = [s.adapter for s in sessions]
        rows: list[tuple[str, dict[str, Outcome], dict[str, int]]] = []
        for op in (o for o in OPS if o.key in TIMED):
            title = op.title.format(fx=fx, n=len(fx.concurrent))
            outcomes = await run_op(op, live, fx, opts.rounds, opts.warmup)
            print_op(title, op.counted, outcomes)
            texts = {}
            for a in live:  # one more call, untimed, for the size of what the model reads
                call = op.call(a, fx)
                if not isinstance(call, str):
                    texts[a.label] = text_bytes(await call.run())
            rows.append((title, outcomes, texts))
        rb = next((a for a in live if a.key == "rootbound"), None)
        greps = []
        if rb is not None:
            for context in (0, 2):
                greps.append((context, *await grep_sizes(rb, fx.work, fx.corpus_one, fx.literal, context)))
    print("\n| operation | reference ms | rootbound ms | rootbound / reference | text KB (ref / rootbound) |")
    print("|---|---|---|---|---|")
    ref = adapters[0].label
    for title, outcomes, texts in rows:
        med = {n: statistics.median(o.samples) * 1000 for n, o in outcomes.items() if o.samples and not o.baseline}
        r, b = med.get(ref), med.get("rootbound")
        ratio = f"{b / r:.2f}x" if r and b else "—"
        sizes = " / ".join(f"{texts[n] / 1024:,.1f}" if n in texts else "—" for n in (ref, "rootbound"))
        print(f"| {title} | {f'{r:.2f}' if r else '—'} | {f'{b:.2f}' if b else '—'} | {ratio} | {sizes} |")
    for context, ours, ours_bytes, theirs, rg_bytes in greps:
        ratio = ours_bytes / rg_bytes if rg_bytes else float("nan")
        verdict = "ok" if ratio <= TARGET else f"over {TARGET}x"
        print(f"| grep `{fx.literal}`{f' -C{context}' if context else ''}, stdlib: text bytes vs `rg -n` | "
              f"{ours} matches | {theirs} rg lines | {ratio:.2f}x ({verdict}) | {ours_bytes / 1024:,.1f} vs "
              f"{rg_bytes / 1024:,.1f} |")
    print(f"\nload average at end: {load()}")


def options() -> argparse.Namespace:
    cache = Path.home() / ".cache" / "rootbound-bench"
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=15, help="timed rounds per operation (default 15)")
    p.add_argument("--warmup", type=int, default=2, help="untimed rounds first (default 2)")
    p.add_argument("--cache", type=Path, default=cache, help=f"installs, logs and the fixture (default {cache})")
    return p.parse_args()


if __name__ == "__main__":
    anyio.run(main, options())
