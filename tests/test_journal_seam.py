"""The journal's seam, driven as the file tools will drive it, on real files: what each change records."""

from __future__ import annotations

import hashlib
import os
import shutil
import time
from pathlib import Path

import pytest

from rootbound.fs import atomic
from rootbound.fs.beneath import locate
from rootbound.journal import query
from rootbound.journal.model import APPLIED, NOT_APPLIED
from rootbound.journal.undo import undo

from ._journal import Driver


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.fixture
def ws(tmp_path: Path) -> Driver:
    d = Driver(tmp_path)
    yield d
    d.close()


def test_a_write_records_the_old_content_blob_and_the_new_hash(ws: Driver) -> None:
    (ws.path / "a.txt").write_text("old\n")
    entry_id = ws.write("a.txt", "new\n")
    entry = ws.store.get(entry_id)
    assert entry is not None and entry.status == APPLIED and entry.tool == "write_file"
    assert (entry.connection, entry.client, entry.root) == ("conn-1", "test-client", "ws")
    [p] = entry.paths
    assert p.path == "a.txt" and p.before["kind"] == "file" and p.before["sha256"] == sha(b"old\n")
    assert p.before["mode"] == 0o644 and p.after == "file:" + sha(b"new\n")
    assert ws.store.blobs.read(sha(b"old\n")) == b"old\n"


def test_a_created_file_was_absent_before(ws: Driver) -> None:
    entry = ws.store.get(ws.write("new/deep.txt", "hi"))
    assert entry is not None and entry.paths[0].before == {"kind": "absent"}


def test_content_already_stored_is_not_stored_again(ws: Driver) -> None:
    (ws.path / "a.txt").write_text("same\n")
    ws.write("a.txt", "other\n")
    ws.write("a.txt", "same\n")
    ws.write("a.txt", "other\n")  # its before-state, "same", is stored already
    rows = ws.store.query("SELECT hash FROM blobs")
    assert sorted(r[0] for r in rows) == sorted({sha(b"same\n"), sha(b"other\n")})


def test_the_blob_is_a_link_to_the_old_inode_on_the_same_filesystem(ws: Driver) -> None:
    (ws.path / "a.txt").write_text("old\n")
    ino = os.stat(ws.path / "a.txt").st_ino
    ws.write("a.txt", "new\n")
    blob = os.stat(sha(b"old\n"), dir_fd=ws.store.blobs.fd)
    assert blob.st_ino == ino  # no byte copied
    assert (ws.path / "a.txt").read_text() == "new\n"


def test_on_another_filesystem_blobs_are_compressed_copies(tmp_path: Path) -> None:
    shm = Path("/dev/shm")
    if not shm.is_dir() or os.stat(shm).st_dev == os.stat(tmp_path).st_dev:
        pytest.skip("no second filesystem (/dev/shm) here")
    jdir = Path(os.path.realpath(shm)) / f"rootbound-journal-test-{os.getpid()}-{time.time_ns()}"
    try:
        d = Driver(tmp_path, journal_dir=jdir)
        text = "a line of text that compresses well\n" * 200
        (d.path / "a.txt").write_text(text)
        d.write("a.txt", "new\n")
        name = sha(text.encode()) + ".z"
        st = os.stat(name, dir_fd=d.store.blobs.fd)
        assert st.st_size < len(text) // 4
        assert d.store.blobs.read(sha(text.encode())) == text.encode()
        entry = d.write("a.txt", "newer\n")
        assert [e.status for e in d.store.entries()] == [APPLIED, APPLIED]
        report = undo(d.journal, query.select([d.store]), {d.root.real_path: d.fd})
        assert len(report.undone) == 2 and entry in report.undone
        assert (d.path / "a.txt").read_text() == text  # restored from the compressed copy
        d.close()
    finally:
        shutil.rmtree(jdir, ignore_errors=True)


def test_a_file_over_max_file_size_is_recorded_by_hash_only(tmp_path: Path) -> None:
    d = Driver(tmp_path, max_file_size=10)
    (d.path / "big.bin").write_bytes(b"x" * 100)
    entry = d.store.get(d.write("big.bin", "small"))
    assert entry is not None
    before = entry.paths[0].before
    assert before["kept"] is False and before["sha256"] == sha(b"x" * 100)
    assert not d.store.blobs.has(sha(b"x" * 100))
    assert "not undoable" in query.describe(entry)
    d.close()


def test_remove_file_keeps_the_content_and_a_symlink_its_text(ws: Driver) -> None:
    (ws.path / "f.txt").write_text("keep me")
    os.symlink("../outside/target", ws.path / "link")
    e1 = ws.store.get(ws.remove("f.txt"))
    e2 = ws.store.get(ws.remove("link"))
    assert e1 is not None and e2 is not None
    assert e1.paths[0].after == "absent" and ws.store.blobs.read(e1.paths[0].before["sha256"]) == b"keep me"
    assert e2.paths[0].before == {"kind": "symlink", "text": "../outside/target"}


def test_remove_folder_lists_every_entry_with_its_content(ws: Driver) -> None:
    (ws.path / "d" / "sub").mkdir(parents=True)
    (ws.path / "d" / "a.txt").write_text("A")
    (ws.path / "d" / "sub" / "b.txt").write_text("B")
    os.symlink("a.txt", ws.path / "d" / "ln")
    os.chmod(ws.path / "d" / "sub", 0o750)
    entry = ws.store.get(ws.remove_folder("d"))
    assert entry is not None
    tree = entry.paths[0].before
    assert tree["kind"] == "tree" and tree["kept"] is True
    items = {i["rel"]: i for i in tree["items"]}
    assert set(items) == {"a.txt", "ln", "sub", "sub/b.txt"}
    assert items["sub"]["mode"] == 0o750 and items["ln"]["text"] == "a.txt"
    assert ws.store.blobs.read(items["sub/b.txt"]["sha256"]) == b"B"
    assert not (ws.path / "d").exists()


def test_move_records_the_source_as_moved_and_the_replaced_destination(ws: Driver) -> None:
    (ws.path / "src.txt").write_text("moving")
    (ws.path / "dst.txt").write_text("replaced")
    entry = ws.store.get(ws.move("src.txt", "dst.txt"))
    assert entry is not None
    src, dst = entry.paths
    assert src.before["kind"] == "moved" and src.before["to"]["path"] == "dst.txt" and src.after == "absent"
    assert dst.before["sha256"] == sha(b"replaced") and dst.after == f"file:{sha(b'moving')}"
    assert query.paths_text(entry) == "ws:src.txt -> dst.txt"


def test_a_change_that_fails_is_not_recorded_as_made(ws: Driver) -> None:
    (ws.path / "a.txt").write_text("old")
    loc = locate(ws.fd, ["a.txt"])

    def boom(fd: int) -> int:
        raise RuntimeError("disk full")

    # Failing before ready(): no entry at all.
    with pytest.raises(RuntimeError), ws.journal.begin(tool="write_file", root=ws.root) as change:
        change.before_file(loc.dirfd, loc.name, "a.txt")
        atomic.write_file(loc.dirfd, loc.name, boom, replace=True, perms=0o644, before_commit=change.ready)
    assert ws.store.entries() == []
    # Failing after ready() (the rename refused, say): the entry says it was not applied.
    with pytest.raises(RuntimeError), ws.journal.begin(tool="write_file", root=ws.root) as change:
        change.before_file(loc.dirfd, loc.name, "a.txt")
        change.ready()
        boom(0)
    loc.close()
    [entry] = ws.store.entries()
    assert entry.status == NOT_APPLIED
    assert "[not applied]" in query.describe(entry)
    assert (ws.path / "a.txt").read_text() == "old"


def test_a_command_appears_in_the_timeline(ws: Driver) -> None:
    ws.write("a.txt", "1")
    ws.journal.note_command(root=ws.root, tool="shell", command="npm test", cwd=".", exit_code=1,
                            connection="conn-1", client="test-client")
    ws.write("a.txt", "2")
    lines = query.history_lines([ws.store])
    assert len(lines) == 3
    assert "shell" in lines[1] and "$ npm test  (exit 1)" in lines[1] and "not journaled" in lines[1]
    assert "write_file" in lines[0] and "write_file" in lines[2]


def test_history_line_shows_id_age_client_tool_path_and_lines(ws: Driver) -> None:
    (ws.path / "a.txt").write_text("one\ntwo\nthree\n")
    entry_id = ws.write("a.txt", "one\n2\nthree\nfour\n")
    [line] = query.history_lines([ws.store], root_fds={ws.root.real_path: ws.fd})
    assert line.startswith(entry_id)
    assert "s ago" in line and "test-client" in line and "write_file" in line and "ws:a.txt" in line
    assert line.endswith("+2 -1")


def test_ten_thousand_entries_are_all_listed_newest_first(ws: Driver) -> None:
    # How fast this listing is (the 100 ms) is measured by bench/journal.py, not here.
    for i in range(10_000):
        with ws.journal.begin(tool="write_file", root=ws.root, connection=f"c{i % 7}", client="bulk") as change:
            change.before_absent(f"dir{i % 50}/file{i}.txt")
            change.ready()
            change.commit(after={f"dir{i % 50}/file{i}.txt": "0" * 64})
    lines = query.history_lines([ws.store])
    assert len(lines) == 10_000
    assert "ws:dir49/file9999.txt" in lines[0] and "ws:dir0/file0.txt" in lines[-1]
