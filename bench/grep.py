"""grep through an MCP client call vs ripgrep, on the Python standard library and on ten copies of it.

    .venv/bin/python bench/grep.py [--runs N] [--keep DIR]

The corpus is this interpreter's standard library copied into a temp folder without
`site-packages` and `__pycache__` (about 2,500 files, 100 MB); the big corpus is ten
such copies. For each corpus and each pattern (a literal and a regex) the two tools
take turns in the same run, on a warm page cache:

* `grep` as an in-memory MCP client call, so argument validation, the search, result
  serialization and the client's own validation of the result all count;
* `rg` (PyPI ripgrep==14.1.0) as a subprocess told to do the same job: no ignore
  files, hidden files included, no symlinks followed (its default), line numbers,
  its default binary skipping.

The numbers of matching lines must agree. Medians and the ratio grep/rg are printed;
the target is a ratio of at most 2 on both corpora.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from _corpus import corpus_main
from _util import checked, measure, print_table, served, verdict

PATTERNS = {"literal": "NotImplementedError", "regex": r"\b(TODO|FIXME|XXX)\b"}
TARGET = 2.0


def rg_binary() -> str:
    found = shutil.which("rg", path=str(Path(sys.executable).parent)) or shutil.which("rg")
    if not found:
        sys.exit("rg not found: pip install ripgrep==14.1.0")
    return found


async def bench(corpora: dict[str, Path], runs: int) -> bool:
    rg = rg_binary()
    met = True
    for label, corpus in corpora.items():
        async with served(corpus, "corpus") as (_, client):
            for kind, pattern in PATTERNS.items():
                counts: dict[str, int] = {}

                async def ours(pattern: str = pattern, counts: dict[str, int] = counts) -> None:
                    result = await client.call_tool("grep", {"root": "corpus", "pattern": pattern,
                                                             "max_results": 100_000, "timeout_seconds": 600})
                    data: dict[str, Any] = checked(result)
                    assert not data["truncated"] and not data["timed_out"], data
                    counts["grep"] = len(data["matches"])

                def theirs(pattern: str = pattern, corpus: Path = corpus, counts: dict[str, int] = counts) -> None:
                    out = subprocess.run([rg, "--no-config", "--no-ignore", "--hidden", "--no-messages", "-n",
                                          "-e", pattern, "."], cwd=corpus, capture_output=True, check=False).stdout
                    counts["rg"] = out.count(b"\n")

                samples = await measure({"grep (MCP call)": ours, "rg": theirs}, runs)
                assert counts["grep"] == counts["rg"], f"{label}/{kind}: grep found {counts['grep']} lines, " \
                                                       f"rg {counts['rg']}"
                medians = print_table(f"{label}, {kind} {pattern!r}: {counts['rg']} matching lines", samples, "rg")
                ratio = medians["grep (MCP call)"] / medians["rg"]
                verdict(f"<= {TARGET}x rg", ratio <= TARGET, f"{ratio:.2f}x")
                met &= ratio <= TARGET
    return met


if __name__ == "__main__":
    corpus_main(__doc__, bench)
