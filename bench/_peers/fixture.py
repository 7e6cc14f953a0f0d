"""The folder every server works on: text files to read, a folder of many entries, the stdlib corpora to search,
a folder to write into. Built once in the cache and reused while its shape matches the options."""

from __future__ import annotations

import itertools
import shutil
import sysconfig
from dataclasses import dataclass, field
from pathlib import Path

from _corpus import COPIES, make_corpus

KB = 1024
READ_SMALL, READ_LARGE, WRITE_SIZE = 10 * KB, 1024 * KB, 100 * KB
CONCURRENT = 50
LIST_ENTRIES = 10_000
LITERAL = "NotImplementedError"
GLOB = "**/*.py"


def source_text(size: int) -> bytes:
    """`size` bytes of real Python source (quotes, backslashes, tabs: what JSON must escape), whole lines."""
    lines = (Path(sysconfig.get_paths()["stdlib"]) / "argparse.py").read_bytes().splitlines(keepends=True)
    out = bytearray()
    for line in itertools.cycle(lines):
        if len(out) + len(line) >= size:
            break
        out += line
    pad = size - len(out)
    return bytes(out) + (b"#" * (pad - 1) + b"\n" if pad else b"")


def line_count(text: str) -> int:
    """Lines in `text`, an unterminated last line included (some servers strip the final newline)."""
    return text.count("\n") + (1 if text and not text.endswith("\n") else 0)


@dataclass(frozen=True)
class Fixture:
    """Paths are relative to `work`, the one folder every server is given."""
    work: Path
    entries: int
    copies: int
    read_small: str = "files/read-10k.txt"
    read_large: str = "files/read-1m.txt"
    concurrent: tuple[str, ...] = tuple(f"files/many/{i:02}.txt" for i in range(CONCURRENT))
    listing: str = "list"
    corpus_one: str = "corpus/stdlib"
    corpus_many: str = field(default="")
    write_dir: str = "write"
    literal: str = LITERAL
    glob: str = GLOB

    def abs(self, rel: str) -> Path:
        return self.work / rel

    def write_content(self) -> str:
        return source_text(WRITE_SIZE).decode()


def _file(path: Path, size: int) -> None:
    if not path.exists() or path.stat().st_size != size:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(source_text(size))


def _listing(folder: Path, entries: int) -> None:
    if folder.is_dir() and len(list(folder.iterdir())) == entries:
        return
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    for i in range(entries):
        (folder / f"entry-{i:06}.txt").touch()


def _corpora(base: Path, copies: int) -> str:
    """Builds the corpora; returns the big one's path relative to the work folder."""
    if copies == COPIES:  # the corpora bench/grep.py and bench/glob.py use
        return str(make_corpus(base)["stdlib10"].relative_to(base.parent))
    one = base / "stdlib"
    if not one.exists():
        shutil.copytree(sysconfig.get_paths()["stdlib"], one, symlinks=True,
                        ignore=shutil.ignore_patterns("site-packages", "__pycache__"))
    if copies == 1:
        return str(one.relative_to(base.parent))
    many = base / f"stdlib{copies}"
    if not many.exists():
        for i in range(copies):
            shutil.copytree(one, many / f"copy{i}", symlinks=True)
    return str(many.relative_to(base.parent))


def build(work: Path, entries: int = LIST_ENTRIES, copies: int = COPIES, corpus: bool = True) -> Fixture:
    """The fixture under `work`, built or topped up. `corpus=False` skips the corpora (no search operation chosen)."""
    work.mkdir(parents=True, exist_ok=True)
    many = _corpora(work / "corpus", copies) if corpus else f"corpus/stdlib{copies}"
    fx = Fixture(work=work, entries=entries, copies=copies, corpus_many=many)
    _file(fx.abs(fx.read_small), READ_SMALL)
    _file(fx.abs(fx.read_large), READ_LARGE)
    for rel in fx.concurrent:
        _file(fx.abs(rel), READ_SMALL)
    _listing(fx.abs(fx.listing), entries)
    fx.abs(fx.write_dir).mkdir(exist_ok=True)
    return fx
