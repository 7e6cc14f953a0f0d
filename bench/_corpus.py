"""The grep and glob benchmarks' corpora (this interpreter's standard library, once and ten times)
and their shared command line."""

from __future__ import annotations

import argparse
import shutil
import sysconfig
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio

COPIES = 10


def make_corpus(base: Path) -> dict[str, Path]:
    """`stdlib` (one copy of this interpreter's standard library) and `stdlib10` (ten copies) under `base`."""
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    one, ten = base / "stdlib", base / "stdlib10"
    if not one.exists():
        shutil.copytree(stdlib, one, symlinks=True, ignore=shutil.ignore_patterns("site-packages", "__pycache__"))
    if not ten.exists():
        for i in range(COPIES):
            shutil.copytree(one, ten / f"copy{i}", symlinks=True)
    return {"stdlib": one, "stdlib10": ten}


def corpus_main(doc: str | None, bench: Callable[[dict[str, Path], int], Awaitable[Any]]) -> None:
    """Parse `--runs`/`--keep`, build (or reuse) the corpora, run `bench` on them."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--keep", type=Path, help="build (or reuse) the corpora in this folder")
    opts = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="rootbound-bench-") as tmp:
        base = opts.keep or Path(tmp)
        base.mkdir(parents=True, exist_ok=True)
        anyio.run(bench, make_corpus(base), opts.runs)
