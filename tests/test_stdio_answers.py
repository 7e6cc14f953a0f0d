"""Every request gets an answer over stdio, even one the protocol parser refuses (issue 12, item 5).

Before, the SDK's stdio reader dropped these lines without a reply or a log line, so a client waiting
on them hung; over HTTP the same payloads already got a 400 with a JSON-RPC error.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.live import INITIALIZE, ROOTBOUND, RawStdio, call, clean_env, raw_stdio

DEEP = '{"jsonrpc":"2.0","id":12,"method":"tools/call","params":{"name":"read_file","arguments":{"a":' \
       + "[" * 199 + "]" * 199 + "}}}"
DEEPER = '{"jsonrpc":"2.0","id":19,"method":"tools/list","params":{"a":' + "[" * 100_000 + "]" * 100_000 + "}}"

# (what the client sends, the error code it must get back, the id it must carry)
CASES: list[tuple[str, bytes, int, Any]] = [
    ("lone surrogate", b'{"jsonrpc":"2.0","id":11,"method":"tools/call","params":{"name":"read_file",'
                       b'"arguments":{"root":"ws","path":"\\ud800"}}}', -32700, 11),
    ("199 levels of nesting in arguments", DEEP.encode(), -32700, 12),
    ("100000 levels of nesting", DEEPER.encode(), -32700, None),
    ("params as an array", b'{"jsonrpc":"2.0","id":13,"method":"tools/list","params":[]}', -32600, 13),
    ("an object id", b'{"jsonrpc":"2.0","id":{"a":1},"method":"tools/list"}', -32600, None),
    ("a float id", b'{"jsonrpc":"2.0","id":1.5,"method":"tools/list"}', -32600, 1.5),
    ("a boolean id", b'{"jsonrpc":"2.0","id":true,"method":"tools/list"}', -32600, None),
    ("a null id", b'{"jsonrpc":"2.0","id":null,"method":"tools/list"}', -32600, None),
    ('"jsonrpc": "1.0"', b'{"jsonrpc":"1.0","id":14,"method":"tools/list"}', -32600, 14),
    ("a method that is not a string", b'{"jsonrpc":"2.0","id":15,"method":7}', -32600, 15),
    ("invalid UTF-8", b'{"jsonrpc":"2.0","id":16,"method":"tools/list\xff"}', -32700, None),
    ("not JSON", b'{"jsonrpc": "2.0", "id": 17,', -32700, None),
    ("not an object", b'"tools/list"', -32600, None),
]


@pytest.fixture
def server(tmp_path: Path) -> Iterator[RawStdio]:
    (tmp_path / "ws").mkdir()
    with raw_stdio(["--root", f"ws={tmp_path / 'ws'}"], tmp_path / "err.log") as s:
        s.initialize()
        yield s


def test_every_unparseable_request_is_answered_and_logged(server: RawStdio) -> None:
    for n, (what, line, code, id) in enumerate(CASES):
        server.send(line)
        reply = server.recv()
        assert reply.get("id", "missing") == id and reply["error"]["code"] == code, f"{what}: {reply}"
        assert len(json.dumps(reply)) < 300, f"{what}: the error reply quotes the input"
        # ... and the server keeps serving.
        server.send({"jsonrpc": "2.0", "id": 1000 + n, "method": "ping"})
        assert server.answer(1000 + n)["result"] == {}, what
    logged = [json.loads(line) for line in server.stderr().splitlines() if "unreadable message" in line]
    assert [(entry["code"], entry["id"]) for entry in logged] == [(code, id) for _, _, code, id in CASES]
    assert all(len(line) < 1000 for line in server.stderr().splitlines())


def test_a_batch_gets_one_error_per_request(server: RawStdio) -> None:
    server.send(json.dumps([{"jsonrpc": "2.0", "id": 21, "method": "ping"},
                            {"jsonrpc": "2.0", "id": 22, "method": "ping"}]))
    replies = [server.recv(), server.recv()]
    assert [(r["id"], r["error"]["code"]) for r in replies] == [(21, -32600), (22, -32600)]
    assert "batches are not supported" in replies[0]["error"]["message"]


def test_a_malformed_response_is_not_answered(server: RawStdio) -> None:
    """JSON-RPC never answers a response, even a broken one: the next message out is the ping's answer."""
    server.send({"jsonrpc": "1.0", "id": 31, "result": {}})
    server.send({"jsonrpc": "2.0", "id": 32, "method": "ping"})
    assert server.recv() == {"jsonrpc": "2.0", "id": 32, "result": {}}


def test_a_request_split_across_writes_is_read_whole(server: RawStdio) -> None:
    line = json.dumps({"jsonrpc": "2.0", "id": 41, "method": "ping"}).encode()
    for part in (line[:10], line[10:30], line[30:] + b"\n\n"):  # and a blank line, which is skipped
        server.stdin.write(part)
        server.stdin.flush()
    assert server.recv() == {"jsonrpc": "2.0", "id": 41, "result": {}}


def test_lines_that_arrive_together_are_each_answered_in_turn(server: RawStdio) -> None:
    """Several requests and an unreadable line in one write: every one is answered (the server reads them from
    the wire as it asks for each next message, the unreadable one answered on the way)."""
    pings = [json.dumps({"jsonrpc": "2.0", "id": n, "method": "ping"}).encode() for n in (51, 52, 53)]
    server.stdin.write(pings[0] + b"\n" + b'{"jsonrpc": "2.0", "id": 54,\n' + pings[1] + b"\n" + pings[2] + b"\n")
    server.stdin.flush()
    replies = [server.recv() for _ in range(4)]
    assert sorted(r["id"] for r in replies if "result" in r) == [51, 52, 53]
    assert [r["error"]["code"] for r in replies if "error" in r] == [-32700]


def test_replies_go_whole_into_a_regular_file(tmp_path: Path) -> None:
    """stdout may be a file (`rootbound > replies.jsonl`): each reply lands in it whole, on a line of its own.
    (A file is written plainly, never waited on: epoll refuses regular files.)"""
    (tmp_path / "ws").mkdir()
    (tmp_path / "ws" / "big.txt").write_text("x" * 99 + "\n")
    (tmp_path / "ws" / "many.txt").write_text("".join(f"line {n}\n" for n in range(20_000)))
    out = tmp_path / "replies.jsonl"
    with open(out, "wb") as replies:
        proc = subprocess.Popen([ROOTBOUND, "--root", f"ws={tmp_path / 'ws'}"], stdin=subprocess.PIPE,
                                stdout=replies, stderr=subprocess.DEVNULL, env=clean_env())
    assert proc.stdin is not None
    try:
        for message in (INITIALIZE, {"jsonrpc": "2.0", "method": "notifications/initialized"},
                        call("stat_file", {"path": "big.txt"}, 1), call("read_file", {"path": "many.txt"}, 2)):
            proc.stdin.write(json.dumps(message).encode() + b"\n")
            proc.stdin.flush()
        deadline = time.monotonic() + 30
        while out.read_bytes().count(b"\n") < 3 and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.05)
    finally:
        proc.stdin.close()  # end of input: the server stops
        assert proc.wait(timeout=30) == 0
    answers = [json.loads(line) for line in out.read_text().splitlines()]
    assert [answer["id"] for answer in answers] == [0, 1, 2]
    assert answers[1]["result"]["structuredContent"]["size"] == 100
    assert "line 19999" in answers[2]["result"]["content"][0]["text"]
