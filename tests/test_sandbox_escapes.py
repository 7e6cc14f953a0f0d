"""The OS sandbox holds whatever the allowlist lets run: each known way for an allowed program to act outside the
roots is tried, with `ALLOWED_COMMANDS=*` and with a narrow allowlist, under Landlock alone and under bubblewrap,
and each test proves the side effect did NOT happen (run as root, as CI runs them).

The outside directory is made readable to commands (`commands.read_paths`), so a write fails because the sandbox
forbids it, not because the directory is simply absent from bubblewrap's view.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path
from types import FrameType

import anyio
import pytest
import yaml
from mcp import Client

from rootbound.config import load_config
from rootbound.sandbox import bwrap, helper, landlock
from rootbound.server import App
from tests.conftest import Harness
from tests.test_commands_support import CommandServers, eventually
from tests.test_http import http_server, mcp_client

pytestmark = pytest.mark.anyio

NEEDS_BWRAP = pytest.mark.skipif(not bwrap.probe().ok, reason=f"bubblewrap unusable here: "
                                 f"{bwrap.probe().detail} (.ci/run installs it)")
SANDBOXES = [pytest.param("landlock"), pytest.param("bwrap", marks=NEEDS_BWRAP)]


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    path = tmp_path / "workspace"
    path.mkdir()
    (path / "inside.txt").write_text("inside\n")
    return path


async def sandboxed(servers: CommandServers, sandbox: str, allowed: list[str] | str, outside: Path,
                    **commands: object) -> Harness:
    return await servers({"allowed": allowed, "sandbox": sandbox, "read_paths": [str(outside)], **commands})


def untouched(outside: Path) -> None:
    """The outside directory holds exactly what the fixture put there."""
    assert sorted(os.listdir(outside)) == ["secret.txt"]
    assert (outside / "secret.txt").read_text() == "OUTSIDE-SECRET\n"


# (id, the narrow allowlist, the command: {out} is the outside directory)
ESCAPES = [
    ("touch", ["touch"], "touch {out}/marker"),
    ("rm", ["rm"], "rm -f {out}/secret.txt"),
    ("mv-out", ["mv"], "mv inside.txt {out}/moved"),
    ("mv-in", ["mv"], "mv {out}/secret.txt stolen"),
    ("ln-hard", ["ln"], "ln inside.txt {out}/hard"),
    ("ln-soft", ["ln"], "ln -s /etc/passwd {out}/soft"),
    ("truncate", ["truncate"], "truncate -s 0 {out}/secret.txt"),
    ("chown", ["chown"], "chown 65534 {out}/secret.txt"),  # no capabilities, under either sandbox
    ("find-exec", ["find"], "find . -maxdepth 0 -exec touch {out}/marker ';'"),
    ("find-fprint", ["find"], "find . -maxdepth 0 -fprint {out}/marker"),
    ("tar-checkpoint", ["tar"], "tar -cf /dev/null --checkpoint=1 --checkpoint-action=exec='touch {out}/marker' ."),
    ("awk-system", ["awk"], "awk 'BEGIN {{ system(\"touch {out}/marker\") }}'"),
    ("awk-print", ["awk"], "awk 'BEGIN {{ print \"x\" > \"{out}/marker\" }}'"),
    ("sed-w", ["sed"], "sed -n 'w {out}/marker' inside.txt"),
    ("git-alias", ["git"], "git -c alias.x='!touch {out}/marker' x"),
    ("env", ["env"], "env sh -c 'echo pwned > {out}/secret.txt'"),
    ("xargs", ["xargs"], "xargs touch {out}/marker"),
    ("cp", ["cp"], "cp inside.txt {out}/secret.txt"),
]


@pytest.mark.parametrize("sandbox", SANDBOXES)
@pytest.mark.parametrize("narrow", [False, True], ids=["any", "narrow"])
@pytest.mark.parametrize(("allowed", "command"), [pytest.param(a, c, id=i) for i, a, c in ESCAPES])
async def test_allowed_program_cannot_write_outside(servers: CommandServers, ws: Path, outside: Path, sandbox: str,
                                                    narrow: bool, allowed: list[str], command: str) -> None:
    h = await sandboxed(servers, sandbox, allowed if narrow else "*", outside)
    await h.ok("execute_command", command=command.format(out=outside), root="workspace")
    untouched(outside)
    assert (outside / "secret.txt").stat().st_uid == 0
    assert (ws / "inside.txt").read_text() == "inside\n"


@NEEDS_BWRAP
async def test_chmod_outside_is_stopped_by_bubblewrap(servers: CommandServers, ws: Path, outside: Path) -> None:
    """Landlock does not cover metadata changes (docs/security.md); bubblewrap's read-only mounts do."""
    h = await sandboxed(servers, "bwrap", ["chmod", "touch"], outside)
    mode = (outside / "secret.txt").stat().st_mode
    await h.ok("execute_command", command=f"chmod 000 {outside}/secret.txt")
    await h.ok("execute_command", command=f"touch -d 2001-01-01 {outside}/secret.txt")
    assert (outside / "secret.txt").stat().st_mode == mode
    assert (outside / "secret.txt").stat().st_mtime > 1e9 + 3e8


@pytest.mark.parametrize("sandbox", SANDBOXES)
async def test_writing_through_an_outside_symlink(servers: CommandServers, ws: Path, outside: Path,
                                                  sandbox: str) -> None:
    (ws / "link").symlink_to(outside / "secret.txt")
    (ws / "dirlink").symlink_to(outside)
    h = await sandboxed(servers, sandbox, ["tee", "sh"], outside)
    await h.ok("execute_command", command="tee link", root="workspace")  # empty stdin: would truncate the target
    await h.ok("execute_command", command="sh -c 'echo pwned > link; echo x > dirlink/new; cp link dirlink/copy'",
               root="workspace")
    untouched(outside)


@pytest.mark.parametrize("sandbox", SANDBOXES)
async def test_planted_git_config_cannot_write_outside(servers: CommandServers, ws: Path, outside: Path,
                                                       sandbox: str) -> None:
    """A `.git/config` planted earlier (here by the test itself) turns a plain `git status` into code execution;
    the code runs, confined."""
    subprocess.run(["git", "init", "-q", str(ws)], check=True)
    with (ws / ".git" / "config").open("a") as f:
        f.write(f"[core]\n\tfsmonitor = touch {outside}/marker; false\n")
    h = await sandboxed(servers, sandbox, ["git"], outside)
    await h.ok("execute_command", command="git status", root="workspace")
    await h.ok("shell", command=f"git -c core.fsmonitor='touch {outside}/marker2' status", root="workspace")
    untouched(outside)


@pytest.mark.parametrize("sandbox", SANDBOXES)
async def test_shell_scripts_are_confined_too(servers: CommandServers, ws: Path, outside: Path, sandbox: str) -> None:
    h = await sandboxed(servers, sandbox, "*", outside)
    result = await h.call("shell", command=f"echo pwned > {outside}/secret.txt; cd {outside} && touch m; "
                                           f"echo x >> {outside}/secret.txt; mkdir {outside}/d", root="workspace")
    assert result.is_error
    untouched(outside)
    # ...while the root itself stays writable, and the agent's temp directory works.
    got = await h.ok("shell", command='echo ok > made.txt && t=$(mktemp) && echo tmp > "$t" && cat "$t"',
                     root="workspace")
    assert got["stdout"] == "tmp\n" and (ws / "made.txt").read_text() == "ok\n"


@pytest.mark.parametrize("sandbox", SANDBOXES)
@pytest.mark.parametrize("narrow", [False, True], ids=["any", "narrow"])
async def test_no_tcp_connection_when_network_is_off(servers: CommandServers, ws: Path, outside: Path, sandbox: str,
                                                     narrow: bool) -> None:
    """A listening loopback port in the server's own process (as its HTTP port would be) cannot be reached."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        listener.setblocking(False)
        port = listener.getsockname()[1]
        h = await sandboxed(servers, sandbox, ["bash", "curl"] if narrow else "*", outside)
        got = await h.ok("execute_command", command=f"bash -c 'echo GET > /dev/tcp/127.0.0.1/{port}'")
        assert got["exit_code"] != 0
        got = await h.ok("execute_command", command=f"curl -s -m 2 http://127.0.0.1:{port}/health")
        assert got["exit_code"] != 0
        with pytest.raises(BlockingIOError):
            listener.accept()


@pytest.mark.parametrize(("sandbox", "network"), [("landlock", False), pytest.param("bwrap", False, marks=NEEDS_BWRAP),
                                                   ("landlock", True)])
async def test_the_servers_own_http_port(tmp_path: Path, sandbox: str, network: bool) -> None:
    """The real `rootbound serve --transport http` process: a command it runs tries to call the server back."""
    config = {"commands": {"allowed": ["curl"], "sandbox": sandbox, "network": network}}
    with http_server(tmp_path, **config) as base:
        async with mcp_client(base) as client:
            result = await client.call_tool("execute_command", {"command": f"curl -s -m 3 {base}/health"})
    assert result.structured_content is not None
    got = result.structured_content
    if network:  # the control: the same call does reach the server when the network is allowed
        assert (got["exit_code"], got["stdout"]) == (0, "ok")
    else:
        assert got["exit_code"] != 0 and got["stdout"] == ""


@pytest.mark.parametrize("sandbox", SANDBOXES)
async def test_tcp_works_when_network_is_allowed(servers: CommandServers, ws: Path, outside: Path,
                                                 sandbox: str) -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        h = await sandboxed(servers, sandbox, "*", outside, network=True)
        got = await h.ok("execute_command", command=f"bash -c 'echo hello > /dev/tcp/127.0.0.1/{port}'")
        assert got["exit_code"] == 0
        conn, _ = listener.accept()
        conn.close()


@pytest.fixture
def usr1() -> Iterator[list[int]]:
    """Records SIGUSR1 deliveries to this process (the server under test runs in it)."""
    received: list[int] = []

    def handler(signum: int, frame: FrameType | None) -> None:
        received.append(signum)

    previous = signal.signal(signal.SIGUSR1, handler)
    yield received
    signal.signal(signal.SIGUSR1, previous)


@pytest.mark.parametrize("sandbox", SANDBOXES)
@pytest.mark.parametrize("narrow", [False, True], ids=["any", "narrow"])
async def test_cannot_signal_the_server(servers: CommandServers, ws: Path, outside: Path, sandbox: str,
                                        narrow: bool, usr1: list[int]) -> None:
    h = await sandboxed(servers, sandbox, ["kill"] if narrow else "*", outside)
    got = await h.ok("execute_command", command=f"kill -USR1 {os.getpid()}")
    assert got["exit_code"] != 0
    await anyio.sleep(0.1)
    assert usr1 == []
    # Control: the same signal from outside the sandbox does arrive, so the check above can fail.
    os.kill(os.getpid(), signal.SIGUSR1)
    assert await eventually(lambda: usr1 == [signal.SIGUSR1], 2)


def _running(marker: str) -> list[int]:
    pids = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    if marker.encode() in f.read():
                        pids.append(int(pid))
            except OSError:
                pass
    return pids


@NEEDS_BWRAP
async def test_daemon_left_behind_is_gone_after_the_call(servers: CommandServers, ws: Path, outside: Path) -> None:
    h = await sandboxed(servers, "bwrap", "*", outside)
    marker = f"987.{os.getpid()}"  # a sleep argument only this run makes, to find the process by
    got = await h.ok("shell", command=f"setsid sleep {marker} </dev/null >/dev/null 2>&1 & echo started",
                     root="workspace")
    assert got["stdout"] == "started\n" and "note" not in got
    assert await eventually(lambda: not _running(marker), 5), _running(marker)


@NEEDS_BWRAP
async def test_timeout_leaves_nothing_running(servers: CommandServers, ws: Path, outside: Path) -> None:
    h = await sandboxed(servers, "bwrap", "*", outside)
    marker = f"876.{os.getpid()}"  # (a run beside this one, in another checkout, must not be found)
    result = await h.call("shell", command=f"trap '' TERM; sleep {marker} & setsid sleep {marker} & wait",
                          root="workspace", timeout=1)
    assert result.is_error and result.structured_content is not None
    assert result.structured_content["timeout_seconds"] == 1
    assert await eventually(lambda: not _running(marker), 5), _running(marker)


@pytest.mark.parametrize("sandbox", SANDBOXES)
async def test_read_only_root_stays_read_only(servers: CommandServers, tmp_path: Path, outside: Path,
                                              sandbox: str) -> None:
    """A root whose file tools cannot write is read-only for commands too: from inside it and from another root."""
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "manual.txt").write_text("manual\n")
    work = tmp_path / "work"
    work.mkdir()
    cfg = tmp_path / "ro.yaml"
    cfg.write_text(yaml.safe_dump({
        "roots": [{"name": "docs", "path": str(docs), "allowed_tools": ["read_file", "list_folder", "grep"]},
                  {"name": "work", "path": str(work)}],
        "commands": {"allowed": "*", "sandbox": sandbox}}))
    app = App(load_config(str(cfg), env={}))
    servers.stack.callback(app.close)
    h = Harness(app, await servers.stack.enter_async_context(Client(app.server)))
    result = await h.call("shell", command="cat manual.txt; echo x > manual.txt; touch new; rm manual.txt",
                          root="docs")
    assert result.is_error and result.structured_content is not None
    assert result.structured_content["stdout"] == "manual\n"
    await h.call("shell", command=f"touch {docs}/new; cp {docs}/manual.txt copy && echo y > {docs}/manual.txt",
                  root="work")
    assert sorted(os.listdir(docs)) == ["manual.txt"] and (docs / "manual.txt").read_text() == "manual\n"
    assert (work / "copy").read_text() == "manual\n"  # reading it, and writing the writable root, both work


@pytest.mark.parametrize("sandbox", SANDBOXES)
async def test_a_root_editable_only_by_edit_file_is_writable_for_commands(servers: CommandServers, tmp_path: Path,
                                                                          sandbox: str) -> None:
    """edit_file is a writing tool: a root that allows it may be changed by commands too (as with patch_file)."""
    src = tmp_path / "src"
    src.mkdir()
    cfg = tmp_path / "edit.yaml"
    cfg.write_text(yaml.safe_dump({
        "roots": [{"name": "src", "path": str(src), "allowed_tools": ["read_file", "edit_file"]}],
        "commands": {"allowed": "*", "sandbox": sandbox}}))
    app = App(load_config(str(cfg), env={}))
    servers.stack.callback(app.close)
    h = Harness(app, await servers.stack.enter_async_context(Client(app.server)))
    await h.ok("shell", command="echo built > out.txt", root="src")
    assert (src / "out.txt").read_text() == "built\n"


# -- UNIX sockets outside the roots ----------------------------------------------------------------------------


PYTHON = "/usr/bin/python3"  # the system interpreter: visible inside the sandbox, unlike a user's shims
NEEDS_PYTHON = pytest.mark.skipif(not os.path.exists(PYTHON), reason=f"{PYTHON} is not installed")


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


@NEEDS_BWRAP
@pytest.mark.skipif(os.geteuid() != 0, reason="needs root (CI runs the tests as root)")
@pytest.mark.parametrize("start", ["bubblewrap per command", "supervisor"])
async def test_without_landlock_the_kernels_knobs_in_proc_are_read_only(
        servers: CommandServers, monkeypatch: pytest.MonkeyPatch, start: str) -> None:
    """A sysctl write needs the file's mode only, no capability, and a command is the host's uid 0: without Landlock
    (a kernel without it: bubblewrap alone) only the mount keeps it from kernel.core_pattern ("|/a/root/file" runs
    that file as root on the next crash), /proc/sysrq-trigger (a reboot) and /proc/irq. bubblewrap covers them
    itself only when access(W_OK) succeeds, which it did not once capabilities were dropped: they were writable.
    Nothing is written here but kernel.domainname, in the command's own UTS namespace."""
    monkeypatch.setattr(landlock, "_SUPPORT", landlock.Support(0))
    if start != "supervisor":
        monkeypatch.setattr(helper, "_built_supervisor", [None])
    elif helper.supervisor_bytes() is None:
        pytest.skip("the supervisor needs a C compiler")
    h = await servers({"allowed": "*", "sandbox": "bwrap"})
    result = await h.call("shell", command="for f in /proc/sys/kernel/core_pattern /proc/sysrq-trigger; do "
                                           "[ -w $f ] && echo $f writable; done; "
                                           "echo probe > /proc/sys/kernel/domainname && echo domainname written; true",
                          root="workspace")
    got = result.structured_content
    assert got is not None and got["exit_code"] == 0, result
    assert got["stdout"] == "", got
