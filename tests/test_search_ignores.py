"""grep and glob leave out what developers ignore (issue 15, item 5): `.git/`, `.gitignore` and `.ignore` files
(nested, and those above the search's start up to the root), `.git/info/exclude`; hidden files are searched;
`include_ignored: true` searches everything. Before, `grep "def main"` on a checkout found 63 of 76 matches in
`.venv`."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import Harness, MakeServer
from tests.test_search import grep_mode

pytestmark = pytest.mark.anyio
__all__ = ["grep_mode"]  # the fixture, used by name

MANY = [f"many/f{n:02}.py" for n in range(80)]  # more than one batch (64 files): the helper process takes some
KEPT = sorted(["app.py", ".tool.py", ".hidden/config.py", "pkg/keep.py", "docs/notes.log", "linked/x.py", *MANY])
IGNORED = sorted([".venv/lib/site.py", *(f".venv/lib/m{n:02}.py" for n in range(80)), "debug.log",
                  "secret-notes.txt", "pkg/gen.py", "pkg/sub/deep.py", "vendor/lib.py", "build/out.py",
                  ".git/config"])


def checkout(ws: Path, outside: Path) -> None:
    """A checkout-like tree: every file holds `def main`."""
    files = {
        ".gitignore": ".venv/\n*.log\nbuild\n!/../outside/\n!../**\n",
        ".ignore": "vendor/\n",
        ".git/info/exclude": "secret-notes.txt\n",
        "pkg/.gitignore": "*.py\n!keep.py\n",
        "docs/.ignore": "!*.log\n",  # .ignore beats the root's .gitignore
    }
    for name, text in files.items():
        (ws / name).parent.mkdir(parents=True, exist_ok=True)
        (ws / name).write_text(text)
    for name in [*KEPT, *IGNORED]:
        (ws / name).parent.mkdir(parents=True, exist_ok=True)
        (ws / name).write_text("def main():\n    pass\n")
    # A symlinked ignore file is passed by: it could name anything, and it is not the root's to follow.
    (outside / "all").write_text("*\n")
    (ws / "linked" / ".gitignore").symlink_to(outside / "all")


def found(data: dict[str, object], key: str) -> list[str]:
    matches = data["matches"]
    assert isinstance(matches, list)
    return sorted({m[key] for m in matches})


async def test_grep_leaves_out_git_and_ignored_files(server: Harness, workspace: Path, outside: Path,
                                                     grep_mode: str) -> None:
    checkout(workspace, outside)
    got = await server.ok("grep", root="workspace", pattern="def main", max_results=1000)
    assert found(got, "file") == KEPT
    everything = await server.ok("grep", root="workspace", pattern="def main", max_results=1000,
                                 include_ignored=True)
    assert found(everything, "file") == sorted(KEPT + IGNORED)
    assert "OUTSIDE-SECRET" not in str(everything)  # no rule leads the walk out of the root


async def test_glob_leaves_out_git_and_ignored_entries(server: Harness, workspace: Path, outside: Path) -> None:
    checkout(workspace, outside)
    got = await server.ok("glob", root="workspace", pattern="**/*.py", max_results=1000)
    assert found(got, "path") == sorted(p for p in KEPT if p.endswith(".py"))
    dirs = await server.ok("glob", root="workspace", pattern="**", type_filter="directory")
    assert found(dirs, "path") == [".hidden", "docs", "linked", "many", "pkg", "pkg/sub"]  # no .git, .venv, vendor
    everything = await server.ok("glob", root="workspace", pattern="**/*.py", max_results=1000,
                                 include_ignored=True)
    assert found(everything, "path") == sorted(p for p in KEPT + IGNORED if p.endswith(".py"))
    hidden = await server.ok("glob", root="workspace", pattern=".*")
    assert found(hidden, "path") == [".gitignore", ".hidden", ".ignore", ".tool.py"]


async def test_rules_above_the_start_apply_below_it(server: Harness, workspace: Path, outside: Path) -> None:
    checkout(workspace, outside)
    sub = await server.ok("grep", root="workspace", pattern="def main", path="pkg/sub")
    assert sub["matches"] == []  # pkg/.gitignore's *.py, read though the search starts below it
    assert found(await server.ok("grep", root="workspace", pattern="def main", path="pkg/sub",
                                 include_ignored=True), "file") == ["pkg/sub/deep.py"]
    assert found(await server.ok("glob", root="workspace", pattern="*", path="pkg"), "path") == \
        ["pkg/.gitignore", "pkg/keep.py", "pkg/sub"]
    assert found(await server.ok("grep", root="workspace", pattern="def main", path="docs"), "file") == \
        ["docs/notes.log"]
    # A file named outright is searched, ignored or not (as ripgrep does).
    assert found(await server.ok("grep", root="workspace", pattern="def main", path=".venv/lib/site.py"),
                 "file") == [".venv/lib/site.py"]


async def test_a_root_inside_a_checkout_uses_its_own_rules_only(make_server: MakeServer, tmp_path: Path) -> None:
    """The root is a folder of a repository: the repository's .gitignore above the root is not read."""
    repo = tmp_path / "repo"
    (repo / "src").mkdir(parents=True)
    (repo / ".gitignore").write_text("*.py\n")
    (repo / "src" / "a.py").write_text("def main(): pass\n")
    server = await make_server({"src": repo / "src"})
    assert found(await server.ok("grep", root="src", pattern="def main"), "file") == ["a.py"]

