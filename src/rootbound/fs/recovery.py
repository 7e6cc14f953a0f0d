"""Records of changes in progress, so that a server killed mid-change is finished or undone on its next start.

Some changes cannot be one system call: replacing a file links its new content to a
temporary name and renames that over the target; a folder copy is built under a
temporary name; a move to another filesystem copies, then deletes the source; a
command may leave processes behind. Before such a change starts, the server appends
a record to its own log in the state directory (outside every root), and closes the
record when the change is over. A SIGKILL can land anywhere in between; the next
server to start replays the logs of servers that are gone:

* `temp` — a temporary entry we named (`.rootbound-<16 hex>.tmp`) may exist in a
  directory: it is removed (rolled back).
* `move` — a move across filesystems: if the copy was put in place (the
  destination's name holds the inode we made, or the record says `placed`), the
  source is removed (rolled forward); otherwise the source was never touched and the
  `temp` record of the copy removes the partial copy (rolled back).
* `command` — a command was running: its processes (found by ROOTBOUND_COMMAND_ID)
  are killed.

Only what the server itself made is touched: each directory is identified by path
*and* inode and must lie inside one of the configured roots (checked by walking up
by inode), a temporary entry must carry our name pattern, and a move's source is
removed only if it is still the very inode that was copied.

Each server process has its own log (`pending/<pid>-<hex>.log`), held with an
exclusive `flock` while it runs: a log whose lock can be taken belongs to a dead
server. Appends are single `write`s to an O_APPEND file, which a SIGKILL cannot tear
(the page cache outlives the process); move records are also fsynced, so a move
survives a power loss too. The log is emptied whenever nothing is pending.
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import fcntl
import json
import os
import re
import secrets
import signal
import stat
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Final

from rootbound.fs.handles import fd_path, is_inside, lstat_or_none
from rootbound.fs.removal import remove_tree
from rootbound.logs import log

__all__ = ["TEMP_NAME", "Move", "command_running", "default_state_dirs", "kill_point", "recover", "start",
           "temp_entry"]

TEMP_NAME: Final = re.compile(r"\.rootbound-[0-9a-f]{16}\.tmp\Z")
_PENDING: Final = "pending"
# Fault injection for the crash tests: ROOTBOUND_TEST_KILL_AT=<point>[:<n>] makes the server SIGKILL itself the
# n-th time (default 1st) it reaches that point. Read once at import; nothing sets it outside the tests.
_KILL_AT: Final = os.environ.get("ROOTBOUND_TEST_KILL_AT", "")
_reached: dict[str, int] = {}
_DIR: Final = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def kill_point(point: str) -> None:
    """A point where the crash tests may kill the server (a no-op unless ROOTBOUND_TEST_KILL_AT names it)."""
    if not _KILL_AT:
        return
    name, _, nth = _KILL_AT.partition(":")
    if name == point:
        _reached[point] = _reached.get(point, 0) + 1
        if _reached[point] >= int(nth or 1):
            os.kill(os.getpid(), signal.SIGKILL)


def default_state_dirs() -> list[str]:
    """Where the state directory may go, best first: $XDG_STATE_HOME/rootbound, ~/.local/state/rootbound,
    then a private directory under /var/tmp (for a HOME that is unwritable or served as a root)."""
    xdg = os.environ.get("XDG_STATE_HOME", "")
    base = xdg if xdg.startswith("/") else os.path.join(os.path.expanduser("~"), ".local", "state")
    return [os.path.join(base, "rootbound"), f"/var/tmp/rootbound-state-{os.getuid()}"]


def _where(dirfd: int) -> dict[str, Any] | None:
    """A directory as a record names it: host path and inode (None if /proc cannot tell)."""
    path = fd_path(dirfd)
    if path is None:
        return None
    st = os.fstat(dirfd)
    return {"dir": path, "dev": st.st_dev, "ino": st.st_ino}


class Log:
    """This process's log of pending changes."""

    def __init__(self, state_dir: str) -> None:
        self.state_dir = state_dir
        pending = os.path.join(state_dir, _PENDING)
        self.path = os.path.join(pending, f"{os.getpid()}-{secrets.token_hex(4)}.log")
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        self.fd = os.open(self.path, flags, 0o600)
        fcntl.flock(self.fd, fcntl.LOCK_EX)
        dfd = os.open(pending, _DIR)
        try:
            os.fsync(dfd)  # the log's name is durable before any record relies on it
        finally:
            os.close(dfd)
        self._lock = threading.Lock()
        self._next = 0
        self._open: set[int] = set()

    def _append(self, record: dict[str, Any], durable: bool) -> None:
        os.write(self.fd, json.dumps(record, separators=(",", ":")).encode() + b"\n")
        if durable:
            os.fsync(self.fd)

    def begin(self, record: dict[str, Any], *, durable: bool = False) -> int:
        with self._lock:
            self._next += 1
            rid = self._next
            self._append({**record, "id": rid}, durable)
            self._open.add(rid)
            return rid

    def step(self, rid: int, durable: bool = True, **fields: Any) -> None:
        with self._lock:
            self._append({"op": "step", "id": rid, **fields}, durable)

    def end(self, rid: int) -> None:
        with self._lock:
            self._open.discard(rid)
            if self._open:
                self._append({"op": "end", "id": rid}, False)
            else:
                os.ftruncate(self.fd, 0)  # nothing pending: the log starts over (appends follow the new end)

    def close(self) -> None:
        """At a clean exit: an empty log is removed; one with records left is kept for the next start."""
        with self._lock:
            if not self._open:
                with contextlib.suppress(OSError):
                    os.unlink(self.path)
            with contextlib.suppress(OSError):
                os.close(self.fd)


_log: Log | None = None
_logs: dict[str, Log] = {}
_start_lock = threading.Lock()


# -- what the writing code records ----------------------------------------------------------------


@contextlib.contextmanager
def temp_entry(dirfd: int, name: str) -> Iterator[None]:
    """While the block runs, `name` in `dirfd` may be a temporary entry of ours: after a kill it is removed.

    Enter before the entry is created; leave only after it was renamed away or removed."""
    journal = _log
    where = _where(dirfd) if journal is not None else None
    if journal is None or where is None:
        yield
        return
    rid = journal.begin({"op": "temp", **where, "name": name})
    try:
        yield
    finally:
        journal.end(rid)


class Move:
    """A move to another filesystem, recorded (and fsynced) before the copy starts.

    `made(st)` names the inode of the copy once it exists (under its temporary name);
    `placed()` says it now stands at the destination; `done()` closes the record.
    Without a state directory every method does nothing."""

    def __init__(self, src_dirfd: int, src_name: str, src_st: os.stat_result, dst_dirfd: int, dst_name: str) -> None:
        self._log = _log
        self._rid: int | None = None
        if self._log is None:
            return
        src, dst = _where(src_dirfd), _where(dst_dirfd)
        if src is None or dst is None:
            return
        src.update(name=src_name, entry=[src_st.st_dev, src_st.st_ino])
        dst.update(name=dst_name)
        self._rid = self._log.begin({"op": "move", "src": src, "dst": dst}, durable=True)

    def made(self, st: os.stat_result) -> None:
        if self._log is not None and self._rid is not None:
            self._log.step(self._rid, new=[st.st_dev, st.st_ino])

    def placed(self) -> None:
        if self._log is not None and self._rid is not None:
            self._log.step(self._rid, phase="placed")

    def done(self) -> None:
        if self._log is not None and self._rid is not None:
            self._log.end(self._rid)
            self._rid = None


@contextlib.contextmanager
def command_running(command_id: str) -> Iterator[None]:
    """While the block runs, a command with this id may have processes: after a kill they are stopped."""
    journal = _log
    if journal is None:
        yield
        return
    rid = journal.begin({"op": "command", "command_id": command_id})
    try:
        yield
    finally:
        journal.end(rid)


# -- start-up -------------------------------------------------------------------------------------


def _inside(path: str, base: str) -> bool:
    return os.path.commonpath([path, base]) == base


def private_dir(candidate: str, root_paths: Iterable[str]) -> str | None:
    """`candidate` as a real path, created with mode 0700 if missing; None when it lies in a root or holds
    one, or is not safely ours. (The recovery records and the change journal both live in such a place.)"""
    real = os.path.realpath(candidate)
    if any(_inside(real, r) or _inside(r, real) for r in root_paths):
        return None
    try:
        os.makedirs(os.path.dirname(real), exist_ok=True)
        with contextlib.suppress(FileExistsError):
            os.mkdir(real, 0o700)
        st = os.lstat(real)
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
            return None  # e.g. someone else made /var/tmp/rootbound-state-<uid> first
        if st.st_mode & 0o077:
            os.chmod(real, 0o700)  # records name host paths, journal blobs hold file contents: ours alone
    except OSError:
        return None
    return real


def _usable(candidate: str, root_paths: list[str]) -> str | None:
    real = private_dir(candidate, root_paths)
    if real is not None:
        try:
            with contextlib.suppress(FileExistsError):
                os.mkdir(os.path.join(real, _PENDING), 0o700)
        except OSError:
            return None
    return real


Sweep = Callable[[list[str]], int]  # stops the processes of these command ids; returns how many it killed


def start(state_dir: str | None, root_fds: Iterable[tuple[str, int]], sweep: Sweep | None = None) -> str | None:
    """Recover what dead servers left in progress, then open this process's log. Returns the state directory
    in use, or None (records off: the reason is logged). `root_fds` are the operator roots (path, handle);
    `sweep` stops the processes of commands a dead server left running (the server passes the one of
    `execution.groups`: this module knows nothing of processes)."""
    global _log
    roots = list(root_fds)
    root_paths = [path for path, _ in roots]
    candidates = [state_dir] if state_dir else default_state_dirs()
    chosen = next((c for c in (_usable(p, root_paths) for p in candidates) if c is not None), None)
    if chosen is None:
        log.warning("crash-recovery records are off: no usable state directory outside the roots (tried "
                    f"{', '.join(candidates)}); set state_dir", extra={"state_dir": state_dir})
        return None
    with _start_lock:
        recover(chosen, [fd for _, fd in roots], sweep)
        current = _logs.get(chosen)
        if current is None:
            try:
                current = _logs[chosen] = Log(chosen)
                if len(_logs) == 1:
                    atexit.register(close)
            except OSError as exc:
                log.warning("crash-recovery records are off: cannot create a log in the state directory",
                            extra={"state_dir": chosen, "error": exc.strerror})
                return None
        _log = current
    return chosen


def close() -> None:
    """At a clean exit: drop this process's empty logs."""
    global _log
    with _start_lock:
        for journal in _logs.values():
            journal.close()
        _logs.clear()
        _log = None


def recover(state_dir: str, root_fds: list[int], sweep: Sweep | None = None) -> None:
    """Replay the logs of servers that are no longer running, then remove them."""
    pending = os.path.join(state_dir, _PENDING)
    try:
        names = sorted(os.listdir(pending))
    except OSError:
        return
    roots = [os.fstat(fd) for fd in root_fds]
    for name in names:
        if not name.endswith(".log"):
            continue
        try:
            fd = os.open(os.path.join(pending, name), os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                    continue  # its server is running
                raise
            _replay(_read_records(fd), roots, sweep)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(os.path.join(pending, name))
        finally:
            os.close(fd)


def _read_records(fd: int) -> list[dict[str, Any]]:
    """The records still open in a log, each with its steps folded in (a torn last line is ignored)."""
    chunks = []
    while chunk := os.read(fd, 1 << 20):
        chunks.append(chunk)
    records: dict[int, dict[str, Any]] = {}
    for line in b"".join(chunks).splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if not isinstance(rec, dict) or not isinstance(rec.get("id"), int):
            continue
        op, rid = rec.get("op"), rec["id"]
        if op == "end":
            records.pop(rid, None)
        elif op == "step":
            if rid in records:
                records[rid].update({k: v for k, v in rec.items() if k not in ("op", "id")})
        else:
            records[rid] = rec
    return list(records.values())


def _replay(records: list[dict[str, Any]], roots: list[os.stat_result], sweep: Sweep | None) -> None:
    commands = [r["command_id"] for r in records if r.get("op") == "command" and isinstance(r.get("command_id"), str)]
    if commands and sweep is not None:
        killed = sweep(commands)
        log.info("stopped the processes of commands a killed server left running",
                 extra={"commands": len(commands), "processes": killed})
    # Moves first: a move placed but not finished has a `temp` record of its copy that is no longer temporary.
    for op, finish, failed in (("move", _finish_move, "could not finish a move left by a killed server"),
                               ("temp", _remove_temp, "could not remove a temporary entry left by a killed server")):
        for rec in records:
            try:
                if rec.get("op") == op:
                    finish(rec, roots)
            except (OSError, KeyError, TypeError, ValueError) as exc:
                log.warning(failed, extra={"record": rec, "error": str(exc)})


def _open_recorded_dir(where: dict[str, Any], roots: list[os.stat_result]) -> int | None:
    """Open a recorded directory; None unless it is the same inode and lies inside a configured root."""
    try:
        fd = os.open(str(where["dir"]), _DIR)
    except OSError:
        return None
    st = os.fstat(fd)
    if (st.st_dev, st.st_ino) != (where["dev"], where["ino"]) or not any(is_inside(fd, r) for r in roots):
        os.close(fd)
        return None
    return fd


def _same(st: os.stat_result | None, ident: object) -> bool:
    return st is not None and isinstance(ident, list) and [st.st_dev, st.st_ino] == ident


def _remove(dirfd: int, name: str, st: os.stat_result) -> None:
    if stat.S_ISDIR(st.st_mode):
        remove_tree(dirfd, name)  # by descriptor: symlinks inside are unlinked, never followed
    else:
        os.unlink(name, dir_fd=dirfd)


def _remove_temp(rec: dict[str, Any], roots: list[os.stat_result]) -> None:
    name = str(rec["name"])
    if not TEMP_NAME.match(name):
        return
    dirfd = _open_recorded_dir(rec, roots)
    if dirfd is None:
        return
    try:
        st = lstat_or_none(dirfd, name)
        if st is not None:
            _remove(dirfd, name, st)
            log.info("removed a temporary entry a killed server left", extra={"dir": rec["dir"], "name": name})
    finally:
        os.close(dirfd)


def _finish_move(rec: dict[str, Any], roots: list[os.stat_result]) -> None:
    src, dst = rec["src"], rec["dst"]
    placed = rec.get("phase") == "placed"
    if not placed and "new" in rec:
        dfd = _open_recorded_dir(dst, roots)
        if dfd is not None:
            try:
                placed = _same(lstat_or_none(dfd, str(dst["name"])), rec["new"])
            finally:
                os.close(dfd)
    if not placed:
        log.info("rolled back a move a killed server left: the source stays", extra={"source": src["dir"]})
        return  # the partial copy is a `temp` record's to remove
    sfd = _open_recorded_dir(src, roots)
    if sfd is None:
        return
    try:
        st = lstat_or_none(sfd, str(src["name"]))
        if _same(st, src["entry"]):
            assert st is not None
            _remove(sfd, str(src["name"]), st)
            log.info("finished a move a killed server left: removed the source",
                     extra={"source": src["dir"], "name": src["name"]})
    finally:
        os.close(sfd)
