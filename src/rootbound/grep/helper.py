"""grep's helper process: it searches batches of files beneath directory handles, beside the server.

Why a process: threads were measured slower than one thread. Each file costs a
handful of short system calls (open, fstat, read, close), each releasing and
retaking the GIL, and two threads doing that spend their time handing the GIL
back and forth. A second process has its own interpreter and no such contention.

How confinement holds: the helper is given directory *handles* (passed over a
Unix socket with SCM_RIGHTS), never paths. It opens each name beneath the
handle with O_NOFOLLOW|O_NONBLOCK and searches it only if fstat says regular —
exactly what the main process does (`fs.trees.open_file`). Names come from the
main process's walk; the helper cannot name anything the walk did not list.

The protocol is small and private: each message is a 4-byte length and a
`marshal`led tuple; a batch carries one directory handle per folder it spans. A shared memory page
holds one cancel byte per slot, so a call that ends (cancelled, timed out,
enough results) stops the helper's work on it at the next file or 1 MiB block.
The helper exits when its socket closes (the server went away) or the thread
that started it ends (PR_SET_PDEATHSIG; that thread lives as long as the helper).
The server has one (`SharedHelper`, owned and closed by the App), lent to one
grep call at a time; one that dies is started again by a later call.

How it is started: it must never run code from a root. `python -m` would put the
server's working directory (often a root) first on the import path, so a
`rootbound/grep/helper.py` written there by the agent would run as the server's user,
outside every sandbox. So: an isolated interpreter (`-I`: no working directory,
no PYTHON* variables, no user site) that imports this package from where the
server imported it, started in `/` with only the locale variables (never the
server's secrets), and made non-dumpable before it imports anything, so no other
process of our user can read its memory, environment or directory handles.

`ROOTBOUND_GREP_HELPER=off` disables it; it is never used on a single-CPU machine.
"""

from __future__ import annotations

import contextlib
import marshal
import mmap
import os
import select
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any, Final

from rootbound.fs.trees import open_file
from rootbound.grep.scanner import LineSearch, Prefilter, compile_regex

__all__ = ["BATCH", "MAX_DIRS", "FileRows", "Group", "Helper", "HelperGone", "HitRow", "Job", "SharedHelper",
           "found_rows", "make_scanner", "search_batch"]

BATCH: Final = 64  # files per batch: small enough to balance, big enough to amortize a message
# Folders per batch: most folders hold a few files, and a message per folder cost more than their search.
MAX_DIRS: Final = 16
_SLOTS: Final = 4096
_MAX_STARTS: Final = 3
_HEADER: Final = struct.Struct("!I")

HitRow = tuple[int, str, list[str], list[str]]
FileRows = tuple[str, list[HitRow]]
Job = tuple[str, bool, int, int, float]  # pattern, case_insensitive, context, limit, deadline (monotonic)
Group = tuple[str, list[str]]  # a folder's path prefix ("a/b/") and the names of its files to search
Reply = tuple[int, list[FileRows], bool, bool]  # batch id and its BatchResult


def found_rows(name: str, hits: list[Any]) -> FileRows:
    return name, [(h.line_number, h.line, h.before, h.after) for h in hits]


BatchResult = tuple[list[FileRows], bool, bool]  # files with hits, timed out?, output budget spent?


def search_batch(scanner: LineSearch, dir_fds: list[int], groups: list[Group], limit: int,
                 budget: int) -> BatchResult:
    """Search each group's names beneath its folder's handle (`dir_fds`, one per group), in order, for at most
    `limit` hits and `budget` bytes; files are named by their group's prefix and name. Used on both sides."""
    found: list[FileRows] = []
    total = 0
    scanner.over_budget = False
    i = 0
    for dir_fd, (parent, names) in zip(dir_fds, groups, strict=True):
        for name in names:
            i += 1
            if i % 16 == 0 and scanner.expired():
                return found, True, False
            opened = open_file(dir_fd, name)
            if opened is None:
                continue
            fd, st = opened
            try:
                hits = scanner.search(fd, st.st_size, limit - total, budget)
            finally:
                os.close(fd)
            if hits:
                found.append(found_rows(parent + name, hits))
                total += len(hits)
                budget = scanner.budget_left
                if total >= limit or scanner.over_budget:
                    return found, False, scanner.over_budget
            if scanner.timed_out:
                return found, True, scanner.over_budget
    return found, False, scanner.over_budget


def make_scanner(pattern: str, case_insensitive: bool, context: int, expired: Callable[[], bool]) -> LineSearch:
    return LineSearch(compile_regex(pattern, case_insensitive=case_insensitive), context, expired,
                      Prefilter.for_pattern(pattern, case_insensitive))


# -- the main process's side -------------------------------------------------------------------------


# Runs first in the helper: not dumpable (exit if that fails), killed with its parent, then our package.
_BOOT = ("import ctypes,sys;libc=ctypes.CDLL(None);"
         "libc.prctl(4,0,0,0,0)==0 or sys.exit('rootbound grep helper: cannot become non-dumpable');"
         "libc.prctl(1,9,0,0,0);"  # PR_SET_DUMPABLE 0; PR_SET_PDEATHSIG SIGKILL
         "sys.path.insert(0,{path!r});from rootbound.grep.helper import main;main(sys.argv[1:])")
_LOCALE_VARS: Final = ("LANG", "LC_ALL", "LC_CTYPE")  # file names must decode as in the server


def helper_argv(sock_fd: int, flags_fd: int) -> list[str]:
    """The helper's command line: this interpreter (its venv too), isolated, importing this very package."""
    import rootbound

    package_parent = os.path.dirname(os.path.dirname(rootbound.__file__))  # absolute: where we imported it from
    utf8 = ["-X", "utf8"] if sys.flags.utf8_mode else []
    return [sys.executable, "-I", *utf8, "-c", _BOOT.format(path=package_parent), str(sock_fd), str(flags_fd)]


def helper_env() -> dict[str, str]:
    """Only what decoding file names needs: no token, no secrets, nothing that changes Python (-I ignores
    PYTHON* anyway)."""
    return {k: v for k in _LOCALE_VARS if (v := os.environ.get(k)) is not None}


def _disabled() -> bool:
    return os.environ.get("ROOTBOUND_GREP_HELPER", "").lower() in ("0", "off", "no", "false") or \
        (os.cpu_count() or 1) < 2


class HelperGone(Exception):
    """The helper process died or closed its socket; its batches must be searched here."""


def _start(argv: list[str], pass_fds: tuple[int, ...]) -> subprocess.Popen[bytes]:
    """Start the helper from a thread of its own, which then waits for it to end.

    PR_SET_PDEATHSIG (in `_BOOT`) fires when the *thread* that started the process ends, not the
    process: started from a grep call's worker thread, the helper was killed whenever that thread
    retired (anyio ends a worker after 10 s idle), under load mid-search. This thread lives as long
    as the helper, and reaps it.
    """
    box: list[subprocess.Popen[bytes] | BaseException] = []
    started = threading.Event()

    def parent() -> None:
        try:
            proc = subprocess.Popen(argv, pass_fds=pass_fds, cwd="/", env=helper_env(), stdin=subprocess.DEVNULL,
                                    stdout=subprocess.DEVNULL)
        except BaseException as exc:
            box.append(exc)
            started.set()
            return
        box.append(proc)
        started.set()
        proc.wait()

    threading.Thread(target=parent, name="rootbound-grep-helper", daemon=True).start()
    started.wait()
    if isinstance(box[0], BaseException):
        raise box[0]
    return box[0]


class Helper:
    """One helper process. One grep call uses it at a time, from `SharedHelper.acquire` to `release`."""

    def __init__(self) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        flags_fd = os.memfd_create("rootbound-grep-cancel")
        try:
            os.ftruncate(flags_fd, _SLOTS)
            self._flags = mmap.mmap(flags_fd, _SLOTS)
            self._proc = _start(helper_argv(theirs.fileno(), flags_fd), (theirs.fileno(), flags_fd))
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
            os.close(flags_fd)
        self._sock = ours
        self._ready = False
        self.alive = True
        self._lock = threading.Lock()  # guards the two flags below
        self._in_use = False
        self._retired = False  # no call will get it again; closed once no call holds it
        self._slot = 0
        self.outstanding = 0

    def exited(self) -> bool:
        return self._proc.poll() is not None

    def ready(self) -> bool:
        """Has it said it is ready (without waiting)? False for good if it failed to start."""
        if not self._ready and select.select([self._sock], [], [], 0)[0]:
            try:
                self._ready = self._sock.recv(1) == b"R"
            except OSError:
                self._ready = False
            self.alive = self._ready
        return self._ready

    def take(self) -> bool:
        """Reserve it for one call; False when another call holds it (or it is retired)."""
        with self._lock:
            if self._in_use or self._retired:
                return False
            self._in_use = True
        self._slot = (self._slot + 1) % _SLOTS
        self._flags[self._slot] = 0
        return True

    def retire(self) -> None:
        """Close it now if no call holds it, else as soon as its call releases it.

        Closing it under a call still using it closed its shared memory there: the call's `release` then
        failed with "mmap closed or invalid" and the grep with an internal error.
        """
        with self._lock:
            self._retired = True
            idle = not self._in_use
        if idle:
            self._close()

    def _close(self) -> None:
        with contextlib.suppress(OSError):
            self._sock.close()
        with contextlib.suppress(OSError, ValueError):
            self._flags.close()
        with contextlib.suppress(OSError, subprocess.TimeoutExpired):
            self._proc.kill()
            self._proc.wait(1)

    def send(self, batch_id: int, job: Job, dir_fds: list[int], groups: list[Group], budget: int) -> None:
        payload = marshal.dumps((batch_id, self._slot, job, groups, budget))
        try:
            socket.send_fds(self._sock, [_HEADER.pack(len(payload)) + payload], dir_fds)
        except OSError:
            self.alive = False
            raise HelperGone() from None
        self.outstanding += 1

    def replies(self, wait: float) -> list[Reply]:
        """Replies that have arrived, waiting up to `wait` seconds for the first one."""
        out: list[Reply] = []
        while self.outstanding:
            if not select.select([self._sock], [], [], 0 if out else wait)[0]:
                break
            header = self._recv(_HEADER.size)
            batch_id, found, timed_out, over = marshal.loads(self._recv(_HEADER.unpack(header)[0]))
            self.outstanding -= 1
            out.append((batch_id, found, timed_out, over))
        return out

    def _recv(self, n: int) -> bytes:
        data = bytearray()
        while len(data) < n:
            try:
                chunk = self._sock.recv(n - len(data))
            except OSError:
                chunk = b""
            if not chunk:
                self.alive = False
                raise HelperGone()
            data += chunk
        return bytes(data)

    def release(self) -> None:
        """End this call's use: cancel what the helper still does for it, drain its replies, free it."""
        self._flags[self._slot] = 1
        try:
            while self.outstanding:
                self.replies(wait=1.0)
        except HelperGone:
            self.outstanding = 0
        finally:
            with self._lock:
                self._in_use = False
                retired = self._retired
            if retired:
                self._close()


class SharedHelper:
    """The server's helper process: started by the first grep that could use it, started again if it dies
    (up to _MAX_STARTS times in a row), lent to one call at a time. The App owns it and closes it."""

    def __init__(self) -> None:
        self._current: Helper | None = None
        self._guard = threading.Lock()
        self._starts = 0
        self._closed = False

    def acquire(self) -> Helper | None:
        """The helper, reserved for this call; None when it is off, starting, or busy with another call."""
        if _disabled():
            return None
        with self._guard:
            if self._closed:
                return None
            helper = self._current
            if helper is not None and helper.alive and helper.exited():
                helper.alive = False  # exited while idle
            if helper is None or not helper.alive:
                if helper is not None:
                    helper.retire()
                    self._current = None
                if self._starts >= _MAX_STARTS:
                    return None  # it keeps failing here (no interpreter to spawn?): stay on one core
                self._starts += 1
                with contextlib.suppress(OSError):
                    self._current = Helper()  # starts in the background; this call goes on without it
                return None
            if not helper.ready():
                return None
            self._starts = 0  # it did start: later restarts after a crash are allowed again
            return helper if helper.take() else None

    def close(self) -> None:
        with self._guard:
            self._closed = True
            helper, self._current = self._current, None
        if helper is not None:
            helper.retire()


# -- the helper process -------------------------------------------------------------------------------


def _recv_exact(sock: socket.socket, n: int, want_fd: bool) -> tuple[bytes, list[int]]:
    data, fds = b"", list[int]()
    if want_fd:
        data, fds, _, _ = socket.recv_fds(sock, n, MAX_DIRS)
        if not data:
            return b"", []
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            return b"", fds
        data += chunk
    return data, fds


def serve(sock: socket.socket, flags: mmap.mmap) -> None:
    """Answer batches until the socket closes."""
    scanners: dict[tuple[str, bool, int], LineSearch] = {}
    sock.sendall(b"R")
    while True:
        header, fds = _recv_exact(sock, _HEADER.size, want_fd=True)
        if not header:
            return
        payload, _ = _recv_exact(sock, _HEADER.unpack(header)[0], want_fd=False)
        if not fds or not payload:
            return
        batch_id, slot, (pattern, ci, context, limit, deadline), groups, budget = marshal.loads(payload)
        groups = [(parent, names) for parent, names in groups]
        if len(groups) != len(fds):
            for fd in fds:
                os.close(fd)
            return  # not what the server sends: stop, and let it search without us
        key = (pattern, ci, context)
        scanner = scanners.get(key)
        if scanner is None:
            if len(scanners) > 32:
                scanners.clear()
            scanner = scanners[key] = make_scanner(pattern, ci, context, lambda: False)

        def expired(slot: int = slot, deadline: float = deadline) -> bool:
            return flags[slot] != 0 or time.monotonic() >= deadline

        scanner.expired = expired
        scanner.timed_out = False
        try:
            found, timed_out, over = search_batch(scanner, fds, groups, limit, budget)
        finally:
            for fd in fds:
                os.close(fd)
        reply = marshal.dumps((batch_id, found, timed_out, over))
        sock.sendall(_HEADER.pack(len(reply)) + reply)


def main(argv: list[str]) -> None:
    """The helper's entry point (`_BOOT` has made it non-dumpable and tied it to its parent already)."""
    sock_fd, flags_fd = int(argv[0]), int(argv[1])
    sock = socket.socket(fileno=sock_fd)
    flags = mmap.mmap(flags_fd, _SLOTS)
    os.close(flags_fd)
    with contextlib.suppress(BrokenPipeError, ConnectionResetError, KeyboardInterrupt):
        serve(sock, flags)

