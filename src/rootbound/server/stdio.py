"""rootbound's own stdio transport: one JSON-RPC message per line on stdin and stdout, moved by the event loop;
and an App served on it until end of input or a stop signal (`serve_stdio_until_signal`).

It replaces the SDK's `stdio_server` for two reasons:
* the SDK reads stdin in a worker thread blocked in `readline()`, which nothing can interrupt, so
  SIGTERM and Ctrl-C could not stop a server whose client kept stdin open. Here fd 0 is read only
  when the event loop reports it readable, so cancelling the server is immediate;
* the SDK drops every line its parser refuses, unanswered and unlogged, so a client waiting on that
  request hangs. Here each one gets its JSON-RPC error reply (`inbound.read_line`) and a log line.

File status flags are never changed: stdin and stdout may be a terminal shared with the user's shell,
which must not be left non-blocking. A blocking descriptor is safe here because we read only after
readiness (one reader: the data is there) and write without waiting (`rootbound.outlet`). Descriptors the
kernel cannot poll (a regular file, /dev/null) never block anyway, and are used directly. Never blocking
on a write matters: a client busy writing a big request while we write a big reply must still find us
reading.
"""

from __future__ import annotations

import fcntl
import os
import signal
from collections import deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress

import anyio
import anyio.abc
import anyio.lowlevel
from anyio.streams.memory import MemoryObjectSendStream
from mcp.shared.message import SessionMessage

from rootbound.execution.output import heap_grew, trim_heap
from rootbound.logs import log
from rootbound.outlet import Outlet
from rootbound.server.app import App
from rootbound.server.inbound import Refusal, read_line
from rootbound.server.signals import STOP_SIGNALS

__all__ = ["serve_stdio", "serve_stdio_until_signal", "stdio_transport"]

READ_SIZE = 1 << 16
PIPE_SIZE = 1 << 20  # the unprivileged maximum by default (/proc/sys/fs/pipe-max-size)
BIG_REPLY = 1 << 20  # bytes: once a reply this big has left, the heap's free pages go back (`trim_heap`)
DRAIN_SECONDS = 2.0  # how long replies already queued may take to leave once the server has stopped


class _Wire:
    """The client's pipes, on private descriptors; meanwhile fd 0 reads /dev/null and fd 1 writes to stderr,
    so that nothing else in the process (or a child) can read a request or corrupt the reply stream."""

    def __init__(self) -> None:
        self.stdin = fcntl.fcntl(0, fcntl.F_DUPFD_CLOEXEC, 3)
        self.stdout = fcntl.fcntl(1, fcntl.F_DUPFD_CLOEXEC, 3)
        null = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
        os.dup2(null, 0)
        os.close(null)
        os.dup2(2, 1)
        self._poll_stdin = True
        with suppress(OSError):  # a pipe (not a socket or terminal): room for a big reply in one write
            fcntl.fcntl(self.stdout, fcntl.F_SETPIPE_SZ, PIPE_SIZE)
        self._out = Outlet(self.stdout)

    def close(self) -> None:
        self._out.close()
        os.dup2(self.stdin, 0)
        os.dup2(self.stdout, 1)
        os.close(self.stdin)
        os.close(self.stdout)

    async def read(self) -> bytes:
        """The next bytes from the client; b"" at end of input."""
        while True:
            if self._poll_stdin:
                try:
                    await anyio.wait_readable(self.stdin)
                except PermissionError:  # a regular file or /dev/null: epoll refuses them; reading never blocks
                    self._poll_stdin = False
            if not self._poll_stdin:
                await anyio.lowlevel.checkpoint()  # stay cancellable while reading a file to its end
            try:
                return os.read(self.stdin, READ_SIZE)
            except BlockingIOError:  # someone else made the descriptor non-blocking: wait again
                continue
            except OSError as exc:  # EIO from a terminal that hung up, ECONNRESET from a socket: the client left
                log.info("client input failed; treating it as end of input", extra={"error": str(exc)})
                return b""

    async def write(self, *parts: bytes) -> None:
        """Write `parts` one after the other (a reply and its newline: joining them would copy a big reply), in
        one system call when the descriptor takes them: a reply that arrives in two writes wakes the client twice."""
        views = [memoryview(part) for part in parts if part]
        while views:
            written = self._out.write_now(views)
            if not written:  # full: wait for the client to read (a regular file never is)
                await anyio.wait_writable(self.stdout)
                continue
            while written:  # drop what was written, whole parts first
                if written >= len(views[0]):
                    written -= len(views[0])
                    views.pop(0)
                else:
                    views[0], written = views[0][written:], 0
        await anyio.lowlevel.checkpoint()


class _Inbound:
    """The client's messages, as the server's read stream: read from the wire when the server asks for the next one.

    No task and no memory stream between the wire and the server: each request reaches the SDK one hand-over (an
    event-loop turn, ~0.15 ms on a small machine) sooner. An unreadable line is answered here (`read_line`), through
    the writer. End of input ends the stream."""

    def __init__(self, wire: _Wire, replies: MemoryObjectSendStream[SessionMessage | bytes]) -> None:
        self._wire = wire
        self._replies = replies
        self._pending = bytearray()
        self._ready: deque[SessionMessage] = deque()
        self._ended = False

    async def receive(self) -> SessionMessage:
        while not self._ready:
            if self._ended:
                raise anyio.EndOfStream
            chunk = await self._wire.read()
            if not chunk:
                self._ended = True
                if self._pending:  # a last line without its newline
                    await self._deliver(bytes(self._pending))
                    self._pending.clear()
                continue
            start = len(self._pending)
            self._pending += chunk
            last = self._pending.rfind(b"\n", start)  # (only the new part is searched: a big request comes in pieces)
            if last < 0:
                continue
            with memoryview(self._pending) as view:
                lines = bytes(view[:last]).split(b"\n")
            del self._pending[:last + 1]  # (taken before any await: a cancelled delivery cannot deliver a line twice)
            for line in lines:
                await self._deliver(line)
        return self._ready.popleft()

    async def _deliver(self, line: bytes) -> None:
        parsed = read_line(line)
        if isinstance(parsed, SessionMessage):
            self._ready.append(parsed)
        elif isinstance(parsed, Refusal):
            log.warning("unreadable message", extra={"code": parsed.code, "reason": parsed.message,
                                                     "id": parsed.ids[0] if parsed.ids else None,
                                                     "bytes": parsed.size})
            for reply in parsed.replies():
                await self._replies.send(reply)

    def __aiter__(self) -> _Inbound:
        return self

    async def __anext__(self) -> SessionMessage:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def aclose(self) -> None:
        self._ended = True
        self._ready.clear()
        self._replies.close()

    async def __aenter__(self) -> _Inbound:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


@asynccontextmanager
async def stdio_transport() -> AsyncIterator[tuple[_Inbound, MemoryObjectSendStream[SessionMessage | bytes]]]:
    """Serve the process's stdin and stdout: `async with stdio_transport() as (read, write): await server.run(...)`.

    The body's end (end of input, or the caller cancelling its own scope inside) stops reading; replies
    already written by the server still leave, for up to DRAIN_SECONDS.
    """
    wire = _Wire()
    write_send, write_recv = anyio.create_memory_object_stream[SessionMessage | bytes](0)
    inbound = _Inbound(wire, write_send.clone())  # (its own way to the writer, for error replies)
    drained = anyio.Event()
    try:
        async with anyio.create_task_group() as tg:

            async def write_lines() -> None:
                try:
                    async with write_recv:
                        async for item in write_recv:
                            if isinstance(item, bytes):
                                await wire.write(item)
                            else:
                                data = _encode(item)
                                del item  # the reply's model and its text: only the bytes are needed now
                                await wire.write(data, b"\n")
                                if len(data) >= BIG_REPLY:
                                    # The call's own trim comes at the next call, and may run while this reply
                                    # is still held here: megabytes of its freed heap stayed for good.
                                    del data
                                    heap_grew()
                                    trim_heap()
                except OSError as exc:  # EPIPE: the client stopped reading; nothing more can reach it
                    log.info("client output closed; stopping", extra={"error": str(exc)})
                    tg.cancel_scope.cancel()
                finally:
                    drained.set()

            tg.start_soon(write_lines)
            try:
                yield inbound, write_send
            finally:
                await inbound.aclose()  # (nothing more is read)
                write_send.close()
                with anyio.move_on_after(DRAIN_SECONDS, shield=True):
                    await drained.wait()
                tg.cancel_scope.cancel()
    finally:
        with suppress(OSError):
            wire.close()


def _encode(message: SessionMessage) -> bytes:
    """The message as JSON, without its newline. Straight to UTF-8 bytes: model_dump_json makes these very bytes
    and decodes them to a str, and encoding that back (with the newline) copied a big reply three more times."""
    model = message.message
    return bytes(model.__pydantic_serializer__.to_json(model, by_alias=True, exclude_unset=True))


async def serve_stdio(app: App, stop: anyio.CancelScope | None = None) -> None:
    """Serve one client on stdin/stdout until end of input, or until `stop` is cancelled."""
    async with stdio_transport() as (read, write):
        with stop or anyio.CancelScope():
            await app.server.run(read, write, app.server.create_initialization_options())


async def serve_stdio_until_signal(app: App) -> int | None:
    """Serve stdio until end of input or a stop signal (returned). A signal cancels the calls in flight,
    so running commands' process groups are killed in their `finally` blocks instead of orphaned."""
    stopped_by: int | None = None
    stop = anyio.CancelScope()

    async def watch(*, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        nonlocal stopped_by
        with anyio.open_signal_receiver(*STOP_SIGNALS) as signals:
            task_status.started()
            async for sig in signals:
                if stopped_by is None:
                    stopped_by = sig
                    log.info("stopping on signal", extra={"signal": signal.Signals(sig).name})
                stop.cancel()

    async with anyio.create_task_group() as tg:
        await tg.start(watch)
        await serve_stdio(app, stop)
        tg.cancel_scope.cancel()
    return stopped_by
