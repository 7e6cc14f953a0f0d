"""Review of the command supervisor (branch `supervisor`): attacks through the real tools that the supervisor's
sandbox must withstand as a bubblewrap per command does. Each test here failed on the reviewed commit."""

from __future__ import annotations

import os
from pathlib import Path

import anyio
import pytest

from rootbound.sandbox import bwrap, helper
from tests.conftest import text_of
from tests.test_commands_support import CommandServers
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


_SWAPPER = r'''python3 - <<'PY'
import os, random, time
end, i = time.time() + {seconds}, 0
while time.time() < end:  # .git/hooks, missing when this command started, made and renamed away at random times
    try:
        os.mkdir(".git/hooks")
    except OSError:
        pass
    time.sleep(random.uniform(0, 0.004))
    i += 1
    try:
        os.rename(".git/hooks", f".git/h{{i}}")
    except OSError:
        pass
print("swaps", i)
PY
'''

_WHERE = ("awk '$5 ~ /[.]git[/]h[0-9]+$/ {print \"GUARD-LANDED-AT\", $5}' /proc/self/mountinfo; "
          "test -d .git/hooks && touch .git/hooks/pre-commit 2>/dev/null && echo HOOK-WRITTEN; true")


async def test_a_guard_renamed_while_it_is_bound_is_not_left_writable(servers: CommandServers,
                                                                      tmp_path: Path) -> None:
    """The guards are looked up in the command's namespace, then bound onto that descriptor (open_tree +
    move_mount), and nothing checks afterwards that the mount is at the guarded path (a bubblewrap per command has
    the launcher's --bound check). A concurrent command for which .git/hooks was missing (so not a mount point in
    its namespace) renames .git/hooks away and makes a new one between the lookup and the bind: the read-only bind
    lands at the renamed directory, and the command gets a writable .git/hooks."""
    h = await _server(servers, max_concurrent=6)
    ws = tmp_path / "workspace"
    (ws / ".git").mkdir()
    (ws / ".git" / "config").write_text("[core]\n")
    seconds = 40
    seen: list[str] = []
    stop = anyio.Event()

    async def swapper() -> None:
        await _sh(h, _SWAPPER.format(seconds=seconds), timeout=seconds + 20)
        stop.set()

    async def prober() -> None:
        while not stop.is_set() and not seen:
            got = await _sh(h, _WHERE)
            out = str(got["stdout"])
            if "GUARD-LANDED-AT" in out:
                seen.append(out)
                stop.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(swapper)
        await anyio.sleep(1)
        for _ in range(4):
            tg.start_soon(prober)
        await stop.wait()
        tg.cancel_scope.cancel()
    assert not seen, seen


async def test_a_command_with_many_arguments_runs(servers: CommandServers) -> None:
    """supervisor.c refuses a request with more than 8192 fields of a kind (MAX_FIELDS) with EINVAL, though it fits
    in one message (17 KB here) and a bubblewrap per command
    runs it (bubblewrap allows 9000 arguments in all): the command fails to start ("cannot start
    true: Invalid argument") instead of going to a bubblewrap of its own (as a request too large does)."""
    h = await _server(servers)
    result = await h.call("execute_command", command="echo " + " ".join(["a"] * 8300), root="workspace")
    got = result.structured_content
    assert got is not None and got.get("exit_code") == 0, text_of(result)[:300]
