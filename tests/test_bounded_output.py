"""Log lines and error replies stay small whatever the client sends (issue 12, item 6).

Before, a 10 MB `path` produced a 20 MB log line and a 10 MB error reply.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from tests.live import call, raw_stdio

BIG = "a" * 10 * 1024 * 1024

CALLS: list[tuple[str, dict[str, Any]]] = [
    ("read_file", {"root": "ws", "path": BIG}),
    ("write_file", {"root": "ws", "path": BIG, "content": "x"}),
    ("list_folder", {"root": "ws", "path": BIG}),
    ("stat_file", {"root": "ws", "path": BIG}),
    ("hash_file", {"root": "ws", "path": "x/" + BIG}),
    ("create_folder", {"root": "ws", "path": BIG}),
    ("copy", {"source_root": "ws", "source_path": BIG, "dest_root": "ws", "dest_path": "b"}),
    ("read_file", {"root": BIG, "path": "a.txt"}),
    ("read_file", {"root": "ws", "path": "a.txt", BIG: 1}),
    ("shell", {"command": "echo hi", "working_directory": BIG}),
    (BIG, {}),
]


def test_a_ten_megabyte_argument_gives_a_small_reply_and_small_log_lines(tmp_path: Path) -> None:
    (tmp_path / "ws").mkdir()
    with raw_stdio(["--root", f"ws={tmp_path / 'ws'}", "--allow-commands", "echo"], tmp_path / "err.log") as server:
        server.initialize()
        for n, (tool, arguments) in enumerate(CALLS, start=1):
            server.send(call(tool, arguments, n))
            reply = server.answer(n, timeout=60)
            what = f"{tool[:20]}({', '.join(k[:20] for k in arguments)})"
            assert reply["result"]["isError"], what
            text = reply["result"]["content"][0]["text"]
            assert len(json.dumps(reply)) < 2048, f"{what}: a {len(json.dumps(reply))}-byte reply"
            assert re.search(r"…' \((10485760|10485762) bytes\)", text), f"{what}: {text}"  # how long it was
        lines = server.stderr().splitlines()
    assert sum("tool call" in line for line in lines) == len(CALLS) - 1  # an unknown tool is not a tool call
    longest = max(lines, key=len)
    assert len(longest) < 4096, f"a {len(longest)}-byte log line: {longest[:300]}"
