"""At start-up: settle the entries that a killed process left pending.

A pending entry was written by `Change.ready()` just before its change was made; the writer died
(SIGKILL, power loss) before `commit()` or `abandon()`. Its writer token names a lock file that the
writer held while it lived (change.py), so an entry is settled only once that lock can be taken: the
change is not still going on in another server.

Each path is compared with what the entry recorded: if every path still holds its before-state, the
change never happened and the entry is marked **not applied**; otherwise it happened (in full, or as
far as the tool got: moves across filesystems are finished by `rootbound.fs.recovery` first, which the App
runs before this) and is marked **applied**, with the path's current digest as its after-state, so an
undo restores the before-state only if nothing changed it since.

Run by `start()` below (the App, at start-up, after `rootbound.fs.recovery.start`) and by the journal CLI.
Also lifts in records from `rootbound.fs.recovery` later (phase 3): both are keyed by the state directory.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
from collections.abc import Iterable

from rootbound.fs.beneath import EscapeError, open_beneath
from rootbound.journal.capture import digest_now
from rootbound.journal.change import Journal, RootRef
from rootbound.journal.model import APPLIED, NOT_APPLIED, PENDING, Entry, digest_of
from rootbound.journal.settings import Settings
from rootbound.journal.store import Store
from rootbound.logs import log

__all__ = ["settle", "start", "writer_alive"]

_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC


def writer_alive(base: str, token: str | None) -> bool:
    """True while the process that wrote with `token` still runs (it holds its lock file)."""
    if not token or "/" in token:
        return False
    try:
        fd = os.open(os.path.join(base, "writers", token), os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
            return True
        raise
    finally:
        os.close(fd)
    return False


def current_digest(root_fd: int, rel: str) -> str:
    """What stands at root-relative `rel` now, resolved beneath the root (the final entry not followed)."""
    parts = [p for p in rel.split("/") if p not in ("", ".")]
    if not parts:
        return "tree"  # the root itself is never a journaled path
    try:
        dirfd = open_beneath(root_fd, parts[:-1], _DIR)
    except EscapeError:
        return "outside"  # a symlink on the way leads out of the root: matches no recorded state
    except OSError:
        return "absent"
    try:
        return digest_now(dirfd, parts[-1])
    finally:
        os.close(dirfd)


def settle(store: Store, base: str, root_fds: dict[str, int]) -> int:
    """Settle this store's pending entries whose writers are gone; returns how many were settled."""
    pending = [e for e in store.entries("status = ?", (PENDING,))]
    writers = {r["id"]: r["writer"] for r in store.query("SELECT id, writer FROM entries WHERE status = ?",
                                                         (PENDING,))}
    settled = 0
    for entry in pending:
        if writer_alive(base, writers.get(entry.id)):
            continue
        status, afters = _verdict(entry, root_fds)
        store.finish(entry.id, status, afters)
        settled += 1
        log.info("settled a change a stopped server left pending",
                 extra={"entry": entry.id, "tool": entry.tool, "status": status})
    return settled


def _verdict(entry: Entry, root_fds: dict[str, int]) -> tuple[str, list[str | None]]:
    nows: list[str | None] = []
    for p in entry.paths:
        fd = root_fds.get(p.root_path)
        nows.append(current_digest(fd, p.path) if fd is not None else None)
    unchanged = all(now is not None and now == digest_of(p.before) for p, now in zip(entry.paths, nows, strict=True))
    if unchanged:
        return NOT_APPLIED, [None] * len(nows)
    return APPLIED, nows


def _drop_dead_writers(base: str) -> None:
    folder = os.path.join(base, "writers")
    with contextlib.suppress(OSError):
        for name in os.listdir(folder):
            if not writer_alive(base, name):
                with contextlib.suppress(OSError):
                    os.unlink(os.path.join(folder, name))


def start(settings: Settings, roots: Iterable[tuple[RootRef, int]]) -> Journal:
    """Open the journal for these roots (root, open handle), settling what dead processes left pending."""
    journal = Journal(settings)
    pairs = list(roots)
    fds = {r.real_path: fd for r, fd in pairs}
    for root, _ in pairs:
        store = journal.store(root.real_path)
        try:
            settle(store, settings.dir, fds)
        except OSError as exc:
            log.warning("could not settle the journal's pending changes", extra={"root": root.name,
                                                                                 "error": str(exc)})
    _drop_dead_writers(settings.dir)
    return journal
