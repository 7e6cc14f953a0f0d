"""A client that does not read the server's stderr cannot stall it (the log never waits for its reader).

The tool-call line is written on every call's path. Before, it was a blocking write: a client that put the
server's stderr on a pipe and never read it filled the pipe (64 KiB, a few hundred lines), and from then on
every call waited for a reader that never came.
"""

from __future__ import annotations

import fcntl
import json
import os
import pty
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from rootbound.logs import JsonFormatter
from rootbound.logsink import BACKLOG, StderrSink
from tests.live import call, raw_stdio

CALLS = 600  # ~200 KB of tool-call lines: three times what a pipe holds


@pytest.fixture
def log_pipe() -> Iterator[tuple[int, int]]:
    """A pipe (read end, write end); a test that closes an end itself sets it in `closed` first."""
    read, write = os.pipe()
    yield read, write
    for fd in (read, write):
        if fd not in closed:
            os.close(fd)
    closed.clear()


closed: set[int] = set()


def close(fd: int) -> None:
    closed.add(fd)
    os.close(fd)


def read_lines(fd: int, until: str, timeout: float = 20) -> list[str]:
    """Whole lines read from `fd`, up to and with the first that contains `until` (AssertionError if none does in
    time)."""
    data, deadline = b"", time.monotonic() + timeout
    while (at := data.find(until.encode())) < 0 or data.find(b"\n", at) < 0:
        left = deadline - time.monotonic()
        assert left > 0 and select.select([fd], [], [], left)[0], f"no {until!r} in {len(data)} bytes of log"
        chunk = os.read(fd, 1 << 16)
        assert chunk, f"the log ended without {until!r}"
        data += chunk
    return data[:data.index(b"\n", at)].decode().split("\n")


def test_calls_go_on_while_nobody_reads_the_log_and_the_log_follows_once_read(
        tmp_path: Path, log_pipe: tuple[int, int]) -> None:
    read, write = log_pipe
    (tmp_path / "ws").mkdir()
    (tmp_path / "ws" / "a.txt").write_text("a\n")
    (tmp_path / "ws" / "last.txt").write_text("last\n")
    with raw_stdio(["--root", f"ws={tmp_path / 'ws'}"], write) as server:
        close(write)  # (the server holds the only writing end)
        server.initialize()
        for n in range(CALLS):
            server.send(call("stat_file", {"path": "a.txt"}, 100 + n))
            assert "result" in server.answer(100 + n, timeout=10), n  # before: no answer once the pipe was full
        server.send(call("stat_file", {"path": "last.txt"}, 99))
        assert server.answer(99, timeout=10)["result"]["structuredContent"]["size"] == 5
        # Nothing more is logged from here on: what the pipe could not take is written as it is read.
        lines = read_lines(read, '"path": "last.txt"')
    entries = [json.loads(line) for line in lines]  # every line whole
    calls = [entry for entry in entries if entry["msg"] == "tool call"]
    assert [entry["path"] for entry in calls] == ["a.txt"] * CALLS + ["last.txt"]  # all of them, in order


def test_a_server_whose_log_is_never_read_still_exits_promptly(tmp_path: Path, log_pipe: tuple[int, int]) -> None:
    _, write = log_pipe
    (tmp_path / "ws").mkdir()
    with raw_stdio(["--root", f"ws={tmp_path / 'ws'}"], write) as server:
        close(write)
        server.initialize()
        for n in range(CALLS):
            server.send(call("stat_file", {"path": "missing.txt"}, 100 + n))
            server.answer(100 + n, timeout=10)
        started = time.monotonic()
        server.stdin.close()  # end of input: the server stops
        assert server.proc.wait(timeout=15) == 0
        assert time.monotonic() - started < 10  # the log's last lines get a second, not for ever


def sink_on(write: int) -> StderrSink:
    sink = StderrSink(write)
    sink.setFormatter(JsonFormatter())
    return sink


def test_past_its_backlog_the_log_drops_whole_lines_and_says_how_many(log_pipe: tuple[int, int]) -> None:
    read, write = log_pipe
    sink = sink_on(write)
    text = "x" * 200
    total = 3 * (BACKLOG // 200)  # three times what the backlog keeps
    started = time.monotonic()
    for n in range(total):
        sink.write_line(json.dumps({"n": n, "text": text}))
    assert time.monotonic() - started < 5  # never waited for the reader
    assert sink.backlog_bytes <= BACKLOG
    lines = read_lines(read, "log lines dropped")
    kept = [json.loads(line) for line in lines[:-1]]
    assert [entry["n"] for entry in kept] == list(range(len(kept)))  # whole lines, in order, the first ones
    dropped = json.loads(lines[-1])
    assert dropped["level"] == "WARNING" and dropped["dropped"] == total - len(kept)
    # Once the backlog has left, lines are written at once again.
    sink.write_line('{"n": "after"}')
    assert read_lines(read, '"after"', timeout=5)[-1] == '{"n": "after"}'


def test_a_reader_that_goes_away_costs_the_log_nothing(log_pipe: tuple[int, int]) -> None:
    read, write = log_pipe
    sink = sink_on(write)
    for n in range(1000):  # ~100 KB: a backlog, and its writer thread
        sink.write_line(json.dumps({"n": n, "text": "y" * 100}))
    assert sink.backlog_bytes > 0
    writer = sink.writer
    assert writer is not None
    close(read)  # the reader leaves without reading: EPIPE from now on
    for _ in range(10):
        sink.write_line("after the reader left")  # no exception, no wait
    writer.join(timeout=5)
    assert not writer.is_alive() and sink.writer is None
    assert sink.backlog_bytes == 0


def test_lines_logged_from_within_a_write_are_written_once_whole_and_in_order(log_pipe: tuple[int, int]) -> None:
    """A signal handler (or a finalizer) that logs runs between any two steps of a write in progress on the same
    thread; its lines wait for that write to finish. A timer signal every 100 µs here, while a slow reader drains."""
    read, write = log_pipe
    sink = sink_on(write)
    got = bytearray()
    done = threading.Event()

    def reader() -> None:
        while not done.is_set() or select.select([read], [], [], 0.2)[0]:
            if select.select([read], [], [], 0.05)[0]:
                got.extend(os.read(read, 4096))
                time.sleep(0.001)

    thread = threading.Thread(target=reader)
    thread.start()
    handled = [0]

    in_handler = [False]

    def on_alarm(signum: int, frame: object) -> None:
        if in_handler[0]:  # (on a slow machine the next tick comes before this one is done: no pile-up)
            return
        in_handler[0] = True
        try:
            handled[0] += 1
            sink.write_line(json.dumps({"from": "handler", "n": handled[0]}))
        finally:
            in_handler[0] = False

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, 100e-6, 100e-6)
    try:
        try:
            for n in range(20_000):
                sink.write_line(json.dumps({"from": "main", "n": n, "pad": "z" * 40}))
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)
        sink.write_line('{"from": "end"}')
        deadline = time.monotonic() + 30
        while b'{"from": "end"}' not in got and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:  # (the reader stops before the pipe is closed, whatever happened)
        done.set()
        thread.join()
    entries = [json.loads(line) for line in got.decode().splitlines()]  # every line whole
    main = [e["n"] for e in entries if e.get("from") == "main"]
    from_handler = [e["n"] for e in entries if e.get("from") == "handler"]
    dropped = sum(e.get("dropped", 0) for e in entries)
    assert handled[0] > 100, "the timer did not interrupt the writes"
    assert main == sorted(set(main)) and from_handler == sorted(set(from_handler))  # once each, in order
    assert len(main) + len(from_handler) + dropped == 20_000 + handled[0]  # each written, or counted


FULL_DISK = """
import json, os, resource, sys
from rootbound.logs import JsonFormatter
from rootbound.logsink import StderrSink
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
sink = StderrSink(fd)
sink.setFormatter(JsonFormatter())
sink.write_line(json.dumps({"n": "before", "pad": "a" * 300}))
resource.setrlimit(resource.RLIMIT_FSIZE, (500, resource.RLIM_INFINITY))  # the file cannot grow past 500 bytes
for n in range(5):
    sink.write_line(json.dumps({"n": n, "pad": "b" * 300}))  # the first goes out in part, then EFBIG
resource.setrlimit(resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))  # room again
sink.write_line(json.dumps({"n": "after"}))
print("ok")
"""


def test_a_write_that_fails_drops_lines_counts_them_and_the_log_goes_on(tmp_path: Path) -> None:
    """A full disk (here: a file size limit) is not the end of the log: what could not be written is counted, the
    line cut short by it is ended, and the next lines are written."""
    log_file = tmp_path / "server.log"
    done = subprocess.run([sys.executable, "-c", FULL_DISK, str(log_file)], capture_output=True, text=True,
                          timeout=60)
    assert done.stdout.strip() == "ok", done.stderr
    lines = log_file.read_text().splitlines()
    assert json.loads(lines[0])["n"] == "before"
    assert lines[1].startswith('{"n": 0') and not lines[1].endswith("}")  # cut by the limit, and ended there
    notice, after = json.loads(lines[2]), json.loads(lines[3])
    assert notice["msg"].startswith("log lines dropped") and notice["dropped"] == 5
    assert after == {"n": "after"} and len(lines) == 4


def test_a_terminal_that_is_not_read_never_holds_a_line(log_pipe: tuple[int, int]) -> None:
    """A terminal refuses RWF_NOWAIT, and a page written when poll says room can still wait; the sink writes a
    terminal through a non-blocking open of its own (the terminal's flags, shared with the shell, stay)."""
    master, slave = pty.openpty()
    try:
        flags = fcntl.fcntl(slave, fcntl.F_GETFL)
        sink = sink_on(slave)
        started = time.monotonic()
        for n in range(3_000):  # ~200 KB: far more than the terminal holds
            sink.write_line(json.dumps({"n": n, "pad": "t" * 50}))
        assert time.monotonic() - started < 5
        assert fcntl.fcntl(slave, fcntl.F_GETFL) == flags  # (not made non-blocking)
        got = b""
        while b'"n": 2999' not in got:
            assert select.select([master], [], [], 10)[0], "the backlog did not follow"
            got += os.read(master, 1 << 16)
        lines = got.decode().replace("\r\n", "\n").split("\n")
        kept = [json.loads(line) for line in lines if line.startswith('{"n"')]
        assert [entry["n"] for entry in kept] == list(range(3_000))
        sink.close()
    finally:
        os.close(master)
        os.close(slave)


SLOW_READER_AT_EXIT = """
import gc, json, logging, os, subprocess, sys
from rootbound.logs import configure_logging
from rootbound.logsink import StderrSink
read, write = os.pipe()
reader = subprocess.Popen([sys.executable, "-c", "import os, time\\nwhile os.read(0, 64): time.sleep(0.001)"],
                          stdin=read)
os.close(read)
os.dup2(write, 2)  # the server's stderr: a pipe read slowly
os.close(write)
configure_logging()
sink = logging.getLogger().handlers[0]
assert isinstance(sink, StderrSink)
for n in range(4000):  # ~400 KB: a backlog its writer thread is still writing at exit
    sink.write_line(json.dumps({"n": n, "pad": "p" * 80}))
class Closing:  # as asyncio's transports collected at shutdown: "Event loop is closed"
    def __del__(self):
        raise RuntimeError("Event loop is closed")
gc.disable()
for _ in range(50):
    leftover = Closing()
    leftover.cycle = leftover
    del leftover
"""


def test_the_server_exits_while_its_log_still_leaves_and_finalizers_report(tmp_path: Path) -> None:
    """At exit, a writer thread still writing the backlog can be frozen holding the sink's lock (daemon threads
    stop where they are); a finalizer that reports an error then logged through that lock, and waited for ever."""
    done = subprocess.run([sys.executable, "-c", SLOW_READER_AT_EXIT], capture_output=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
