"""What one command result shows the model (issue 15, item 7): at most about `commands.inline_output_limit`
characters of output across stdout and stderr (head and tail, cut at line boundaries, a marker naming the lines
not shown and the spill file that holds all of them), and the two command tools' shared spellings."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.conftest import text_of
from tests.test_commands_support import CommandServers

pytestmark = pytest.mark.anyio

SEQ = "".join(f"{n}\n" for n in range(1, 100_001))


async def test_seq_100000_shows_head_and_tail_within_the_cap_and_spills_the_whole(servers: CommandServers) -> None:
    h = await servers({"allowed": ["seq"]})
    result = await h.call("execute_command", command="seq 1 100000")
    got = result.structured_content
    assert got is not None and not result.is_error
    out = got["stdout"]
    assert len(out) <= 30_000 and len(text_of(result)) <= 31_000
    assert out.startswith("1\n2\n3\n") and out.endswith("99999\n100000\n")
    marker = re.search(r"\n\[\.\.\. (\d+) bytes of stdout cut here \((\d+) in all; lines (\d+)-(\d+) not shown\); "
                       r"the whole output is in root 'command-output', path '([^']+)'", out)
    assert marker, out[14_000:15_000]
    first, last = int(marker[3]), int(marker[4])
    head, tail = out[:marker.start() + 1], out[out.index("...]\n") + 5:]
    assert head == SEQ[:len(head)] and head.endswith(f"\n{first - 1}\n")  # whole lines, up to the first cut one
    assert tail == SEQ[-len(tail):] and tail.startswith(f"{last + 1}\n")
    assert int(marker[2]) == got["stdout_bytes"] == len(SEQ)
    assert int(marker[1]) == len(SEQ) - len(head) - len(tail)
    assert got["truncated"] is True
    [spill] = got["output_files"]
    assert (spill["stream"], spill["path"], spill["size"], spill["complete"]) == ("stdout", marker[5], len(SEQ), True)
    # The spill holds all of it; the marker's line numbers are its line numbers.
    assert h.app.spill is not None
    [whole] = Path(h.app.spill.path).glob(f"client-*/{spill['path']}")
    assert whole.read_text() == SEQ
    page = await h.ok("read_file", root="command-output", path=spill["path"], offset_lines=first, limit_lines=2)
    assert page["content"].startswith(f"{first}\n{first + 1}\n")


async def test_the_cap_is_shared_by_stdout_and_stderr_in_the_shell_tool(servers: CommandServers) -> None:
    h = await servers({"allowed": "*", "inline_output_limit": 10_000})
    result = await h.call("shell", command="seq 1 100000; seq 1 100000 >&2")
    got = result.structured_content
    assert got is not None
    assert len(got["stdout"]) + len(got["stderr"]) <= 10_000 and len(text_of(result)) <= 10_300
    for name in ("stdout", "stderr"):
        assert got[name].startswith("1\n2\n") and got[name].endswith("\n100000\n")
        assert f"bytes of {name} cut here ({len(SEQ)} in all; lines " in got[name]
    assert sorted(f["stream"] for f in got["output_files"]) == ["stderr", "stdout"]
    assert all(f["size"] == len(SEQ) for f in got["output_files"])
    assert "bytes of stdout cut here" in text_of(result) and "bytes of stderr cut here" in text_of(result)


async def test_a_small_stream_gives_its_share_to_a_big_one_and_whole_outputs_leave_no_spill(
        servers: CommandServers) -> None:
    h = await servers({"allowed": "*"})
    got = await h.ok("shell", command="seq 1 100000; seq 1 2000 >&2")
    stderr = "".join(f"{n}\n" for n in range(1, 2001))
    assert got["stderr"] == stderr  # 8,893 characters, shown whole
    assert 29_000 < len(got["stdout"]) + len(stderr) <= 30_000
    assert [f["stream"] for f in got["output_files"]] == ["stdout"]
    got = await h.ok("shell", command="seq 1 4000")  # 18,893 bytes: past where a spill starts, but shown whole
    assert got["stdout"] == "".join(f"{n}\n" for n in range(1, 4001)) and got["truncated"] is False
    assert got.get("output_files") is None
    assert h.app.spill is not None
    assert len(list(Path(h.app.spill.path).glob("client-*/*"))) == 1  # only the first call's stdout


async def test_a_single_huge_line_is_cut_inside_it(servers: CommandServers) -> None:
    h = await servers({"allowed": "*"})
    got = await h.ok("shell", command="head -c 100000 /dev/zero | tr '\\0' x")
    out = got["stdout"]
    assert len(out) <= 30_000 and out.startswith("xxx") and out.endswith("xxx")
    assert "bytes of stdout cut here (100000 in all); the whole output is in root 'command-output'" in out


async def test_both_command_tools_take_both_spellings(servers: CommandServers, tmp_path: Path) -> None:
    (tmp_path / "workspace" / "sub").mkdir(parents=True)
    h = await servers({"allowed": "*"})
    for tool, cwd, env in (("execute_command", "working_directory", "environment"), ("shell", "cwd", "env"),
                           ("execute_command", "cwd", "env"), ("shell", "working_directory", "environment")):
        command = "sh -c 'pwd; echo $GREETING'" if tool == "execute_command" else "pwd; echo $GREETING"
        got = await h.ok(tool, command=command, root="workspace", **{cwd: "sub", env: {"GREETING": "hello"}})
        assert got["stdout"].endswith("/sub\nhello\n"), (tool, cwd, got)
        assert got["working_directory"].endswith("sub")
        assert isinstance(got["duration_ms"], int) and got["duration_ms"] == got["execution_time_ms"]


@pytest.mark.parametrize("tool", ["execute_command", "shell"])
@pytest.mark.parametrize(("one", "other"), [("cwd", "working_directory"), ("env", "environment")])
async def test_both_spellings_of_one_parameter_at_once_are_refused(servers: CommandServers, tool: str, one: str,
                                                                   other: str, tmp_path: Path) -> None:
    h = await servers({"allowed": "*"})
    value: object = "." if one == "cwd" else {"A": "1"}
    message = await h.err(tool, command="touch ran", root="workspace", **{one: value, other: value})
    assert one in message and other in message and "only one" in message
    assert not (tmp_path / "workspace" / "ran").exists()
