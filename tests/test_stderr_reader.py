"""A client that does not read the server's stderr cannot stall it (the log never waits for its reader).

The tool-call line is written on every call's path. Before, it was a blocking write: a client that put the
server's stderr on a pipe and never read it filled the pipe (64 KiB, a few hundred lines), and from then on
every call waited for a reader that never came.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
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
    read, write = os.pipe()
    try:
        yield read, write
    finally:
        for fd in (read, write):
            with contextlib.suppress(OSError):  # (a test may have closed one already)
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
        os.close(write)  # (the server holds the only writing end)
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
        os.close(write)
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
    os.close(read)  # the reader leaves without reading: EPIPE from now on
    for _ in range(10):
        sink.write_line("after the reader left")  # no exception, no wait
    deadline = time.monotonic() + 5
    while sink.backlog_bytes and time.monotonic() < deadline:
        time.sleep(0.01)
    assert sink.backlog_bytes == 0
    assert not [t for t in threading.enumerate() if t.name == "rootbound-log"]
