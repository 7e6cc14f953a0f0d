"""What the change journal adds to a write_file of 100 KB, journal on vs off, in the same run.

    .venv/bin/python bench/journal.py [--runs N] [--size-kb N] [--dir PATH] [--journal-dir PATH] [--entries N]

Each case drives what phase 2's write_file does: resolve the path beneath the root's handle, take the
file's lock, look at what is there, write atomically (O_TMPFILE, fsync, link, rename: fsops.write_file)
and hash the new content. The journaled cases add the seam the way write_file will call it:
`journal.begin(...)`, `before_file(dirfd, name, rel)`, `fsops.write_file(before_commit=change.ready)`,
`commit(after={rel: sha256})`. Every round writes new content (a changed counter at its start), so
no blob is ever already stored by accident. Cases take turns within each round; medians are shown.

- write, journal off / on: the steady state — the file was last written by the same server, so its
  content is known (capture.Idents) and its inode is hard-linked into the blob store, fsync-free;
- write after an outside change, off / on: before each round (untimed) another program replaces the
  file, so the journal must read, hash and fsync the old file before linking it;
- the same two with --journal-dir on another filesystem (e.g. /dev/shm): blobs are compressed copies,
  fsynced with their directory (the fallback when a hard link is impossible).

Then a journal of --entries entries (default 10,000) is listed, as `rootbound history` does.
Reads never touch the journal (no seam on read paths), so they cost the same with it on or off.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _util import measure
from rootbound import fsops
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
        loc = fsops.locate(rootfd, [name], make_parents=True)
        try:
            with fsops.target_lock(loc.dirfd, loc.name):
                st = fsops.lstat_or_none(loc.dirfd, loc.name)
                perms = st.st_mode & 0o777 if st else 0o644
                if journal is None:
                    fsops.write_file(loc.dirfd, loc.name, lambda fd: fsops.write_all(fd, data), replace=True,
                                     perms=perms)
                    hashlib.sha256(data).hexdigest()
                    return
                with journal.begin(tool="write_file", root=root, connection="bench", client="bench") as change:
                    change.before_file(loc.dirfd, loc.name, name)
                    fsops.write_file(loc.dirfd, loc.name, lambda fd: fsops.write_all(fd, data), replace=True,
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


async def main(runs: int, size_kb: int, base: str | None, journal_base: str | None, entries: int) -> None:
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
        cold: dict[str, tuple[Callable[[], None], Callable[[], None]]] = {}
        for label, settled in (("settled", True), ("fresh", False)):
            for on in (False, True):
                name = f"{label}-{'on' if on else 'off'}.txt"
                case = f"{'on disk a while' if settled else 'just written by another'}, journal {'on' if on else 'off'}"
                cold[case] = (_outside(root_dir / name, size, settled),
                              _writer(rootfd, name, size, journal if on else None, root))
        for w in (*cases.values(), *(w for _, w in cold.values())):
            w()  # the files exist before the first timed round
        samples = await measure(cases, runs)
        for case in cold:
            samples[case] = []
        for _ in range(runs):
            for case, (outside, write) in cold.items():
                outside()  # untimed
                t = time.perf_counter()
                write()
                samples[case].append(time.perf_counter() - t)
        os.close(rootfd)

        med = {k: statistics.median(v) * 1000 for k, v in samples.items()}
        blobs_fs = "same filesystem (hard links)" if os.stat(jtmp).st_dev == os.stat(tmp).st_dev \
            else "another filesystem (compressed copies)"
        print(f"write_file of {size_kb} KB, {runs} runs, files in {tmp}, journal in {jtmp}: {blobs_fs}")
        print(f"{'case':42} {'median ms':>10}")
        for k, v in med.items():
            print(f"{k:42} {v:10.3f}")
        for label, on, off in (("steady state (file last written by this server)", "write, journal on",
                                 "write, journal off"),
                                ("file on disk a while, first seen by the journal", "on disk a while, journal on",
                                 "on disk a while, journal off"),
                                ("file just written by another program (not yet on disk)",
                                 "just written by another, journal on", "just written by another, journal off")):
            print(f"ratio on/off, {label}: {med[on] / med[off]:.3f}")

        store = journal.store(root.real_path)
        have = len(store.query("SELECT id FROM entries"))
        t = time.perf_counter()
        for i in range(max(0, entries - have)):
            with journal.begin(tool="write_file", root=root, connection=f"c{i % 7}", client="bench") as change:
                change.before_absent(f"dir{i % 50}/file{i}.txt")
                change.ready()
                change.commit(after={f"dir{i % 50}/file{i}.txt": "0" * 64})
        filled = time.perf_counter() - t
        listed = []
        for _ in range(5):
            t = time.perf_counter()
            lines = query.history_lines([store], now=time.time())
            listed.append(time.perf_counter() - t)
        print(f"history of {len(lines)} entries: {statistics.median(listed) * 1000:.1f} ms (median of 5; "
              f"filled through the seam in {filled:.1f} s)")
        journal.close()


if __name__ == "__main__":
    import anyio

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--size-kb", type=int, default=100)
    parser.add_argument("--dir", help="where the root's files go (default: the system temp dir)")
    parser.add_argument("--journal-dir", help="where the journal goes (default: the system temp dir)")
    parser.add_argument("--entries", type=int, default=10_000)
    a = parser.parse_args()
    anyio.run(main, a.runs, a.size_kb, a.dir, a.journal_dir, a.entries)
