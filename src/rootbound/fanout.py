"""grep's second core: a helper process that searches batches of files beneath directory handles.

Why a process: threads were measured slower than one thread. Each file costs a
handful of short system calls (open, fstat, read, close), each releasing and
retaking the GIL, and two threads doing that spend their time handing the GIL
back and forth. A second process has its own interpreter and no such contention.

How confinement holds: the helper is given directory *handles* (passed over a
Unix socket with SCM_RIGHTS), never paths. It opens each name beneath the
handle with O_NOFOLLOW|O_NONBLOCK and searches it only if fstat says regular —
exactly what the main process does (`walking.open_file`). Names come from the
main process's walk; the helper cannot name anything the walk did not list.

The protocol is small and private: each message is a 4-byte length and a
`marshal`led tuple; a batch carries one directory handle. A shared memory page
holds one cancel byte per slot, so a call that ends (cancelled, timed out,
enough results) stops the helper's work on it at the next file or 1 MiB block.
The helper exits when its socket closes (the server went away) or its parent
dies (PR_SET_PDEATHSIG).

`ROOTBOUND_GREP_HELPER=off` disables it; it is never used on a single-CPU machine.
"""

from __future__ import annotations

import contextlib
import ctypes
import marshal
import mmap
import os
import select
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any, Final

from rootbound.searching import LineSearch, Prefilter, compile_regex
from rootbound.walking import open_file

__all__ = ["BATCH", "FileRows", "Helper", "HelperGone", "HitRow", "Job", "found_rows", "make_scanner", "search_batch"]

BATCH: Final = 64  # files per batch: small enough to balance, big enough to amortize a message
_SLOTS: Final = 4096
_MAX_STARTS: Final = 3
_HEADER: Final = struct.Struct("!I")

HitRow = tuple[int, str, list[str], list[str]]
FileRows = tuple[str, list[HitRow]]
Job = tuple[str, bool, int, int, float]  # pattern, case_insensitive, context, limit, deadline (monotonic)
Reply = tuple[int, list[FileRows], bool, bool]  # batch id and its BatchResult


def found_rows(name: str, hits: list[Any]) -> FileRows:
    return name, [(h.line_number, h.line, h.before, h.after) for h in hits]


BatchResult = tuple[list[FileRows], bool, bool]  # files with hits, timed out?, output budget spent?


def search_batch(scanner: LineSearch, dir_fd: int, names: list[str], limit: int, budget: int) -> BatchResult:
    """Search `names` beneath `dir_fd` for at most `limit` hits and `budget` bytes. Used on both sides."""
    found: list[FileRows] = []
    total = 0
    scanner.over_budget = False
    for i, name in enumerate(names):
        if i % 16 == 15 and scanner.expired():
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
            found.append(found_rows(name, hits))
            total += len(hits)
            budget = scanner.budget_left
            if total >= limit or scanner.over_budget:
                break
        if scanner.timed_out:
            return found, True, scanner.over_budget
    return found, False, scanner.over_budget


def make_scanner(pattern: str, case_insensitive: bool, context: int, expired: Callable[[], bool]) -> LineSearch:
    return LineSearch(compile_regex(pattern, case_insensitive=case_insensitive), context, expired,
                      Prefilter.for_pattern(pattern, case_insensitive))


# -- the main process's side -------------------------------------------------------------------------


def _disabled() -> bool:
    return os.environ.get("ROOTBOUND_GREP_HELPER", "").lower() in ("0", "off", "no", "false") or \
        (os.cpu_count() or 1) < 2


class HelperGone(Exception):
    """The helper process died or closed its socket; its batches must be searched here."""


class Helper:
    """The helper process, shared by the server; one grep call uses it at a time."""

    _shared: Helper | None = None
    _guard = threading.Lock()
    _starts = 0

    def __init__(self) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        flags_fd = os.memfd_create("rootbound-grep-cancel")
        os.ftruncate(flags_fd, _SLOTS)
        self._flags = mmap.mmap(flags_fd, _SLOTS)
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "rootbound.fanout", str(theirs.fileno()), str(flags_fd)],
            pass_fds=(theirs.fileno(), flags_fd), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
        theirs.close()
        os.close(flags_fd)
        self._sock = ours
        self._ready = False
        self.alive = True
        self._busy = threading.Lock()
        self._slot = 0
        self.outstanding = 0

    @classmethod
    def acquire(cls) -> Helper | None:
        """The helper, reserved for this call; None when it is off, starting, or busy with another call."""
        if _disabled():
            return None
        with cls._guard:
            helper = cls._shared
            if helper is not None and helper.alive and helper._proc.poll() is not None:
                helper.alive = False  # exited while idle
            if helper is None or not helper.alive:
                if helper is not None:
                    helper._close()
                if cls._starts >= _MAX_STARTS:
                    return None  # it keeps failing here (no interpreter to spawn?): stay on one core
                cls._starts += 1
                with contextlib.suppress(OSError):
                    cls._shared = cls()  # starts in the background; this call goes on without it
                return None
            if not helper._check_ready() or not helper._busy.acquire(blocking=False):
                return None
            helper._slot = (helper._slot + 1) % _SLOTS
            helper._flags[helper._slot] = 0
            return helper

    def _check_ready(self) -> bool:
        if not self._ready and select.select([self._sock], [], [], 0)[0]:
            try:
                self._ready = self._sock.recv(1) == b"R"
            except OSError:
                self._ready = False
            self.alive = self._ready
            if self._ready:
                Helper._starts = 0  # it did start: later restarts after a crash are allowed again
        return self._ready

    def _close(self) -> None:
        with contextlib.suppress(OSError):
            self._sock.close()
        with contextlib.suppress(OSError, ValueError):
            self._flags.close()
        with contextlib.suppress(OSError, subprocess.TimeoutExpired):
            self._proc.kill()
            self._proc.wait(1)

    def send(self, batch_id: int, job: Job, dir_fd: int, names: list[str], budget: int) -> None:
        payload = marshal.dumps((batch_id, self._slot, job, names, budget))
        try:
            socket.send_fds(self._sock, [_HEADER.pack(len(payload)) + payload], [dir_fd])
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
            self._busy.release()


# -- the helper process -------------------------------------------------------------------------------


def _recv_exact(sock: socket.socket, n: int, want_fd: bool) -> tuple[bytes, list[int]]:
    data, fds = b"", list[int]()
    if want_fd:
        data, fds, _, _ = socket.recv_fds(sock, n, 1)
        if not data:
            return b"", []
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            return b"", fds
        data += chunk
    return data, fds


def _die_with_parent() -> None:
    with contextlib.suppress(Exception):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


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
        batch_id, slot, (pattern, ci, context, limit, deadline), names, budget = marshal.loads(payload)
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
            found, timed_out, over = search_batch(scanner, fds[0], names, limit, budget)
        finally:
            os.close(fds[0])
        reply = marshal.dumps((batch_id, found, timed_out, over))
        sock.sendall(_HEADER.pack(len(reply)) + reply)


def main(argv: list[str]) -> None:
    _die_with_parent()
    sock_fd, flags_fd = int(argv[0]), int(argv[1])
    sock = socket.socket(fileno=sock_fd)
    flags = mmap.mmap(flags_fd, _SLOTS)
    os.close(flags_fd)
    with contextlib.suppress(BrokenPipeError, ConnectionResetError, KeyboardInterrupt):
        serve(sock, flags)


if __name__ == "__main__":
    main(sys.argv[1:])
