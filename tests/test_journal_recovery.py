"""Start-up settles what a killed writer left pending: a change that never happened, or one that did."""

from __future__ import annotations

import hashlib
import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from rootbound.journal import query
from rootbound.journal.model import APPLIED, NOT_APPLIED, PENDING
from rootbound.journal.undo import undo

from ._journal import Driver

REPO = Path(__file__).resolve().parent.parent

CHILD = textwrap.dedent("""
    import hashlib, os, signal, sys
    from pathlib import Path
    from tests._journal import Driver
    from rootbound.fs import atomic
    from rootbound.fs.beneath import locate
    from rootbound.fs.content import write_all
    tmp, mode = Path(sys.argv[1]), sys.argv[2]
    d = Driver(tmp)
    if mode == "loop":
        i = 0
        while True:
            i += 1
            d.write("a.txt", f"version {i}\\n" * 2000)
    loc = locate(d.fd, ["a.txt"])
    change = d.journal.begin(tool="write_file", root=d.root, connection="c", client="k")
    change.before_file(loc.dirfd, loc.name, "a.txt")
    data = b"new content"
    # mode "before": killed between ready() and the rename (fs.atomic's kill point "linked");
    # mode "after": killed after the rename, before commit().
    atomic.write_file(loc.dirfd, loc.name, lambda fd: write_all(fd, data), replace=True, perms=0o644,
                      before_commit=change.ready)
    if mode == "after":
        os.kill(os.getpid(), signal.SIGKILL)
    print("not killed")
""")


def child(tmp: Path, mode: str, **env: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", CHILD, str(tmp), mode], cwd=REPO,
                            env={**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{REPO / 'src'}", **env})


@pytest.mark.parametrize(("mode", "kill_at", "status", "content"), [
    ("before", "linked", NOT_APPLIED, "old"),
    ("after", "", APPLIED, "new content"),
])
def test_a_killed_writer_leaves_a_pending_entry_that_start_up_settles(tmp_path: Path, mode: str, kill_at: str,
                                                                      status: str, content: str) -> None:
    (tmp_path / "ws").mkdir()
    (tmp_path / "ws" / "a.txt").write_text("old")
    proc = child(tmp_path, mode, ROOTBOUND_TEST_KILL_AT=kill_at)
    assert proc.wait(30) == -signal.SIGKILL
    assert (tmp_path / "ws" / "a.txt").read_text() == content
    d = Driver(tmp_path)  # start-up: settles what the dead writer left
    [entry] = d.store.entries()
    assert entry.status == status
    if status == APPLIED:
        assert entry.paths[0].after == "file:" + hashlib.sha256(b"new content").hexdigest()
        report = undo(d.journal, query.select([d.store]), {d.root.real_path: d.fd})
        assert report.undone == [entry.id] and (tmp_path / "ws" / "a.txt").read_text() == "old"
    d.close()


def test_a_live_writers_pending_entry_is_left_alone(tmp_path: Path) -> None:
    d = Driver(tmp_path)
    (d.path / "a.txt").write_text("old")
    from rootbound.fs.beneath import locate

    loc = locate(d.fd, ["a.txt"])
    change = d.journal.begin(tool="write_file", root=d.root)
    change.before_file(loc.dirfd, loc.name, "a.txt")
    change.ready()
    other = Driver(tmp_path)  # a second process starting meanwhile (same journal)
    assert [e.status for e in other.store.entries()] == [PENDING]
    change.commit()
    loc.close()
    assert [e.status for e in other.store.entries()] == [APPLIED]
    d.close()
    other.close()


def test_sigkill_at_random_points_leaves_file_and_journal_consistent(tmp_path: Path) -> None:
    (tmp_path / "ws").mkdir()
    rounds = 12
    for _ in range(rounds):
        proc = child(tmp_path, "loop")
        time.sleep(0.3 + random.random() * 0.4)
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
        d = Driver(tmp_path)  # settles what the kill left
        entries = d.store.entries()
        assert all(e.status in (APPLIED, NOT_APPLIED) for e in entries)
        applied = [e for e in entries if e.status == APPLIED]
        if applied:
            now = "file:" + hashlib.sha256((d.path / "a.txt").read_bytes()).hexdigest()
            assert applied[0].paths[0].after == now  # the newest applied change is what the file holds
            for e in applied[1:]:  # each applied change's before-state is stored
                before = e.paths[0].before
                assert before["kind"] == "absent" or d.store.blobs.has(before["sha256"])
        d.close()
