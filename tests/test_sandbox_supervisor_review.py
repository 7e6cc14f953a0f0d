"""Review of the command supervisor (branch `supervisor`): attacks through the real tools that the supervisor's
sandbox must withstand as a bubblewrap per command does. Each test here failed on the reviewed commit."""

from __future__ import annotations

import os

import pytest

from rootbound.sandbox import bwrap, helper
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
