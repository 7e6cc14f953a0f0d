"""Undo through the journal: before-states put back newest first, refusals per file, and the undo itself journaled."""

from __future__ import annotations

import os
import stat
import threading
import time
from pathlib import Path

import pytest

from rootbound.journal import locks, query
from rootbound.journal.model import APPLIED
from rootbound.journal.undo import Report, undo

from ._journal import Driver


@pytest.fixture
def ws(tmp_path: Path) -> Driver:
    d = Driver(tmp_path)
    yield d
    d.close()


def run_undo(d: Driver, ids: list[str] | None = None, *, force: bool = False, dry_run: bool = False,
             connection: str | None = None, since: float | None = None) -> Report:
    found = query.select([d.store], ids=ids, connection=connection, since=since, commands=False)
    return undo(d.journal, found, {d.root.real_path: d.fd}, force=force, dry_run=dry_run, connection="cli",
                client="rootbound undo")


def test_undo_puts_back_the_old_content_mode_and_mtime(ws: Driver) -> None:
    f = ws.path / "a.txt"
    f.write_text("old\n")
    os.chmod(f, 0o640)
    os.utime(f, ns=(1_000_000_000, 1_500_000_000_123))
    entry_id = ws.write("a.txt", "new\n")
    report = run_undo(ws, [entry_id])
    assert [o.action for o in report.outcomes] == ["restored"] and report.undone == [entry_id]
    assert f.read_text() == "old\n"
    st = f.stat()
    assert stat.S_IMODE(st.st_mode) == 0o640 and st.st_mtime_ns == 1_500_000_000_123
    original = ws.store.get(entry_id)
    assert original is not None and original.undone_by == report.undo_id
    the_undo = ws.store.get(report.undo_id or "")
    assert the_undo is not None and the_undo.tool == "undo" and the_undo.undoes == [entry_id]
    assert the_undo.status == APPLIED and (the_undo.connection, the_undo.client) == ("cli", "rootbound undo")


def test_several_changes_are_undone_newest_first(ws: Driver) -> None:
    f = ws.path / "a.txt"
    f.write_text("v0")
    ids = [ws.write("a.txt", "v1"), ws.write("a.txt", "v2"), ws.write("a.txt", "v3")]
    report = run_undo(ws, ids)
    assert sorted(report.undone) == sorted(ids) and not report.refused
    assert f.read_text() == "v0"


def test_a_file_edited_since_is_refused_unless_forced_and_the_forced_undo_can_be_undone(ws: Driver) -> None:
    f = ws.path / "a.txt"
    f.write_text("mine")
    entry_id = ws.write("a.txt", "agent's")
    f.write_text("edited by hand since")  # outside the journaled tools
    report = run_undo(ws, [entry_id])
    [refusal] = report.refused
    assert refusal.path == "ws:a.txt" and "changed since, outside the journaled file tools" in refusal.reason
    assert "force" in refusal.reason and report.undo_id is None
    assert f.read_text() == "edited by hand since"  # nothing changed
    forced = run_undo(ws, [entry_id], force=True)
    assert forced.undone == [entry_id] and f.read_text() == "mine"
    back = run_undo(ws, [forced.undo_id or ""])  # the hand edit was captured by the forced undo
    assert back.undone == [forced.undo_id] and f.read_text() == "edited by hand since"
    original = ws.store.get(entry_id)
    assert original is not None and original.undone_by is None  # in force again


def test_a_newer_journaled_change_is_named_in_the_refusal(ws: Driver) -> None:
    first = ws.write("a.txt", "1")
    second = ws.write("a.txt", "2")
    report = run_undo(ws, [first])
    [refusal] = report.refused
    assert f"changed since by {second}" in refusal.reason
    assert (ws.path / "a.txt").read_text() == "2"


def test_dry_run_changes_nothing(ws: Driver) -> None:
    (ws.path / "a.txt").write_text("old")
    entry_id = ws.write("a.txt", "new")
    report = run_undo(ws, [entry_id], dry_run=True)
    assert [o.action for o in report.outcomes] == ["would restore"]
    assert (ws.path / "a.txt").read_text() == "new" and report.undo_id is None
    assert "dry run: nothing was changed" in report.lines()
    assert len(ws.store.entries()) == 1


def test_undo_brings_back_a_removed_file_symlink_and_folder(ws: Driver) -> None:
    (ws.path / "f.txt").write_text("file")
    os.symlink("f.txt", ws.path / "ln")
    tree = ws.path / "d"
    (tree / "sub").mkdir(parents=True)
    (tree / "sub" / "b.bin").write_bytes(bytes(range(256)))
    os.symlink("sub/b.bin", tree / "rel-link")
    os.chmod(tree / "sub", 0o700)
    os.chmod(tree / "sub" / "b.bin", 0o600)
    ids = [ws.remove("f.txt"), ws.remove("ln"), ws.remove_folder("d")]
    assert not (ws.path / "f.txt").exists() and not tree.exists()
    report = run_undo(ws, ids)
    assert sorted(report.undone) == sorted(ids)
    assert (ws.path / "f.txt").read_text() == "file" and os.readlink(ws.path / "ln") == "f.txt"
    assert (tree / "sub" / "b.bin").read_bytes() == bytes(range(256))
    assert os.readlink(tree / "rel-link") == "sub/b.bin"
    assert stat.S_IMODE((tree / "sub").stat().st_mode) == 0o700
    assert stat.S_IMODE((tree / "sub" / "b.bin").stat().st_mode) == 0o600


def test_undo_create_folder_removes_it_only_while_empty(ws: Driver) -> None:
    first = ws.create_folder("made")
    assert run_undo(ws, [first]).undone == [first] and not (ws.path / "made").exists()
    second = ws.create_folder("made")
    (ws.path / "made" / "x").write_text("put there since")
    report = run_undo(ws, [second])
    assert report.refused and (ws.path / "made" / "x").exists()


def test_undo_moves_back(ws: Driver) -> None:
    (ws.path / "a").mkdir()
    (ws.path / "a" / "f.txt").write_text("in a")
    (ws.path / "old.txt").write_text("replaced by the move")
    (ws.path / "new.txt").write_text("moved")
    folder = ws.move("a", "b")
    onto = ws.move("new.txt", "old.txt")
    report = run_undo(ws, [folder, onto])
    assert sorted(report.undone) == sorted([folder, onto])
    assert (ws.path / "a" / "f.txt").read_text() == "in a" and not (ws.path / "b").exists()
    assert (ws.path / "new.txt").read_text() == "moved"
    assert (ws.path / "old.txt").read_text() == "replaced by the move"


def test_undo_by_connection_and_since(ws: Driver) -> None:
    mine = ws.write("a.txt", "a", connection="me")
    theirs = ws.write("b.txt", "b", connection="them")
    report = run_undo(ws, connection="me")
    assert report.undone == [mine] and not (ws.path / "a.txt").exists() and (ws.path / "b.txt").exists()
    later = ws.write("c.txt", "c", connection="them")
    report = run_undo(ws, since=ws.store.get(later).time - 0.0001)  # type: ignore[union-attr]
    assert report.undone == [later] and (ws.path / "b.txt").exists() and theirs


def test_undo_never_follows_a_symlink_out_of_the_root(ws: Driver, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (ws.path / "d").mkdir()
    (ws.path / "d" / "f.txt").write_text("old")
    entry_id = ws.write("d/f.txt", "new")
    (ws.path / "d" / "f.txt").unlink()
    (ws.path / "d").rmdir()
    os.symlink(str(outside), ws.path / "d")  # d now leads out of the root
    for force in (False, True):
        report = run_undo(ws, [entry_id], force=force)
        assert report.refused and not report.undone
    assert list(outside.iterdir()) == []


def test_a_damaged_blob_is_refused_and_nothing_is_written(ws: Driver) -> None:
    f = ws.path / "a.txt"
    f.write_text("old content")
    held = os.open(f, os.O_WRONLY)  # a process that still has the old file open...
    entry_id = ws.write("a.txt", "new")
    os.pwrite(held, b"OVERWRITTEN", 0)  # ...writes to it after the change: the linked blob changes
    os.close(held)
    report = run_undo(ws, [entry_id])
    [refusal] = report.refused
    assert "damaged" in refusal.reason
    assert f.read_text() == "new"


def test_an_undo_waits_for_a_change_in_progress(ws: Driver) -> None:
    (ws.path / "a.txt").write_text("v0")
    entry_id = ws.write("a.txt", "v1")
    change = ws.journal.begin(tool="write_file", root=ws.root)  # holds the root's lock, shared
    with pytest.raises(locks.Busy), locks.exclusive([ws.store.lock_path], timeout=0.2):
        pass
    finished: list[float] = []
    thread = threading.Thread(target=lambda: (run_undo(ws, [entry_id]), finished.append(time.monotonic())))
    thread.start()
    time.sleep(0.3)
    assert not finished  # still waiting
    released = time.monotonic()
    change.abandon()
    thread.join(10)
    assert finished and finished[0] >= released
    assert (ws.path / "a.txt").read_text() == "v0"


def test_undo_of_a_file_over_max_file_size_is_refused(tmp_path: Path) -> None:
    d = Driver(tmp_path, max_file_size=4)
    (d.path / "big").write_text("0123456789")
    entry_id = d.write("big", "x")
    [refusal] = run_undo(d, [entry_id]).refused
    assert "max_file_size" in refusal.reason and (d.path / "big").read_text() == "x"
    d.close()

