"""Security review of the command tools: attacks an agent controls, over the real protocol, run as root.

Each test proves the side effect did NOT happen (a marker file, a connection, a secret in the output), and most
carry a control showing the same probe does succeed where it should, so the test can fail.
"""

from __future__ import annotations

import os
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from rootbound.sandbox import bwrap
from tests.test_commands_support import CommandServers

pytestmark = pytest.mark.anyio

NEEDS_BWRAP = pytest.mark.skipif(not bwrap.probe().ok, reason=f"bubblewrap unusable here: {bwrap.probe().detail}")
SANDBOXES = [pytest.param("landlock"), pytest.param("bwrap", marks=NEEDS_BWRAP)]
PYTHON = "/usr/bin/python3"  # the system interpreter: visible inside the sandbox, unlike a user's shims
NEEDS_PYTHON = pytest.mark.skipif(not os.path.exists(PYTHON), reason=f"{PYTHON} is not installed")


# -- the shell checker versus what /bin/sh runs --------------------------------------------------------------------

# /bin/sh deletes backslash-newline before it reads tokens, so `$\<newline>(` is `$(`; the parser saw plain text.
CONTINUATIONS = [
    'echo "$\\\n(touch {m})"',
    "cat <<E\n$\\\n(touch {m})\nE",
    "echo $\\\n(touch {m})",
    "x=$\\\n{{y:-$(touch {m})}}; echo",
    "echo hi &\\\n& touch {m}",
    "to\\\nuch {m}",
]


@pytest.mark.parametrize("script", CONTINUATIONS)
async def test_line_continuations_cannot_hide_a_command(servers: CommandServers, tmp_path: Path,
                                                        script: str) -> None:
    marker = tmp_path / "M"
    h = await servers({"allowed": ["echo", "cat"], "sandbox": "off"})
    result = await h.call("shell", command=script.format(m=marker), root="workspace")
    assert result.is_error
    assert not marker.exists()


async def test_ordinary_line_continuations_still_run(servers: CommandServers) -> None:
    h = await servers({"allowed": ["echo", "cat"], "sandbox": "off"})
    got = await h.ok("shell", command="echo one \\\n  two \\\n  three && cat <<'E'\nraw\\\nE", root="workspace")
    assert got["stdout"] == "one two three\nraw\\\n"


# -- execute_command: names that are not the allowed program ------------------------------------------------------


@pytest.mark.parametrize("command", ["./ls {m}", "VAR=x ls {m}", "\\./ls {m}", "ｌｓ {m}", "l\\s\\ {m}",
                                     "{ws}/ls {m}", "/usr/bin/../../{ws}/ls {m}"])
async def test_other_binaries_named_like_an_allowed_one(servers: CommandServers, tmp_path: Path,
                                                        command: str) -> None:
    ws = tmp_path / "workspace"
    ws.mkdir()
    marker = tmp_path / "M"
    (ws / "ls").write_text(f"#!/bin/sh\ntouch {marker}\n")
    (ws / "ls").chmod(0o755)
    h = await servers({"allowed": ["ls"], "sandbox": "off"})
    result = await h.call("execute_command", command=command.format(m=marker, ws=ws), root="workspace")
    assert result.is_error or (result.structured_content or {}).get("exit_code") != 0
    assert not marker.exists()


@pytest.mark.parametrize("name", ["PATH", "BASH_ENV", "ENV", "LD_PRELOAD", "LD_LIBRARY_PATH"])
async def test_environment_cannot_redirect_an_allowed_name(servers: CommandServers, tmp_path: Path,
                                                           name: str) -> None:
    ws = tmp_path / "workspace"
    ws.mkdir()
    marker = tmp_path / "M"
    (ws / "ls").write_text(f"#!/bin/sh\ntouch {marker}\n")
    (ws / "ls").chmod(0o755)
    h = await servers({"allowed": ["ls", "sh"], "sandbox": "off"})
    for tool, key in (("execute_command", "env"), ("shell", "environment")):
        result = await h.call(tool, command="ls", root="workspace", **{key: {name: str(ws)}})
        assert result.is_error
    assert not marker.exists()


async def test_a_fifo_as_cwd_is_an_error_not_a_hang(servers: CommandServers, tmp_path: Path) -> None:
    (tmp_path / "workspace").mkdir()
    os.mkfifo(tmp_path / "workspace" / "fifo")
    h = await servers({"allowed": "*", "sandbox": "off"})
    assert "not a directory" in await h.err("execute_command", command="true", cwd=str(tmp_path / "workspace/fifo"))
    assert "not a directory" in (await h.err("execute_command", command="true", root="workspace", cwd="fifo")).lower()


# -- the sandbox: UNIX sockets, the server's secrets, git configuration from the environment ----------------------


@pytest.fixture
def listener(tmp_path: Path) -> Iterator[tuple[Path, socket.socket]]:
    """A pathname UNIX socket outside the roots, standing for /run/docker.sock or a root tmux server."""
    where = tmp_path / "outside-sock"
    where.mkdir()
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(where / "agent.sock"))
        sock.listen()
        sock.setblocking(False)
        yield where, sock


def _accepted(sock: socket.socket) -> bool:
    try:
        conn, _ = sock.accept()
    except BlockingIOError:
        return False
    conn.close()
    return True


CONNECT = PYTHON + " -c \"import socket; s = socket.socket(socket.AF_UNIX); s.connect('{p}'); print('CONNECTED')\""


@NEEDS_PYTHON
@pytest.mark.parametrize("sandbox", SANDBOXES)
async def test_no_unix_socket_outside_the_roots(servers: CommandServers, listener: tuple[Path, socket.socket],
                                                sandbox: str) -> None:
    """A directory the command can see (read_paths here; under Landlock alone also its working directory outside the
    roots) shows its sockets too, and a read-only bind does not stop connect(). With the network off, no UNIX socket
    can be created at all."""
    where, sock = listener
    h = await servers({"allowed": "*", "sandbox": sandbox})
    command = CONNECT.format(p=where / "agent.sock")
    got = await h.ok("execute_command", command=command, cwd=str(where))
    assert got["exit_code"] != 0 and "CONNECTED" not in got["stdout"]
    assert (await h.call("shell", command=command, working_directory=str(where))).is_error
    assert not _accepted(sock)
    # Pipes and socketpair() still work: they reach nobody else.
    got = await h.ok("execute_command", command=PYTHON + " -c \"import socket; a, b = socket.socketpair(); "
                     "a.send(b'ok'); print(b.recv(2).decode())\"", root="workspace")
    assert got["stdout"] == "ok\n"
    # Control: with the network allowed, the same command does connect.
    h = await servers({"allowed": "*", "sandbox": sandbox, "network": True, "read_paths": [str(where)]})
    got = await h.ok("execute_command", command=command, cwd=str(where))
    assert got["stdout"] == "CONNECTED\n" and _accepted(sock)


@pytest.mark.parametrize("sandbox", SANDBOXES)
async def test_the_servers_environment_is_out_of_reach(servers: CommandServers, sandbox: str,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """The token is in the server's own /proc/PID/environ: not readable by a command (Landlock denies ptrace-class
    access to processes outside the command's domain; bubblewrap's PID namespace hides the server)."""
    monkeypatch.setenv("ROOTBOUND_AUTH_TOKEN", "REVIEW-TOKEN-4242")
    # A process of the server's user started with the token, as `rootbound serve` is (os.environ changes made in
    # this process do not show in its own /proc/PID/environ).
    holder = subprocess.Popen(["sleep", "30"], env={"ROOTBOUND_AUTH_TOKEN": "REVIEW-TOKEN-4242"})
    try:
        h = await servers({"allowed": "*", "sandbox": sandbox})
        script = (f"cat /proc/{holder.pid}/environ /proc/{os.getpid()}/environ /proc/$PPID/environ; "
                  "for p in /proc/[0-9]*; do cat $p/environ; done; echo done")
        result = await h.call("shell", command=script, root="workspace")
        meta = result.structured_content
        assert meta is not None and meta["stdout"].endswith("done\n")
        assert "REVIEW-TOKEN-4242" not in str(meta)
        # Control: the secret really is there for an unconfined reader.
        with open(f"/proc/{holder.pid}/environ", "rb") as f:
            assert b"REVIEW-TOKEN-4242" in f.read()
    finally:
        holder.kill()
        holder.wait()


@pytest.mark.parametrize("sandbox", SANDBOXES)
async def test_git_configuration_from_the_environment_is_confined(servers: CommandServers, tmp_path: Path,
                                                                  outside: Path, sandbox: str) -> None:
    """GIT_CONFIG_COUNT/KEY/VALUE is `git -c` through `env`: refused unless the operator allows it
    (tests/test_command_env.py); when allowed, the sandbox holds."""
    ws = tmp_path / "workspace"
    ws.mkdir()
    subprocess.run(["git", "init", "-q", str(ws)], check=True)
    h = await servers({"allowed": ["git"], "sandbox": sandbox, "read_paths": [str(outside)],
                       "allowed_exec_vars": ["GIT_CONFIG_*"]})
    env = {"GIT_CONFIG_COUNT": "2", "GIT_CONFIG_KEY_0": "core.fsmonitor",
           "GIT_CONFIG_VALUE_0": f"touch {outside}/marker; false", "GIT_CONFIG_KEY_1": "alias.x",
           "GIT_CONFIG_VALUE_1": f"!touch {outside}/marker2 {ws}/inside-marker"}
    await h.ok("execute_command", command="git status", root="workspace", env=env)
    await h.ok("execute_command", command="git x", root="workspace", env=env)
    assert sorted(os.listdir(outside)) == ["secret.txt"]
    assert (ws / "inside-marker").exists()  # control: the injected command did run, confined
