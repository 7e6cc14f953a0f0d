"""Review of the command supervisor (branch `supervisor`): attacks through the real tools that the supervisor's
sandbox must withstand as a bubblewrap per command does. Each test here failed on the reviewed commit."""

from __future__ import annotations

import os
from pathlib import Path

import anyio
import pytest

from rootbound.sandbox import bwrap, helper
from tests.conftest import text_of
from tests.test_commands_support import CommandServers, eventually
from tests.test_sandbox_supervisor import _server, _sh

pytestmark = [pytest.mark.anyio,
              pytest.mark.skipif(not bwrap.probe().ok or os.geteuid() != 0 or helper.supervisor_bytes() is None,
                                 reason="needs bubblewrap, root and a C compiler (the supervisor's conditions)")]

_KEYS = r'''python3 - {mode} <<'PY'
import ctypes, sys
libc = ctypes.CDLL(None, use_errno=True)
USER_KEYRING = ctypes.c_int(-4)
if sys.argv[1] == "add":  # add_key("user", "rootbound-review", ..., @u)
    got = libc.syscall(248, b"user", b"rootbound-review", b"left-by-an-earlier-command", 26, USER_KEYRING)
    print("added" if got > 0 else f"add refused {{ctypes.get_errno()}}")
else:  # keyctl(KEYCTL_SEARCH, @u, "user", "rootbound-review"), then KEYCTL_READ
    key = libc.syscall(250, 10, USER_KEYRING, b"user", b"rootbound-review", 0)
    buf = ctypes.create_string_buffer(64)
    size = libc.syscall(250, 11, key, buf, 64) if key > 0 else 0
    print(buf.raw[:size].decode() if size > 0 else "no key")
PY
'''


async def test_a_command_cannot_leave_a_key_for_the_next_command(servers: CommandServers) -> None:
    """The kernel keyrings: every command of a supervisor is uid 0 in the supervisor's one user namespace, so they
    share its user keyring (@u), which lives as long as the supervisor: a key one command adds is read by the next
    (and by any command running at the same time), a channel and a state that outlive the call. (Under a bubblewrap
    per command, with no user namespace, @u is the host root's own user keyring.)"""
    h = await _server(servers)
    first = await _sh(h, _KEYS.format(mode="add"))
    assert first["exit_code"] == 0, first
    second = await _sh(h, _KEYS.format(mode="get"))
    assert "left-by-an-earlier-command" not in str(second["stdout"]), second


_MAKER = ("mkdir .git/hooks; while [ ! -e a-started ]; do sleep 0.05; done; "
          "mv .git/hooks .git/moved-away; echo renamed")
_PLANTER = ("touch a-started; while [ ! -d .git/moved-away ]; do sleep 0.05; done; sleep 2; "
            "mkdir -p .git/hooks && printf '#!/bin/sh\\necho planted\\n' > .git/hooks/pre-commit && echo planted")


@pytest.mark.parametrize("start", ["supervisor", "bubblewrap per command"])
async def test_a_guarded_hooks_directory_renamed_by_another_command_does_not_let_a_hook_outlive_the_calls(
        servers: CommandServers, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, start: str) -> None:
    """Command B starts while .git/hooks is missing (so it is no mount point in B's namespace) and makes it; command
    A starts, and its guard binds that .git/hooks read-only in A's namespace. B renames the directory away: the
    rename is allowed (a mount point in another namespace does not count) and A's read-only mount follows the
    dentry to .git/moved-away. B ends; its sweep finds nothing at .git/hooks. A then makes .git/hooks and a
    pre-commit hook: A's sweep leaves it (.git/hooks existed when A started). The hook outlives both calls. Same
    under a bubblewrap per command (its --bound check runs once, before the rename)."""
    if start != "supervisor":
        monkeypatch.setattr(helper, "_built_supervisor", [None])
    h = await _server(servers)
    ws = tmp_path / "workspace"
    (ws / ".git").mkdir()
    (ws / ".git" / "config").write_text("[core]\n")
    got: dict[str, dict[str, object]] = {}

    async def maker() -> None:
        got["b"] = await _sh(h, _MAKER, timeout=20)

    async with anyio.create_task_group() as tg:
        tg.start_soon(maker)
        assert await eventually(lambda: (ws / ".git" / "hooks").is_dir(), 10)
        got["a"] = await _sh(h, _PLANTER, timeout=20)
    assert got["b"]["stdout"] == "renamed\n", got
    assert not (ws / ".git" / "hooks" / "pre-commit").exists(), got


async def test_a_command_with_many_arguments_runs(servers: CommandServers) -> None:
    """supervisor.c refuses a request with more than 8192 fields of a kind (MAX_FIELDS) with EINVAL, though it fits
    in one message (17 KB here) and a bubblewrap per command
    runs it (bubblewrap allows 9000 arguments in all): the command fails to start ("cannot start
    true: Invalid argument") instead of going to a bubblewrap of its own (as a request too large does)."""
    h = await _server(servers)
    result = await h.call("execute_command", command="echo " + " ".join(["a"] * 8300), root="workspace")
    got = result.structured_content
    assert got is not None and got.get("exit_code") == 0, text_of(result)[:300]
