"""The search walk (`fs.trees.search_walk`, and `find` on it: grep's and glob's) finds exactly what the one
walker (`fs.trees.walk`) yields, filtered by the same test: the same entries, in the same order, cut at the same
place, with the same ignore rules, depths and kinds. Real files in a temp folder: a checkout-like tree, links in
and out, a FIFO, the server's temporary names."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from rootbound.fs.ignores import Ignores
from rootbound.fs.trees import find, walk
from tests.test_search_ignores import checkout


@pytest.fixture
def tree(tmp_path: Path) -> Iterator[int]:
    ws, outside = tmp_path / "ws", tmp_path / "outside"
    ws.mkdir()
    outside.mkdir()
    checkout(ws, outside)
    (ws / "deep" / "a" / "b" / "c").mkdir(parents=True)
    (ws / "deep" / "a" / "b" / "c" / "d.py").write_text("x")
    os.symlink("pkg", ws / "pkglink")
    os.symlink(outside, ws / "outlink")
    os.symlink("app.py", ws / "applink.py")
    os.mkfifo(ws / "pipe.py")
    (ws / ".rootbound-0123456789abcdef.tmp").mkdir()
    (ws / ".rootbound-0123456789abcdef.tmp" / "hidden.py").write_text("x")
    fd = os.open(ws, os.O_RDONLY | os.O_DIRECTORY)
    yield fd
    os.close(fd)


@pytest.mark.parametrize("pattern, on_path", [(r".*\.py\Z", False), (r".*\Z", False), (r"(.*/)?[a-d]\Z", True),
                                             (r"pkg(/.*)?\Z", True)])
@pytest.mark.parametrize("kind", [None, "file", "directory", "symlink"])
@pytest.mark.parametrize("max_depth", [None, 1, 3])
@pytest.mark.parametrize("ignored", [False, True])
def test_find_is_walk_filtered(tree: int, pattern: str, on_path: bool, kind: str | None, max_depth: int | None,
                               ignored: bool) -> None:
    test = re.compile(pattern).match
    walked = [(e.path, e.kind, e.lstat()) for e in walk(tree, max_depth=max_depth,
                                                       ignores=Ignores() if ignored else None)
              if (kind is None or e.kind == kind) and test(e.path if on_path else e.name)]
    for max_results in sorted({1, 5, max(1, len(walked) - 1), max(1, len(walked)), 10_000}):
        got, truncated = find(tree, test, on_path=on_path, kind=kind, max_depth=max_depth, max_results=max_results,
                              ignores=Ignores() if ignored else None)
        assert [(p, k, (s.st_ino, s.st_size, s.st_mtime)) for p, k, s in got] == [
            (p, k, (s.st_ino, s.st_size, s.st_mtime)) for p, k, s in walked[:max_results]]
        assert truncated == (len(walked) > max_results)


def test_the_tree_has_something_for_each_kind(tree: int) -> None:
    kinds = {e.kind for e in walk(tree, ignores=Ignores())}
    assert kinds == {"file", "directory", "symlink", "other"}
