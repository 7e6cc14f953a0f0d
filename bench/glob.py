"""glob '**/*.py' through an MCP client call vs `rg --files` and a bare os.walk + fnmatch, on the stdlib corpora.

    .venv/bin/python bench/glob.py [--runs N] [--keep DIR]

Same corpora as bench/grep.py. The baseline is the least a Python program can do:
`os.walk` (no symlinks followed) and `fnmatch` on each file name, in-process, no
stat, no result building. glob does more — every directory opened beneath its
parent's handle, every match stat'ed for size and modified_at, results sorted,
serialized and validated by the client — so this shows what that costs. The
numbers of files found must agree. The target (issue 18) is at most 2x `rg --files -g '*.py'`
(PyPI ripgrep==14.1.0: no ignore files, hidden files included, no symlinks followed), in the same run.
"""

from __future__ import annotations

import fnmatch
import os
import subprocess
from pathlib import Path
from typing import Any

from _corpus import corpus_main
from _util import checked, measure, print_table, served, verdict
from grep import rg_binary

PATTERN = "**/*.py"
TARGET = 2.0


def baseline(root: Path) -> list[str]:
    found = []
    for folder, _, files in os.walk(root):
        rel = os.path.relpath(folder, root)
        for name in fnmatch.filter(files, "*.py"):
            found.append(name if rel == "." else f"{rel}/{name}")
    return found


async def bench(corpora: dict[str, Path], runs: int) -> bool:
    rg = rg_binary()
    met = True
    for label, corpus in corpora.items():
        async with served(corpus, "corpus") as (_, client):
            counts: dict[str, int] = {}

            async def ours(counts: dict[str, int] = counts) -> None:
                result = await client.call_tool("glob", {"root": "corpus", "pattern": PATTERN, "type_filter": "file",
                                                         "max_results": 100_000, "timeout_seconds": 600})
                data: dict[str, Any] = checked(result)
                assert not data["truncated"] and not data["timed_out"], data
                counts["glob"] = len(data["matches"])

            def theirs(corpus: Path = corpus, counts: dict[str, int] = counts) -> None:
                counts["walk"] = len(baseline(corpus))

            def rg_files(corpus: Path = corpus, counts: dict[str, int] = counts) -> None:
                out = subprocess.run([rg, "--no-config", "--no-ignore", "--hidden", "--no-messages", "--files",
                                      "-g", "*.py", "."], cwd=corpus, capture_output=True, check=False).stdout
                counts["rg"] = out.count(b"\n")

            samples = await measure({"glob (MCP call)": ours, "rg --files": rg_files, "os.walk+fnmatch": theirs},
                                    runs)
            assert counts["glob"] == counts["walk"] == counts["rg"], counts
            medians = print_table(f"{label}, glob {PATTERN!r}: {counts['walk']} files", samples, "rg --files")
            ratio = medians["glob (MCP call)"] / medians["rg --files"]
            verdict(f"<= {TARGET}x rg --files", ratio <= TARGET, f"{ratio:.2f}x")
            met &= ratio <= TARGET
    return met


if __name__ == "__main__":
    corpus_main(__doc__, bench)
