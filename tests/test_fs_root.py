"""The filesystem core directly, table-driven in the manner of Go's os/root_test.go, under both resolvers.

Each case is a fixture tree (`makefs`: "d/" a directory, "f" a file, "a => b" a symlink, "p|" a FIFO; `$ABS`
is the root's host path), a path as an agent would give it, the entry it must reach once every symlink is
followed (`target`), the entry itself when its last component is a symlink (`ltarget`), and the error the
resolution must end in. Every operation — open, the target of a change, mkdir, remove, rename, an atomic
write — runs every case, against the kernel's resolver and the portable walk (`resolver`). Whatever the
outcome, nothing outside the root changes. The MCP tests drive the same code end to end.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from rootbound.errors import Kind, PathError
from rootbound.fs import Kinds, Root
from rootbound.fs.guards import Guard
from rootbound.fs.trees import DIRECTORY, FILE, OTHER, SYMLINK, CopyStats, Skip, TooDeep, copy_tree, walk
from tests.conftest import tree

NO_RULES = Guard([])


@dataclass(frozen=True)
class Case:
    name: str
    fs: tuple[str, ...]
    path: str
    target: str | None  # reached through every symlink; for an escape, the entry that must stay untouched
    ltarget: str | None = None  # the last component itself, when it is a symlink
    error: Kind | None = None
    makes_parents: bool = False  # the error is a missing parent directory, which writes and mkdir create


CASES = [
    Case("plain path", (), "target", "target"),
    Case("path in directory", ("a/b/c/",), "a/b/c/target", "a/b/c/target"),
    Case("symlink", ("link => target",), "link", "target", ltarget="link"),
    Case("symlink dotdot slash", ("link => ../",), "link", None, ltarget="link", error=Kind.ESCAPE),
    Case("symlink ending in slash", ("dir/", "link => dir/"), "link/target", "dir/target"),
    Case("symlink chain", ("link => a/b/c/target", "a/b => e", "a/e => ../f", "f => g/h/i", "g/h/i => ..", "g/c/"),
         "link", "g/c/target", ltarget="link"),
    Case("path with dot", ("a/b/",), "./a/./b/./target", "a/b/target"),
    Case("path with dotdot", ("a/b/",), "a/../a/b/../../a/b/../b/target", "a/b/target"),
    Case("leading slash is the root", ("a/",), "/a/target", "a/target"),
    Case("dotdot no symlink", ("a/",), "a/../target", "target"),
    Case("dotdot after symlink", ("a => b/c", "b/c/"), "a/../target", "b/target"),
    Case("dotdot before symlink", ("a => b/c", "b/c/"), "b/../a/target", "b/c/target"),
    Case("symlink ends in dot", ("a => b/.", "b/"), "a/target", "b/target"),
    Case("path escapes", (), "../ROOT/target", "target", error=Kind.ESCAPE),
    Case("long path escapes", ("a/",), "a/../../ROOT/target", "target", error=Kind.ESCAPE),
    Case("absolute symlink", ("link => $ABS/target",), "link", "target", ltarget="link", error=Kind.ESCAPE),
    Case("relative symlink out and back", ("link => ../ROOT/target",), "link", "target", ltarget="link",
         error=Kind.ESCAPE),
    Case("symlink chain escapes", ("link => a/b/c/target", "a/b => e", "a/e => ../../ROOT", "c/"), "link",
         "c/target", ltarget="link", error=Kind.ESCAPE),
    Case("symlink to outside", ("out => ../OUT",), "out/secret", None, error=Kind.ESCAPE),
    Case("dangling symlink to outside", ("planted => ../OUT/planted",), "planted", None, ltarget="planted",
         error=Kind.ESCAPE),
    Case("symlink loop", ("a => a",), "a", None, ltarget="a", error=Kind.LOOP),
    Case("directory does not exist", (), "a/file", "a/file", error=Kind.NOT_FOUND, makes_parents=True),
    Case("through a file", ("f",), "f/target", None, error=Kind.THROUGH_FILE),
]


def makefs(base: Path, entries: tuple[str, ...]) -> Path:
    root, out = base / "ROOT", base / "OUT"
    root.mkdir()
    out.mkdir()
    (out / "secret").write_text("OUTSIDE")
    for entry in entries:
        entry = entry.replace("$ABS", str(root))
        name, _, link = entry.partition(" => ")
        path = root / name.rstrip("/|")
        path.parent.mkdir(parents=True, exist_ok=True)
        if link:
            path.symlink_to(link)
        elif name.endswith("/"):
            path.mkdir(parents=True, exist_ok=True)
        elif name.endswith("|"):
            os.mkfifo(path)
        else:
            path.write_text(name)
    return root


def run(case: Case, tmp_path: Path, prepare: Callable[[Path], None], op: Callable[[Root], object]
        ) -> tuple[object, PathError | None, Path]:
    """Make the case's tree, `prepare` it (given the root's host path), run `op` on a Root over it.

    Nothing outside the root may change, and nothing inside either when the operation fails."""
    root_path = makefs(tmp_path, case.fs)
    prepare(root_path)
    outside, inside = tree(tmp_path / "OUT"), tree(root_path)
    root = Root.at("r", str(root_path), ["*"])
    try:
        return op(root), None, root_path
    except PathError as exc:
        assert tree(root_path) == inside, "a failed operation changed the root"
        return None, exc, root_path
    finally:
        root.close()
        assert tree(tmp_path / "OUT") == outside, "something outside the root changed"


def outcome(case: Case, *, acts_on_link: bool = False, makes_parents: bool = False) -> tuple[Kind | None, str | None]:
    """What an operation must end in: (error kind or None, the entry it acts on)."""
    if acts_on_link and case.ltarget is not None:
        return None, case.ltarget  # the last symlink itself is removed or moved, never followed
    if makes_parents and case.makes_parents:
        return None, case.target
    return case.error, case.target


def _file_at(rel: str | None) -> Callable[[Path], None]:
    def prepare(root: Path) -> None:
        if rel is not None:
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_text("TARGET")
    return prepare


def _existing(case: Case) -> Callable[[Path], None]:
    """A file at the case's target, unless a missing directory on the way is the point of the case."""
    return _file_at(None if case.makes_parents else case.target)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_open_file(case: Case, tmp_path: Path, resolver: str) -> None:
    error, target = outcome(case)

    def read(root: Root) -> bytes:
        with root.open(case.path, Kinds.FILE) as file:
            return file.read_at(100, 0)

    got, exc, _ = run(case, tmp_path, _file_at(target if error is None else None), read)
    assert (exc.kind if exc else None) == error
    if error is None:
        assert got == b"TARGET"


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_open_directory(case: Case, tmp_path: Path, resolver: str) -> None:
    error, target = outcome(case)

    def prepare(root: Path) -> None:
        if error is None and target is not None:
            (root / target).mkdir(parents=True)
            (root / target / "found").write_text("")

    def listing(root: Root) -> list[str]:
        return [name for name, _, _ in root.read_folder(case.path, 0, 10)[1]]

    got, exc, _ = run(case, tmp_path, prepare, listing)
    assert (exc.kind if exc else None) == error
    if error is None:
        assert got == ["found"]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_write_atomic(case: Case, tmp_path: Path, resolver: str) -> None:
    error, target = outcome(case, makes_parents=True)

    def write(root: Root) -> None:
        with root.target(case.path, NO_RULES, make_parents=True) as entry:
            entry.write_atomic(b"NEW", like=entry.regular())

    _, exc, root_path = run(case, tmp_path, lambda _: None, write)
    assert (exc.kind if exc else None) == error
    if error is None:
        assert target is not None and (root_path / target).read_bytes() == b"NEW"


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_mkdir(case: Case, tmp_path: Path, resolver: str) -> None:
    error, target = outcome(case, makes_parents=True)
    got, exc, root_path = run(case, tmp_path, lambda _: None, lambda root: root.mkdir(case.path, NO_RULES))
    assert (exc.kind if exc else None) == error
    if error is None:
        assert got is True and target is not None and (root_path / target).is_dir()


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_remove(case: Case, tmp_path: Path, resolver: str) -> None:
    error, entry = outcome(case, acts_on_link=True)
    kept = case.target if entry == case.ltarget else None  # a link's target stays when the link goes
    _, exc, root_path = run(case, tmp_path, _existing(case), lambda root: root.remove(case.path, NO_RULES))
    assert (exc.kind if exc else None) == error
    if error is None:
        assert entry is not None and not os.path.lexists(root_path / entry)
        if kept is not None:
            assert (root_path / kept).read_text() == "TARGET"


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_rename(case: Case, tmp_path: Path, resolver: str) -> None:
    error, entry = outcome(case, acts_on_link=True)

    def rename(root: Root) -> object:
        return root.rename(case.path, root, "renamed", NO_RULES)

    _, exc, root_path = run(case, tmp_path, _existing(case), rename)
    assert (exc.kind if exc else None) == error
    if error is None:
        moved = root_path / "renamed"
        assert os.path.lexists(moved)
        if entry == case.ltarget and entry is not None:
            assert moved.is_symlink() and not os.path.lexists(root_path / entry)  # the link itself moved
        else:
            assert moved.read_text() == "TARGET"


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_lstat_and_stat(case: Case, tmp_path: Path, resolver: str) -> None:
    error, target = outcome(case)

    def look(root: Root) -> tuple[bool, bool]:
        return stat.S_ISLNK(root.lstat(case.path).st_mode), root.stat(case.path).st_size == len("TARGET")

    got, exc, _ = run(case, tmp_path, _file_at(target if error is None else None), look)
    if error is None:
        assert exc is None and got == (case.ltarget is not None, True)
    else:
        assert exc is not None


def test_fifo_is_refused_unopened(tmp_path: Path, resolver: str) -> None:
    case = Case("fifo", ("p|",), "p", "p")
    for n, (kinds, kind) in enumerate(((Kinds.FILE, Kind.NOT_REGULAR), (Kinds.DIRECTORY, Kind.NOT_DIR),
                                       (Kinds.FILE | Kinds.DIRECTORY, Kind.NOT_REGULAR))):
        (tmp_path / str(n)).mkdir()
        _, exc, _ = run(case, tmp_path / str(n), lambda _: None, lambda root: root.open("p", kinds))  # noqa: B023
        assert exc is not None and exc.kind is kind and exc.fields["type"] == "fifo"


def test_open_other_gives_a_handle_that_cannot_read(tmp_path: Path) -> None:
    got, exc, _ = run(Case("fifo", ("p|",), "p", "p"), tmp_path, lambda _: None,
                      lambda root: root.open("p", Kinds.FILE | Kinds.DIRECTORY | Kinds.OTHER))
    assert exc is None
    with got as file, pytest.raises(OSError):  # type: ignore[attr-defined]
        file.read_at(1, 0)


def test_open_root_beneath(tmp_path: Path, resolver: str) -> None:
    for path, error in (("sub", None), ("link", None), ("out", Kind.ESCAPE), ("f/x", Kind.THROUGH_FILE)):
        case = Case(path, ("sub/", "sub/inner", "link => sub", "out => ../OUT", "f"), path, None)
        (tmp_path / path[0]).mkdir()
        got, exc, _ = run(case, tmp_path / path[0], lambda _: None,
                          lambda root: root.open_root("c", case.path, ["*"]))  # noqa: B023
        assert (exc.kind if exc else None) == error
        if got is not None:
            assert isinstance(got, Root)
            assert [n for n, _, _ in got.read_folder("", 0, 10)[1]] == ["inner"]
            got.close()


# -- the one walker ---------------------------------------------------------------------------------


TREE = ("a/b/c/deep", "a/file", "a/link_in => b", "a/link_out => ../../OUT", "a/loop => loop", "fifo|", "z",
        ".rootbound-0123456789abcdef.tmp")


@pytest.mark.parametrize("strict", [False, True], ids=["search", "change"])
def test_walk_lists_links_and_never_enters_them(tmp_path: Path, strict: bool) -> None:
    root_path = makefs(tmp_path, TREE)
    fd = os.open(root_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        got = [(e.path, e.kind) for e in walk(fd, strict=strict)]
    finally:
        os.close(fd)
    expected = [("a", DIRECTORY), ("a/b", DIRECTORY), ("a/b/c", DIRECTORY), ("a/b/c/deep", FILE), ("a/file", FILE),
                ("a/link_in", SYMLINK), ("a/link_out", SYMLINK), ("a/loop", SYMLINK), ("fifo", OTHER), ("z", FILE)]
    if strict:  # a change sees the server's temporary entries too (a search hides them)
        expected.insert(0, (".rootbound-0123456789abcdef.tmp", FILE))
    assert got == expected


def test_walk_depth_limits(tmp_path: Path) -> None:
    root_path = makefs(tmp_path, ("a/b/c/d/e",))
    fd = os.open(root_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        assert [e.path for e in walk(fd, max_depth=2)] == ["a", "a/b"]  # a search leaves deeper levels out
        with pytest.raises(TooDeep) as refused:  # a change refuses what it cannot see whole
            list(walk(fd, max_depth=2, strict=True))
        assert refused.value.rel == "a/b"
    finally:
        os.close(fd)


def test_copy_tree_recreates_what_stays_inside_and_reports_the_rest(tmp_path: Path) -> None:
    root_path = makefs(tmp_path, TREE)
    (tmp_path / "copy").mkdir()
    src = os.open(root_path, os.O_RDONLY | os.O_DIRECTORY)
    dst = os.open(tmp_path / "copy", os.O_RDONLY | os.O_DIRECTORY)
    stats = CopyStats()
    try:
        copy_tree(src, dst, stats, check=lambda rel: None, link_ok=lambda rel, text: not text.startswith(".."))
    finally:
        os.close(src)
        os.close(dst)
    assert sorted((p, why) for p, why, _ in stats.skipped) == [("a/link_out", Skip.LINK_LEADS_OUT),
                                                               ("fifo", Skip.SPECIAL)]
    assert os.readlink(tmp_path / "copy" / "a" / "link_in") == "b"
    assert (tmp_path / "copy" / "a" / "b" / "c" / "deep").read_text() == "a/b/c/deep"
    assert stats.files == 4 and stats.dirs == 3
