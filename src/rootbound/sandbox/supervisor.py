"""The command supervisor: one long-lived bubblewrap sandbox per view, which starts each command inside it.

A bubblewrap per command costs about ten milliseconds (a process, a user of
mounts, a launcher). Instead, the first command of a view (the roots, the work
areas, read/write paths, programs, network; `View`) starts bubblewrap once, with
that view and a small C supervisor inside (`supervisor.c`); each command is then a
request over a SOCK_SEQPACKET socketpair (its stdout and stderr pipes passed along),
and the supervisor forks it into new PID, mount and IPC namespaces (and network,
unless nothing could use one: see `View.newnet`), with a fresh /tmp, /proc and
/dev/shm and the command's guards (`protect.py`), then runs the compiled launcher
as a bubblewrap per command would. The reply carries a pidfd of the command's
namespace init (PID 1 there; its end kills everything in it), and then its status.

Lifecycle: a supervisor is started by the first command of its view, replaced when
the view changes (a root added, removed or replaced: a new dev:ino), restarted
after it died (the sandbox went with it, and every command in it), and dies with
the server (its socket closes; bubblewrap's --die-with-parent). A supervisor that
cannot start leaves commands to a bubblewrap each (`Pool.problem` says why).
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import os
import signal
import socket
import struct
import subprocess
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from rootbound.execution.launch import wire_pipes
from rootbound.sandbox import bwrap, helper

__all__ = ["MAX_REQUEST", "Ended", "Full", "Pool", "Request", "SupervisedChild", "Supervisor", "Unavailable", "View"]

_REPLY = struct.Struct("<2I2i")
_READY, _STARTED, _EXITED, _ERROR = 0, 1, 2, 3
MAX_REQUEST = 256 * 1024  # what the supervisor reads of a request (supervisor.c MAX_MSG)
MAX_FIELDS = 8192  # guards, environment variables, launcher arguments (its own name included) (supervisor.c)
MAX_RUNNING = 256  # commands running at once in one supervisor (supervisor.c MAXRUN: these and a spare)
_START_SECONDS = 10.0  # for bubblewrap to build the view and the supervisor to say READY (a loaded machine)
_STREAM_LIMIT = 1 << 16
_KEEP = 2  # supervisors kept per launcher (views in use at once: operator roots, client roots)


class Unavailable(Exception):
    """This command cannot go through a supervisor (too big, or none could be started): use a bubblewrap."""


class Ended(Unavailable):
    """The supervisor had started, and ended before the command could be sent: a new one may well start."""


class Full(Unavailable):
    """This command does not fit this supervisor (too many fields, or commands running): it gets a bubblewrap, and
    the supervisor keeps serving the others."""


@dataclass(frozen=True)
class View:
    """What a supervisor's sandbox is built from: bubblewrap's arguments after its name (`fds`: what they name) and
    the supervisor's options; `key` tells when another command needs another supervisor."""

    key: tuple[object, ...]
    argv: Sequence[str]  # bubblewrap's options (the supervisor's --file included), without the final "--"
    fds: Sequence[int]  # descriptors bubblewrap must inherit (the caller keeps and closes them)
    staged: Sequence[int]  # pipes holding the programs and the filter: inherited, then closed by the Supervisor
    options: Sequence[str]  # the supervisor's (--newnet, --carry PATH...)
    filter_fd: int  # -1: no seccomp filter (else one of `staged`)


class Request:
    """One command for the supervisor (`supervisor.c` says what each field means), encoded once: raises
    Unavailable when it is too large for one message."""

    def __init__(self, cwd: str, guards: Sequence[str], env: Sequence[str], args: Sequence[str]) -> None:
        fields = [f"c{cwd}", *(f"g{g}" for g in guards), *(f"e{e}" for e in env), *(f"x{a}" for a in args)]
        if any("\0" in f for f in fields):
            raise Full("a NUL character in the request")
        if max(len(guards), len(env), len(args) + 1) > MAX_FIELDS:
            raise Full("too many arguments, environment variables or guards for the supervisor")
        self.body = b"".join(f.encode("utf-8", "surrogateescape") + b"\0" for f in fields)
        if len(self.body) > MAX_REQUEST - 16:
            raise Full("request too large for the supervisor")

    def encode(self, ident: int) -> bytes:
        return b"i%d\0" % ident + self.body


_CRED = struct.Struct("3i")


def _receive(sock: socket.socket) -> tuple[bytes, list[int], int]:
    """A reply, the descriptors it carries, and the PID its credentials name (the kernel translated it from the
    sandbox's numbering into ours; 0 when there are none)."""
    data, ancillary, _, _ = sock.recvmsg(_REPLY.size, socket.CMSG_SPACE(4) + socket.CMSG_SPACE(_CRED.size),
                                         socket.MSG_DONTWAIT | socket.MSG_CMSG_CLOEXEC)
    fds: list[int] = []
    pid = 0
    for level, kind, payload in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds += [int.from_bytes(payload[i:i + 4], "little", signed=True) for i in range(0, len(payload) - 3, 4)]
        elif level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS and len(payload) >= _CRED.size:
            pid = _CRED.unpack_from(payload)[0]
    return data, fds, pid


class SupervisedChild:
    """A command the supervisor started, as the runner drives it: its pipes on the loop, its end from the reply.
    `pid` is its namespace init's, the leader of its process group (killing it ends every process of it).
    Contained: the supervisor reports its end once it has reaped that init, whose end ended the namespace."""

    contained = True

    def __init__(self, pid: int, pidfd: int, out: int, err: int, loop: asyncio.AbstractEventLoop) -> None:
        self.pid = pid
        self.stdout = asyncio.StreamReader(limit=_STREAM_LIMIT, loop=loop)
        self.stderr = asyncio.StreamReader(limit=_STREAM_LIMIT, loop=loop)
        self.exited = asyncio.Event()
        self._pidfd: int | None = pidfd
        self._pipes = [open(out, "rb", buffering=0), open(err, "rb", buffering=0)]  # noqa: SIM115 (closed in close)
        self._loop = loop
        self._transports: list[asyncio.BaseTransport] = []
        self._code: int | None = None

    @property
    def pidfd(self) -> int:
        assert self._pidfd is not None
        return self._pidfd

    async def connect(self) -> None:
        try:
            await wire_pipes(self._loop, zip(self._pipes, (self.stdout, self.stderr), strict=True), self._transports)
        except BaseException:
            self.close()
            raise

    def ended(self, code: int, sig: int) -> None:
        """The supervisor's report: its exit code, or the signal that ended it (`sig`)."""
        if not self.exited.is_set():
            self._code = -sig if sig else code
            self.exited.set()

    def returncode(self) -> int | None:
        return self._code

    def close(self) -> None:
        for transport in self._transports:
            transport.close()
        for pipe in self._pipes:
            pipe.close()
        if self._pidfd is not None:
            if not self.exited.is_set():  # only on an abnormal path: its init's end ends everything in it
                with contextlib.suppress(OSError):
                    signal.pidfd_send_signal(self._pidfd, signal.SIGKILL)
            os.close(self._pidfd)
            self._pidfd = None


class Supervisor:
    """One running supervisor (bubblewrap and the C program in it), driven from one event loop."""

    def __init__(self, view: View, loop: asyncio.AbstractEventLoop) -> None:
        assert bwrap.BWRAP is not None
        self.key = view.key
        self.loop = loop
        self.retired = False
        self._sock, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, MAX_REQUEST + 4096)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)  # (the command's PID comes that way)
        self._next = 1
        self._starting: dict[int, asyncio.Future[tuple[int, int]]] = {}
        self._children: dict[int, SupervisedChild | None] = {}  # by request id; None until connected
        self._early: dict[int, tuple[int, int]] = {}  # an end reported before its child was made
        self._closed = False
        self._pending = 0  # commands waiting for it to be ready
        self._blocked: set[asyncio.Future[None]] = set()  # requests waiting for room in the socket's buffer
        self.ready: asyncio.Future[None] = loop.create_future()
        self._info, info = os.pipe2(os.O_CLOEXEC)  # bubblewrap names its sandbox's init there (reaped at the end)
        try:
            argv = [bwrap.BWRAP, "--info-fd", str(info), *view.argv, "--", helper.SUPERVISOR_PATH,
                    str(theirs.fileno()), str(view.filter_fd), *view.options]
            # Started from the loop's thread (--die-with-parent watches the thread that started it), in `/`, with
            # a bare environment: each command's own comes with its request.
            self._proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                          stderr=subprocess.PIPE, cwd="/", env={"PATH": "/usr/bin:/bin"},
                                          pass_fds=(theirs.fileno(), info, *view.fds, *view.staged),
                                          start_new_session=True)
        except BaseException:
            self._sock.close()
            os.close(self._info)
            raise
        finally:
            theirs.close()
            os.close(info)
            for fd in view.staged:
                os.close(fd)
        self._sock.setblocking(False)
        loop.add_reader(self._sock.fileno(), self._on_message)
        _LIVE.add(self)

    @property
    def alive(self) -> bool:
        return not self._closed

    @property
    def busy(self) -> bool:
        return bool(self._children) or bool(self._starting) or self._pending > 0

    async def run(self, request: Request) -> SupervisedChild:
        """Start the command `request` describes; raise Unavailable when this supervisor cannot (start: the caller
        uses a bubblewrap), OSError when the start failed."""
        self._pending += 1
        try:
            await asyncio.wait_for(asyncio.shield(self.ready), _START_SECONDS)
        except TimeoutError:
            self.close()
            raise Unavailable("the command supervisor did not start in time") from None
        finally:
            self._pending -= 1
        if self._closed:
            raise Ended("the command supervisor ended")
        if len(self._children) >= MAX_RUNNING:  # (each is counted until its end is reported: its slot is free then)
            raise Full("the command supervisor runs as many commands as it can")
        ident = self._next
        self._next += 1
        data = request.encode(ident)
        out_r, out_w = os.pipe2(os.O_CLOEXEC)
        err_r, err_w = os.pipe2(os.O_CLOEXEC)
        started: asyncio.Future[tuple[int, int]] = self.loop.create_future()
        try:
            self._starting[ident] = started
            self._children[ident] = None
            try:
                await self._send(data, [out_w, err_w])
            finally:
                os.close(out_w)
                os.close(err_w)
            pid, pidfd = await asyncio.shield(started)
        except BaseException:
            self._starting.pop(ident, None)
            self._children.pop(ident, None)
            os.close(out_r)
            os.close(err_r)
            raise
        child = SupervisedChild(pid, pidfd, out_r, err_r, self.loop)
        early = self._early.pop(ident, None)
        if early is not None:
            self._children.pop(ident, None)
            child.ended(*early)
        elif ident in self._children:
            self._children[ident] = child
        else:  # the supervisor is gone already, and the command with it
            child.ended(-1, signal.SIGKILL)
        return child

    async def _send(self, data: bytes, fds: list[int]) -> None:
        """Send a request, waiting while the socket's buffer is full (requests of up to 256 KB, many at once)."""
        while True:
            try:
                socket.send_fds(self._sock, [data], fds)
                return
            except BlockingIOError:
                pass
            except OSError as exc:
                raise Ended(f"cannot reach the command supervisor: {exc}") from None
            if self._closed:
                raise Ended("the command supervisor ended")
            writable: asyncio.Future[None] = self.loop.create_future()
            self._blocked.add(writable)
            self.loop.add_writer(self._sock.fileno(), self._wake)  # (one callback per descriptor: it wakes all)
            try:
                await asyncio.wait_for(writable, _START_SECONDS)
            except TimeoutError:
                raise Ended("the command supervisor took no request for 10 s") from None
            finally:
                self._blocked.discard(writable)
                if not self._closed and not self._blocked:
                    self.loop.remove_writer(self._sock.fileno())

    def _wake(self) -> None:
        for writable in self._blocked:
            if not writable.done():
                writable.set_result(None)

    def _on_message(self) -> None:
        while True:
            try:
                data, fds, pid = _receive(self._sock)
            except BlockingIOError:
                return
            except OSError:
                data, fds, pid = b"", [], 0
            if len(data) != _REPLY.size:
                for fd in fds:
                    os.close(fd)
                self._gone()
                return
            ident, kind, code, sig = _REPLY.unpack(data)
            if kind == _READY:
                if not self.ready.done():
                    self.ready.set_result(None)
            elif kind == _STARTED and fds:
                waiter = self._starting.pop(ident, None)
                if waiter is None or waiter.done() or pid <= 0:
                    os.close(fds[0])
                    if waiter is not None and not waiter.done():
                        waiter.set_exception(OSError("the command supervisor sent no PID"))
                else:
                    waiter.set_result((pid, fds[0]))
            elif kind == _ERROR:
                waiter = self._starting.pop(ident, None)
                if waiter is not None and not waiter.done():
                    waiter.set_exception(OSError(sig, os.strerror(sig)))
                self._children.pop(ident, None)
            elif kind == _EXITED:
                child = self._children.pop(ident, None)
                if child is not None:
                    child.ended(code, sig)
                elif ident in self._children or ident not in self._starting:
                    self._early[ident] = (code, sig)
            for fd in fds[1:] if kind == _STARTED else fds:
                os.close(fd)
            if self.retired and not self.busy:  # its last command ended: nothing will use it any more
                self.close()
                return

    def _gone(self) -> None:
        """The supervisor ended (crashed, killed, or closed): its sandbox, and every command in it, went with it."""
        if self._closed:
            return
        self._closed = True
        with contextlib.suppress(Exception):  # (the loop may be closed already)
            self.loop.remove_reader(self._sock.fileno())
            self.loop.remove_writer(self._sock.fileno())
        self._wake()  # (each then finds it closed)
        why = "the command supervisor ended"
        if not self.ready.done():
            self.ready.set_exception(Unavailable(self._stderr() or why))
        for waiter in self._starting.values():
            if not waiter.done():
                waiter.set_exception(OSError(why))
        self._starting.clear()
        for child in self._children.values():
            if child is not None:
                child.ended(-1, signal.SIGKILL)
        self._children.clear()
        self._sock.close()
        _LIVE.discard(self)
        threading.Thread(target=self._reap, daemon=True).start()  # off the loop

    def _reap(self) -> None:
        """Reap bubblewrap, then the init of its sandbox, once they end."""
        self._proc.wait()
        bwrap.reap_init(bwrap.init_pid(self._info))

    def _stderr(self) -> str:
        assert self._proc.stderr is not None
        try:
            self._proc.wait(1)
            return self._proc.stderr.read(4096).decode(errors="replace").strip()
        except (OSError, subprocess.TimeoutExpired):
            return ""

    def close(self) -> None:
        self._gone()


_LIVE: set[Supervisor] = set()


@atexit.register
def _close_all() -> None:
    """At exit: close every supervisor's socket (each then ends, and its sandbox with every command in it)."""
    for sup in list(_LIVE):
        sup._sock.close()
    _LIVE.clear()


class Pool:
    """A launcher's supervisors, by view: the current ones kept (a few), the others closed once idle."""

    def __init__(self) -> None:
        self._by_key: dict[object, Supervisor] = {}  # by the places of their views
        self._retired: set[Supervisor] = set()  # still running a command
        self.problem: str | None = None  # why supervisors cannot start here (commands then get a bubblewrap each)

    def get(self, key: tuple[object, ...], view: Callable[[], View], loop: asyncio.AbstractEventLoop) -> Supervisor:
        """The running supervisor for the view `key` names (on this loop), started (from `view()`) when there is
        none or it died. `key[0]` names the places (kept: a few at once), the rest what is there: a supervisor
        of the same places with other contents (a root replaced) is retired."""
        sup = self._by_key.get(key[0])
        if sup is not None and sup.alive and sup.loop is loop and sup.key == key:
            return sup
        if sup is not None:
            self._retire(sup)
        sup = Supervisor(view(), loop)
        self._by_key[key[0]] = sup
        while len(self._by_key) > _KEEP:  # the oldest places are probably not coming back
            self._retire(self._by_key[next(iter(self._by_key))])
        return sup

    def _retire(self, sup: Supervisor) -> None:
        """No new command for `sup`: closed now if idle, else once its last command ends (`_on_message`)."""
        if self._by_key.get(sup.key[0]) is sup:
            del self._by_key[sup.key[0]]
        sup.retired = True
        self._retired = {s for s in self._retired if s.alive}
        if sup.busy:
            self._retired.add(sup)
        else:
            sup.close()

    def close(self) -> None:
        for sup in [*self._by_key.values(), *self._retired]:
            sup.close()
        self._by_key.clear()
        self._retired.clear()

    def failed(self, why: str) -> None:
        self.problem = why
