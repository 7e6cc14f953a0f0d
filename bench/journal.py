"""What the change journal adds to a write_file of 100 KB, journal on vs off, in the same run.

    .venv/bin/python bench/journal.py [--runs N] [--size-kb N] [--dir PATH] [--journal-dir PATH] [--entries N]
    .venv/bin/python bench/journal.py --tools [--runs N] [--size-kb N]    # through the real tools, on vs off

Each case drives what phase 2's write_file does: resolve the path beneath the root's handle, take the
file's lock, look at what is there, write atomically (O_TMPFILE, fsync, link, rename: fs.atomic.write_file)
and hash the new content. The journaled cases add the seam the way write_file will call it:
`journal.begin(...)`, `before_file(dirfd, name, rel)`, `fs.atomic.write_file(before_commit=change.ready)`,
`commit(after={rel: sha256})`. Every round writes new content (a changed counter at its start), so
no blob is ever already stored by accident. Cases take turns within each round; medians are shown,
of wall time and of the writing thread's own CPU time (on a shared machine wall time also measures
the neighbours, and the disk's other users).

- write, journal off / on: the steady state — the file was last written by the same server, so its
  content is known (capture.Idents) and its inode is hard-linked into the blob store, fsync-free;
- write after an outside change, off / on: before each round (untimed) another program replaces the
  file, so the journal must read, hash and fsync the old file before linking it;
- the same two with --journal-dir on another filesystem (e.g. /dev/shm): blobs are compressed copies,
  fsynced with their directory (the fallback when a hard link is impossible).

Then a journal of --entries entries (default 10,000) is listed, as `rootbound history` does.

Note on wall times: with the journal on, the replaced file's blocks are not freed by the write (its
inode lives on as the blob) but later, when retention drops the blob; on a filesystem mounted with
`discard` freeing is costly, so a journaled write can be faster than an unjournaled one.
Reads never touch the journal (no seam on read paths), so they cost the same with it on or off.
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from rootbound.fs import atomic
from rootbound.fs.beneath import locate_making
from rootbound.fs.content import write_all
from rootbound.fs.handles import lstat_or_none
from rootbound.journal import query
from rootbound.journal.recovery import start
from rootbound.journal.settings import resolve


@dataclass(frozen=True)
class _Root:
    name: str
    real_path: str


def _writer(rootfd: int, name: str, size: int, journal: object | None, root: _Root) -> Callable[[], None]:
    """One write_file of `size` bytes of new content, as the tool does it (with the seam when `journal`)."""
    body = os.urandom(size // 2).hex().encode()[:size]
    counter = [0]

    def write() -> None:
        counter[0] += 1
        data = f"{counter[0]:08d}".encode() + body[8:]
        loc = locate_making(rootfd, [name])
        try:
            with atomic.target_lock(loc.dirfd, loc.name):
                st = lstat_or_none(loc.dirfd, loc.name)
                perms = st.st_mode & 0o777 if st else 0o644
                if journal is None:
                    atomic.write_file(loc.dirfd, loc.name, lambda fd: write_all(fd, data), replace=True,
                                      perms=perms)
                    hashlib.sha256(data).hexdigest()
                    return
                with journal.begin(tool="write_file", root=root, connection="bench", client="bench") as change:
                    change.before_file(loc.dirfd, loc.name, name)
                    atomic.write_file(loc.dirfd, loc.name, lambda fd: write_all(fd, data), replace=True,
                                      perms=perms, before_commit=change.ready)
                    change.commit(after={name: hashlib.sha256(data).hexdigest()})
        finally:
            loc.close()

    return write


def _outside(path: Path, size: int, settled: bool) -> Callable[[], None]:
    """Another program replaces the file (untimed), so the journal has never seen its content; `settled`:
    and it has been on disk for a while (synced), as a project file an agent edits for the first time."""
    def change() -> None:
        tmp = path.with_name(path.name + ".other")
        tmp.write_bytes(os.urandom(size // 2).hex().encode()[:size])
        os.replace(tmp, path)
        if settled:
            fd = os.open(path, os.O_RDONLY)
            os.fsync(fd)
            os.close(fd)
    return change


def main(runs: int, size_kb: int, base: str | None, journal_base: str | None, entries: int) -> None:
    size = size_kb * 1024
    with tempfile.TemporaryDirectory(dir=base) as tmp, tempfile.TemporaryDirectory(dir=journal_base) as jtmp:
        root_dir = Path(tmp) / "root"
        root_dir.mkdir()
        root = _Root("bench", str(root_dir.resolve()))
        settings = resolve(os.path.join(jtmp, "journal"), None, [root.real_path])
        assert settings is not None
        rootfd = os.open(root.real_path, os.O_RDONLY | os.O_DIRECTORY)
        journal = start(settings, [(root, rootfd)])
        cases = {
            "write, journal off": _writer(rootfd, "off.txt", size, None, root),
            "write, journal on": _writer(rootfd, "on.txt", size, journal, root),
        }
        plan: dict[str, tuple[Callable[[], None] | None, Callable[[], None]]] = {
            name: (None, write) for name, write in cases.items()}
        for label, settled in (("settled", True), ("fresh", False)):
            for on in (False, True):
                name = f"{label}-{'on' if on else 'off'}.txt"
                case = f"{'on disk a while' if settled else 'just written by another'}, journal {'on' if on else 'off'}"
                plan[case] = (_outside(root_dir / name, size, settled),
                              _writer(rootfd, name, size, journal if on else None, root))
        for _, write in plan.values():
            write()  # the files exist before the first timed round
        wall: dict[str, list[float]] = {case: [] for case in plan}
        cpu: dict[str, list[float]] = {case: [] for case in plan}
        for round_no in range(runs + 3):  # cases take turns within each round; the first 3 rounds warm up
            for case, (outside, write) in plan.items():
                if outside is not None:
                    outside()  # untimed
                gc.disable()
                try:
                    t, c = time.perf_counter(), time.thread_time()
                    write()
                    elapsed, spent = time.perf_counter() - t, time.thread_time() - c
                finally:
                    gc.enable()
                if round_no >= 3:
                    wall[case].append(elapsed)
                    cpu[case].append(spent)
        os.close(rootfd)

        med = {k: statistics.median(v) * 1000 for k, v in wall.items()}
        medc = {k: statistics.median(v) * 1000 for k, v in cpu.items()}
        blobs_fs = "same filesystem (hard links)" if os.stat(jtmp).st_dev == os.stat(tmp).st_dev \
            else "another filesystem (compressed copies)"
        print(f"write_file of {size_kb} KB, {runs} runs, files in {tmp}, journal in {jtmp}: {blobs_fs}")
        print(f"{'case':42} {'wall ms':>9} {'CPU ms':>8}   (medians; CPU: this thread's own time)")
        for k in med:
            print(f"{k:42} {med[k]:9.3f} {medc[k]:8.3f}")
        for label, on, off in (("steady state (file last written by this server)", "write, journal on",
                                 "write, journal off"),
                                ("file on disk a while, first seen by the journal", "on disk a while, journal on",
                                 "on disk a while, journal off"),
                                ("file just written by another program (not yet on disk)",
                                 "just written by another, journal on", "just written by another, journal off")):
            print(f"ratio on/off, {label}: wall {med[on] / med[off]:.3f}, CPU {medc[on] / medc[off]:.3f}, "
                  f"added {med[on] - med[off]:+.3f} ms wall")

        store = journal.store(root.real_path)
        have = len(store.query("SELECT id FROM entries"))
        t = time.perf_counter()
        for i in range(max(0, entries - have)):
            with journal.begin(tool="write_file", root=root, connection=f"c{i % 7}", client="bench") as change:
                change.before_absent(f"dir{i % 50}/file{i}.txt")
                change.ready()
                change.commit(after={f"dir{i % 50}/file{i}.txt": "0" * 64})
        filled = time.perf_counter() - t
        listed: list[float] = []
        listed_cpu: list[float] = []
        for _ in range(5):
            t = time.perf_counter()
            c = time.thread_time()
            lines = query.history_lines([store], now=time.time())
            listed.append(time.perf_counter() - t)
            listed_cpu.append(time.thread_time() - c)
        print(f"history of {len(lines)} entries: {statistics.median(listed) * 1000:.1f} ms wall, "
              f"{statistics.median(listed_cpu) * 1000:.1f} ms CPU (median of 5; "
              f"filled through the seam in {filled:.1f} s)")
        journal.close()


def through_tools(runs: int, size_kb: int, base: str | None, journal_base: str | None) -> None:
    """write_file and read_file of `size_kb` through the tools (App.call: validation, worker thread, the fs
    core's doors and, when on, the journal), journal on vs off, taking turns in the same run (each side first in
    half the rounds). Each read follows its side's write, so it also feels what that write left behind (dirty
    pages, the journal's writes): reads on their own take the same time either way (no seam on read paths)."""
    import asyncio

    from rootbound.config import Config
    from rootbound.server import App

    size = size_kb * 1024
    with tempfile.TemporaryDirectory(dir=base) as tmp, tempfile.TemporaryDirectory(dir=journal_base) as jtmp:
        apps = {}
        for on in (False, True):
            root = Path(tmp) / ("on" if on else "off")
            root.mkdir()
            apps[on] = App(Config.model_validate({"roots": [{"name": "r", "path": str(root)}], "state_dir": jtmp,
                                                  "journal": {"dir": os.path.join(jtmp, "journal")} if on else "off"}))
        body = os.urandom(size // 2).hex()[:size]

        async def run() -> dict[str, list[float]]:
            times: dict[str, list[float]] = {f"{op}, journal {w}": []
                                             for op in ("write", "read") for w in ("off", "on")}
            for i in range(runs + 3):
                for on in ((False, True) if i % 2 else (True, False)):  # each goes first in half the rounds
                    app, state = apps[on], "on" if on else "off"
                    t = time.perf_counter()
                    got = await app.call("write_file", {"root": "r", "path": "f.txt", "content": f"{i:08d}" + body[8:]})
                    elapsed = time.perf_counter() - t
                    assert not got.is_error, got
                    t = time.perf_counter()
                    got = await app.call("read_file", {"root": "r", "path": "f.txt"})
                    read = time.perf_counter() - t
                    if i >= 3:
                        times[f"write, journal {state}"].append(elapsed)
                        times[f"read, journal {state}"].append(read)
            return times

        try:
            times = asyncio.run(run())
        finally:
            for app in apps.values():
                app.close()
        med = {k: statistics.median(v) * 1000 for k, v in times.items()}
        print(f"through the tools (App.call), {size_kb} KB, {runs} runs, medians:")
        for k, v in med.items():
            print(f"{k:24} {v:8.3f} ms")
        for op in ("write", "read"):
            print(f"ratio on/off, {op}_file: {med[f'{op}, journal on'] / med[f'{op}, journal off']:.3f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--size-kb", type=int, default=100)
    parser.add_argument("--dir", help="where the root's files go (default: the system temp dir)")
    parser.add_argument("--journal-dir", help="where the journal goes (default: the system temp dir)")
    parser.add_argument("--entries", type=int, default=10_000)
    parser.add_argument("--tools", action="store_true", help="through the real tools (App.call), on vs off")
    a = parser.parse_args()
    if a.tools:
        through_tools(a.runs, a.size_kb, a.dir, a.journal_dir)
    else:
        main(a.runs, a.size_kb, a.dir, a.journal_dir, a.entries)
