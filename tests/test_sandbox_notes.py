"""A command the sandbox denied says so, and names the setting that would allow it (issue 15, item 6): before,
`cat` of a file outside the sandbox's view looked like any failure (`exit_code: 1 … Permission denied`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import text_of
from tests.test_commands_support import CommandServers
from tests.test_sandbox_escapes import SANDBOXES

pytestmark = pytest.mark.anyio


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    path = tmp_path / "outside"
    path.mkdir()
    (path / "notes.txt").write_text("notes\n")
    return path


@pytest.mark.parametrize("sandbox", SANDBOXES)
async def test_a_write_outside_the_view_names_write_paths(servers: CommandServers, outside: Path,
                                                          sandbox: str) -> None:
    h = await servers({"allowed": "*", "sandbox": sandbox})
    # /usr: read-only under both (bubblewrap: a read-only mount, EROFS; Landlock: not writable, EACCES).
    result = await h.call("shell", command="touch /usr/rootbound-note-test", root="workspace")
    got = result.structured_content
    assert got is not None and got["exit_code"] != 0
    assert "commands.write_paths" in got["sandbox_note"]
    assert "Read-only file system" in got["sandbox_note"] or "Permission denied" in got["sandbox_note"]
    assert got["stderr"] and got["command"] and "execution_time_ms" in got  # every other field is still there
    assert f"\nSandbox: {got['sandbox_note']}" in text_of(result)


async def test_a_read_outside_the_view_names_read_paths_under_landlock(servers: CommandServers,
                                                                        outside: Path) -> None:
    h = await servers({"allowed": "*", "sandbox": "landlock"})
    result = await h.call("execute_command", command=f"cat {outside}/notes.txt", root="workspace")
    got = result.structured_content
    assert got is not None and got["exit_code"] == 1 and "Permission denied" in got["stderr"]
    assert "commands.read_paths" in got["sandbox_note"] and "stderr says \"Permission denied\"" in got["sandbox_note"]
    text = text_of(result)
    assert "\nsandbox_note: " in text and "commands.read_paths" in text.split("\nsandbox_note: ")[1]
    # Allowed by that key, the same command works, with no note.
    h = await servers({"allowed": "*", "sandbox": "landlock", "read_paths": [str(outside)]})
    got = await h.ok("execute_command", command=f"cat {outside}/notes.txt", root="workspace")
    assert got["stdout"] == "notes\n" and "sandbox_note" not in got


@pytest.mark.parametrize("sandbox", SANDBOXES)
async def test_a_connection_with_the_network_off_names_commands_network(servers: CommandServers,
                                                                         sandbox: str) -> None:
    h = await servers({"allowed": "*", "sandbox": sandbox})
    got = await h.ok("execute_command", command="bash -c 'echo GET > /dev/tcp/127.0.0.1/9'", root="workspace")
    assert got["exit_code"] != 0
    assert "commands.network: true" in got["sandbox_note"]


async def test_no_note_without_a_sandbox_or_for_an_ordinary_failure(servers: CommandServers) -> None:
    h = await servers({"allowed": "*", "sandbox": "landlock"})
    got = (await h.call("shell", command="echo 'no such thing' >&2; exit 3", root="workspace")).structured_content
    assert got is not None and got["exit_code"] == 3 and "sandbox_note" not in got
    got = await h.ok("shell", command="echo 'Permission denied' >&2", root="workspace")  # exit 0: not a failure
    assert "sandbox_note" not in got
    h = await servers({"allowed": "*", "sandbox": "off"})
    result = await h.call("shell", command="echo 'Permission denied' >&2; exit 1", root="workspace")
    assert result.structured_content is not None and "sandbox_note" not in result.structured_content
    assert "Sandbox:" not in text_of(result)
