"""The journal stays bounded: past max_age or max_bytes the oldest changes go, with the blobs only they needed."""

from __future__ import annotations

import hashlib
import logging
import os
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest

from rootbound.journal import query, retention
from rootbound.journal.undo import undo

from ._journal import Driver
from .conftest import MakeServer


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_max_age_drops_old_changes_and_their_blobs(tmp_path: Path) -> None:
    d = Driver(tmp_path)
    (d.path / "a.txt").write_text("v0")
    old = d.write("a.txt", "v1")
    new = d.write("a.txt", "v2")
    later = time.time() + 3600
    settings = replace(d.settings, max_age=1800)
    with d.store.transaction() as db:
        db.execute("UPDATE entries SET time = time + 3600 WHERE id = ?", (new,))
    assert retention.prune(d.store, settings, now=later) == 1
    assert [e.id for e in d.store.entries()] == [new]
    assert not d.store.blobs.has(sha(b"v0")) and d.store.blobs.has(sha(b"v1"))
    assert sha(b"v0") not in os.listdir(d.store.blobs.fd) and old
    d.close()


def test_max_bytes_drops_the_oldest_first(tmp_path: Path) -> None:
    d = Driver(tmp_path)
    for i in range(10):
        (d.path / f"f{i}.bin").write_bytes(os.urandom(50_000))
        d.remove(f"f{i}.bin")
    settings = replace(d.settings, max_bytes=160_000)
    retention.prune(d.store, settings)
    kept = [e.paths[0].path for e in d.store.entries()]
    assert kept and len(kept) < 10
    assert kept == [f"f{i}.bin" for i in range(9, 9 - len(kept), -1)]  # the newest ones
    total = sum(r[0] for r in d.store.query("SELECT stored FROM blobs"))
    assert total <= 160_000
    assert sorted(n.removesuffix(".z") for n in os.listdir(d.store.blobs.fd)) == \
        sorted(r[0] for r in d.store.query("SELECT hash FROM blobs"))
    d.close()


def test_compaction_replaces_linked_blobs_by_compressed_copies_that_still_restore(tmp_path: Path) -> None:
    d = Driver(tmp_path)
    text = "the same line over and over\n" * 1000
    (d.path / "a.txt").write_text(text)
    entry = d.write("a.txt", "short")
    digest = sha(text.encode())
    assert os.path.exists(os.path.join(d.store.dir, "blobs", digest))  # a hard link
    assert retention.compact(d.store) == 1
    names = os.listdir(os.path.join(d.store.dir, "blobs"))
    assert names == [f"{digest}.z"]
    stored = d.store.query("SELECT codec, stored FROM blobs WHERE hash = ?", (digest,))[0]
    assert stored[0] == "zlib" and stored[1] < len(text) // 10
    report = undo(d.journal, query.select([d.store], ids=[entry]), {d.root.real_path: d.fd})
    assert report.undone == [entry] and (d.path / "a.txt").read_text() == text
    d.close()


def test_upkeep_runs_in_the_background_every_n_commits(tmp_path: Path) -> None:
    d = Driver(tmp_path)
    upkeep = retention.Upkeep(replace(d.settings, max_age=0.0), every=3)
    d.journal.after_commit.append(upkeep)
    for i in range(3):
        d.write("a.txt", str(i))
    deadline = time.monotonic() + 10
    while d.store.entries() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert d.store.entries() == []  # max_age 0: all went
    d.close()


@pytest.mark.anyio
async def test_no_upkeep_thread_outlives_the_server(make_server: MakeServer, tmp_path: Path,
                                                    caplog: pytest.LogCaptureFixture,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    caplog.set_level(logging.WARNING, logger="rootbound")
    s = await make_server({"ws": tmp_path / "ws"}, journal={"dir": str(tmp_path / "journal")})
    assert s.app.journal is not None
    upkeep = next(h for h in s.app.journal.after_commit if isinstance(h, retention.Upkeep))
    upkeep.every = 5  # upkeep after the 5th change rather than the 256th: the last write starts it
    # The upkeep is slowed (not replaced) so that it surely still runs when the server closes.
    gate, maintain = threading.Event(), retention.maintain
    monkeypatch.setattr(retention, "maintain", lambda *a: (gate.wait(10), maintain(*a)))
    for i in range(5):
        await s.ok("write_file", root="ws", path=f"f{i}.txt", content=f"line {i}\n" * 2000)
    assert [t for t in threading.enumerate() if t.name == "journal-upkeep"]
    threading.Timer(0.3, gate.set).start()
    s.app.close()
    assert gate.is_set()  # close waited for it
    assert [t for t in threading.enumerate() if t.name == "journal-upkeep"] == []
    assert [r.getMessage() for r in caplog.records if "upkeep" in r.getMessage()] == []
