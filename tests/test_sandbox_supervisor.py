"""The command supervisor (`sandbox/supervisor.py`): one long-lived bubblewrap sandbox per view, each command
forked inside it into namespaces of its own. What a bubblewrap per command gave for free and the supervisor must
give too: commands running at once cannot see each other's /tmp or processes; a supervisor that died is replaced
and the next command is as confined as before; a root replaced or added gets a new sandbox (the old one binds the
old directory). The isolation tests of tests/test_sandbox_*.py run under the supervisor unchanged."""

from __future__ import annotations

import dataclasses
import os
import signal
import time
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import pytest

from rootbound.sandbox import bwrap, helper, landlock, supervised, supervisor
from rootbound.sandbox.launchers import BwrapLauncher
from tests import live
from tests.conftest import Harness, text_of
from tests.test_commands_support import CommandServers, eventually
from tests.test_sandbox_cwd import READ_ONLY, server_with
from tests.test_sandbox_escapes import _running

pytestmark = [pytest.mark.anyio,
              pytest.mark.skipif(not bwrap.probe().ok or os.geteuid() != 0 or helper.supervisor_bytes() is None,
                                 reason="needs bubblewrap, root and a C compiler (the supervisor's conditions)")]


async def _server(servers: CommandServers, **commands: object) -> Harness:
    return await servers({"allowed": "*", "sandbox": "bwrap", "max_concurrent": 4, **commands})


def _launcher(h: Harness) -> BwrapLauncher:
    host = h.app.commands
    assert host is not None and isinstance(host.launcher, BwrapLauncher)
    return host.launcher


def _parent(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return int(f.read().rsplit(b")", 1)[1].split()[1])
    except (FileNotFoundError, IndexError, ValueError):
        return 0


def _supervisor_pids(h: Harness) -> list[int]:
    """The supervisor processes of this server (inside their bubblewraps; not the namespace inits they fork)."""
    pids = []
    for sup in list(_launcher(h).supervisors._by_key.values()):
        pids += [p for p in live.descendants(sup._proc.pid)
                 if live.comm(p) == ".rootbound-supe" and live.comm(_parent(p)) == "bwrap"]
    return pids


async def _sh(h: Harness, command: str, **kw: object) -> dict[str, object]:
    result = await h.call("shell", command=command, root="workspace", **kw)
    got = result.structured_content
    assert got is not None, text_of(result)
    return got


async def test_commands_start_in_the_supervisor_each_in_namespaces_of_its_own(servers: CommandServers) -> None:
    h = await _server(servers)
    script = "cat /proc/1/comm; echo $$; ls -A /tmp; touch /tmp/mine"
    first = await _sh(h, script)
    second = await _sh(h, script)
    assert first["exit_code"] == 0 and second["exit_code"] == 0, (first, second)
    # PID 1 is the namespace init the supervisor forked (not bubblewrap), the shell PID 2 of a new PID namespace;
    # /tmp is fresh each time: the private HOME (and what the view binds under /tmp: a checkout there), not the
    # file the first command left
    assert first["stdout"] == second["stdout"], (first, second)
    lines = str(first["stdout"]).splitlines()
    assert lines[:2] == [".rootbound-supe", "2"] and "home" in lines[2:] and "mine" not in lines, lines
    assert len(_supervisor_pids(h)) == 1  # both went through the one supervisor
    assert "commands start: by a command supervisor" in "\n".join(_launcher(h).describe())


async def test_two_commands_at_once_cannot_see_each_others_tmp_or_processes(servers: CommandServers) -> None:
    h = await _server(servers)
    got: dict[str, dict[str, object]] = {}

    async def first() -> None:
        got["a"] = await _sh(h, "echo A > /tmp/a-marker; sleep 2.5 & echo $! > /tmp/a-pid; sleep 1.5; "
                                "cat /tmp/a-marker; ls /proc | grep -c '^[0-9]'")

    async with anyio.create_task_group() as tg:
        tg.start_soon(first)
        await anyio.sleep(0.6)
        got["b"] = await _sh(h, "ls -A /tmp; echo; ps -eo comm | grep -c sleep; kill -9 -1; echo kill-returned $?")
    b_out = str(got["b"]["stdout"])
    assert "a-marker" not in b_out and "a-pid" not in b_out, b_out  # A's /tmp is A's
    assert b_out.splitlines()[-2:] == ["0", "kill-returned 1"], b_out  # A's sleeps: neither seen nor killable
    assert str(got["a"]["stdout"]).startswith("A\n"), got["a"]  # A ran on, untouched


async def test_a_crashed_supervisor_is_replaced_and_commands_stay_confined(servers: CommandServers,
                                                                           tmp_path: Path) -> None:
    h = await _server(servers)
    ws = tmp_path / "workspace"
    (ws / ".git").mkdir()
    (ws / ".git" / "config").write_text("[core]\n")
    assert (await _sh(h, "echo hi"))["stdout"] == "hi\n"
    [before] = _supervisor_pids(h)
    running: dict[str, object] = {}

    async def long() -> None:
        running["r"] = await _sh(h, "sleep 543.21; echo not-reached")

    async with anyio.create_task_group() as tg:
        tg.start_soon(long)
        assert await eventually(lambda: any("543.21" in _cmdline(p) for p in live.descendants(before)), 5)
        os.kill(before, signal.SIGKILL)
    assert "not-reached" not in str(running["r"].get("stdout"))  # it ended with its sandbox
    assert not any("543.21" in _cmdline(int(p)) for p in os.listdir("/proc") if p.isdigit())
    # The next command: a new supervisor, and the guards and the view as before.
    got = await _sh(h, "cat /proc/1/comm; echo x >> .git/config; echo x > /etc/x; echo ok > note.txt && echo written")
    assert str(got["stdout"]).splitlines() == [".rootbound-supe", "written"], got
    assert "Read-only file system" in str(got["stderr"]), got
    assert (ws / ".git" / "config").read_text() == "[core]\n" and (ws / "note.txt").read_text() == "ok\n"
    [after] = _supervisor_pids(h)
    assert after != before


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except (FileNotFoundError, ProcessLookupError):
        return ""


async def test_a_replaced_root_gets_a_new_supervisor(servers: CommandServers, tmp_path: Path) -> None:
    h = await _server(servers)
    ws = tmp_path / "workspace"
    (ws / "old.txt").write_text("old\n")
    assert (await _sh(h, "ls"))["stdout"] == "old.txt\n"
    [before] = _supervisor_pids(h)
    ws.rename(tmp_path / "workspace-before")
    ws.mkdir()
    (ws / "new.txt").write_text("new\n")
    got = await _sh(h, "ls; echo made > made.txt")
    assert got["stdout"] == "new.txt\n", got  # the directory now at the root's path, not the one bound before
    assert (ws / "made.txt").read_text() == "made\n"
    assert not (tmp_path / "workspace-before" / "made.txt").exists()
    assert await eventually(lambda: live.comm(before) != ".rootbound-supe", 5)  # the old one ended (it was idle)
    assert len(_supervisor_pids(h)) == 1


async def test_a_timeout_ends_every_process_of_the_command(servers: CommandServers) -> None:
    h = await _server(servers)
    started = time.monotonic()
    result = await h.call("shell", command="trap '' TERM; sleep 432.1 & setsid sleep 432.1 & wait", root="workspace",
                          timeout=1)
    meta = result.structured_content
    assert meta is not None and meta.get("timeout_seconds") == 1, text_of(result)
    assert time.monotonic() - started < 5
    assert await eventually(lambda: not _left("432.1"), 5), _left("432.1")


def _left(marker: str) -> list[str]:
    return [c for c in (_cmdline(int(p)) for p in os.listdir("/proc") if p.isdigit()) if marker in c]


async def test_without_a_supervisor_each_command_gets_a_bubblewrap(servers: CommandServers, tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """A supervisor that cannot start (here: bubblewrap refuses its command line) leaves the command to a bubblewrap
    of its own, confined as before, and `rootbound check` says so."""
    real_view = supervised.view

    def broken(*args: Any, **kwargs: Any) -> supervisor.View:
        got = real_view(*args, **kwargs)
        return dataclasses.replace(got, argv=["--no-such-option", *got.argv])

    monkeypatch.setattr(supervised, "view", broken)
    h = await _server(servers)
    (tmp_path / "workspace" / ".git").mkdir()
    (tmp_path / "workspace" / ".git" / "config").write_text("[core]\n")
    got = await _sh(h, "cat /proc/1/comm; echo x >> .git/config")
    assert got["stdout"] == "bwrap\n" and "Read-only file system" in str(got["stderr"]), got
    text = "\n".join(_launcher(h).describe())
    assert "commands start: a bubblewrap per command (the command supervisor could not start: " in text, text
    assert (await _sh(h, "cat /proc/1/comm"))["stdout"] == "bwrap\n"  # and no new attempt for every command


async def test_without_a_compiler_each_command_gets_a_bubblewrap(servers: CommandServers,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(helper, "_built_supervisor", [None])
    h = await _server(servers)
    assert (await _sh(h, "cat /proc/1/comm"))["stdout"] == "bwrap\n"
    assert "a bubblewrap per command (no C compiler" in "\n".join(_launcher(h).describe())


def test_a_killed_server_takes_its_supervisor_and_commands_along(tmp_path: Path) -> None:
    """The server SIGKILLed while a command runs in its supervisor: the command, the supervisor and its sandbox end
    too (bubblewrap's --die-with-parent), nothing is left running."""
    config = live.write_config(tmp_path, commands={"allowed": ["sleep"], "sandbox": "bwrap"})
    with live.raw_stdio(["--config", str(config)], tmp_path / "server.log", live.clean_env()) as server:
        server.initialize()
        server.send(live.call("execute_command", {"command": "sleep 654.32", "root": "workspace"}, 1))
        assert live.wait_until(lambda: live.running("654.32"), 10), "the command never started"
        supervisors = [p for p in live.descendants(server.proc.pid) if live.comm(p) == ".rootbound-supe"]
        assert supervisors, "the command did not go through a supervisor"
        os.kill(server.proc.pid, signal.SIGKILL)
        server.proc.wait()
    assert live.wait_until(lambda: not live.running("654.32"), 5), live.running("654.32")
    assert live.wait_until(lambda: not any(live.comm(p) == ".rootbound-supe" for p in supervisors), 5)


async def test_a_supervisor_replaced_while_busy_ends_after_its_last_command(servers: CommandServers,
                                                                           tmp_path: Path) -> None:
    h = await _server(servers)
    ws = tmp_path / "workspace"
    got: dict[str, dict[str, object]] = {}

    async def long() -> None:
        got["long"] = await _sh(h, "sleep 4; echo done")

    async with anyio.create_task_group() as tg:
        tg.start_soon(long)
        assert await eventually(lambda: any(live.comm(p) == "sleep" for s in _supervisor_pids(h)
                                            for p in live.descendants(s)), 5)
        [before] = _supervisor_pids(h)
        ws.rename(tmp_path / "workspace-before")
        ws.mkdir()
        assert (await _sh(h, "echo new > new.txt; ls"))["stdout"] == "new.txt\n"
        assert live.comm(before) == ".rootbound-supe"  # still running the long command
    assert got["long"]["stdout"] == "done\n", got  # not cut short by the replacement
    assert await eventually(lambda: live.comm(before) != ".rootbound-supe", 5)  # and ended after it


async def test_commands_sharing_the_empty_network_namespace_cannot_reach_each_other(servers: CommandServers) -> None:
    """With the network off, a supervisor's commands share its empty network namespace (loopback included): none
    can make a socket another could reach, so none can listen for another (Landlock: TCP bind; seccomp: the rest)."""
    h = await _server(servers)
    probe = ("import socket\n"
             "for kind, family, addr in ((socket.SOCK_STREAM, socket.AF_INET, ('127.0.0.1', 45678)),\n"
             "                           (socket.SOCK_DGRAM, socket.AF_INET, ('127.0.0.1', 45678)),\n"
             "                           (socket.SOCK_STREAM, socket.AF_UNIX, '\\0rootbound-probe')):\n"
             "    try:\n"
             "        socket.socket(family, kind).bind(addr); print('bound')\n"
             "    except OSError as e:\n"
             "        print(e.errno)\n")
    got = await _sh(h, f"python3 -c \"{probe}\"")
    assert got["exit_code"] == 0 and "bound" not in str(got["stdout"]), got
    assert len(str(got["stdout"]).split()) == 3, got


def _spares(h: Harness) -> list[int]:
    """The namespace inits a supervisor holds ready while none of its commands runs."""
    found = []
    for sup in _supervisor_pids(h):
        try:
            with open(f"/proc/{sup}/task/{sup}/children") as f:
                found += [int(p) for p in f.read().split() if live.comm(int(p)) == ".rootbound-supe"]
        except OSError:
            continue
    return found


async def test_between_commands_a_spare_namespace_init_waits_and_the_next_command_gets_only_its_own(
        servers: CommandServers) -> None:
    """While no command runs, the supervisor makes the next command's namespace init (its namespaces, /tmp, /proc,
    /dev/shm and /dev/pts: most of a start). The next command is handed to it and gets what one started afresh
    would: its own arguments and environment, none of the command before (the request's lists are reused, not
    cleared), and the guards of the root as it is now: a .git/hooks made after the spare is read-only too."""
    h = await _server(servers)
    ws = Path(h.app.roots["workspace"].real_path)
    many = await h.call("execute_command", command="echo " + " ".join(f"arg{i}" for i in range(40)),
                        env={f"LEFTOVER_{i}": "x" for i in range(40)}, root="workspace")
    assert many.structured_content is not None and many.structured_content["exit_code"] == 0, text_of(many)
    assert await eventually(lambda: len(_spares(h)) == 1), "no spare namespace init between commands"
    spare = _spares(h)[0]
    (ws / ".git" / "hooks").mkdir(parents=True)
    got = await _sh(h, 'echo "$0 $#"; env | grep -c LEFTOVER_; echo evil > .git/hooks/pre-commit; echo "write $?"',
                    env={"MINE": "1"})
    lines = str(got["stdout"]).splitlines()
    assert lines == ["/bin/sh 0", "0", "write 2"], got
    assert "Read-only file system" in str(got["stderr"]), got
    assert not (ws / ".git" / "hooks" / "pre-commit").exists()
    assert not os.path.exists(f"/proc/{spare}")  # the command ran in the spare, which ended with it
    assert await eventually(lambda: len(_spares(h)) == 1 and _spares(h)[0] != spare)  # and the next one is ready


async def test_a_daemon_of_a_supervised_command_is_gone_when_its_call_returns(servers: CommandServers) -> None:
    """The supervisor reports a command's end once it has reaped the command's namespace init, whose end ended
    every process in the namespace: nothing of it is left when the call returns (so the server hunts no strays of
    it), not even a daemon that left the session."""
    h = await _server(servers)
    marker = f"765.{os.getpid()}"  # a sleep argument only this run makes
    got = await _sh(h, f"setsid sleep {marker} </dev/null >/dev/null 2>&1 & echo started")
    assert got["stdout"] == "started\n", got
    assert not _running(marker)


async def test_a_supervised_command_holds_no_capability_in_any_set(servers: CommandServers) -> None:
    """Its bounding set is empty as well (nothing an exec could gain back), and it still runs as the server's user
    with its own rights: the init drops every capability it has, and only those (a drop of one the set does not
    hold would only cost a credential copy)."""
    h = await _server(servers)
    got = await _sh(h, "grep -E '^Cap(Inh|Prm|Eff|Bnd|Amb):' /proc/self/status")
    caps = dict(line.split(":\t") for line in str(got["stdout"]).splitlines())
    assert caps == {name: "0" * 16 for name in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb")}, got


async def test_a_command_with_many_arguments_runs(servers: CommandServers) -> None:
    """supervisor.c takes at most 8192 fields of a kind (MAX_FIELDS): a command with more arguments (17 KB, one
    message) goes to a bubblewrap of its own, which runs it, as a request too large does (it failed to start with
    EINVAL)."""
    h = await _server(servers)
    result = await h.call("execute_command", command="echo " + " ".join(["a"] * 8300), root="workspace")
    got = result.structured_content
    assert got is not None and got.get("exit_code") == 0, text_of(result)[:300]


async def test_what_a_command_makes_at_a_missing_guarded_path_is_removed_with_many_commands_running(
        servers: CommandServers, tmp_path: Path) -> None:
    """supervised.after waits for the command's namespace init to be gone before the sweep: with the server holding
    over 1024 descriptors (150 commands at once; commands.max_concurrent has no upper bound) that wait must still
    work (select() raised ValueError there, the call ended in an internal error and the hook stayed)."""
    h = await _server(servers, max_concurrent=300)
    ws = tmp_path / "workspace"
    (ws / ".git").mkdir()
    (ws / ".git" / "config").write_text("[core]\n")
    async with anyio.create_task_group() as tg:
        for _ in range(150):
            tg.start_soon(partial(_sh, h, "sleep 3"))
        await anyio.sleep(2)
        planted = await _sh(h, "sleep 2; mkdir .git/hooks && echo '#!/bin/sh' > .git/hooks/pre-commit; echo made")
    assert not (ws / ".git" / "hooks").exists(), planted


async def test_more_than_256_commands_at_once_all_start(servers: CommandServers) -> None:
    """supervisor.c holds 256 running commands (MAXRUN); commands.max_concurrent has no upper bound: the 257th
    command running at once gets a bubblewrap of its own (it was refused, "Resource temporarily unavailable")."""
    h = await _server(servers, max_concurrent=300)
    failed: list[str] = []

    async def one() -> None:
        result = await h.call("execute_command", command="sleep 4", root="workspace", timeout=60)
        got = result.structured_content
        if got is None or got.get("exit_code") != 0:
            failed.append(text_of(result)[:200])

    async with anyio.create_task_group() as tg:
        for _ in range(270):
            tg.start_soon(one)
    assert not failed, (len(failed), failed[:2])


async def test_many_large_requests_at_once_wait_for_room_and_all_go_to_the_supervisor(
        servers: CommandServers) -> None:
    """The request socket holds a few large requests (its buffer: 260 KB): one sent before the supervisor read those
    must wait for room (it was taken for a dead supervisor, and every later command got a bubblewrap of its own)."""
    h = await _server(servers, max_concurrent=24)
    words = " ".join(["x" * 1000] * 95)  # 95 KB of arguments (a command holds up to 100,000 characters)
    await _sh(h, "true")
    results: list[dict[str, object]] = []

    async def one() -> None:
        result = await h.call("execute_command", command=f"echo {words}", root="workspace")
        assert result.structured_content is not None, text_of(result)[:300]
        results.append(result.structured_content)

    async with anyio.create_task_group() as tg:
        for _ in range(24):
            tg.start_soon(one)
    assert [r["exit_code"] for r in results] == [0] * 24
    assert _launcher(h).supervisors.problem is None


async def test_a_read_only_root_nested_under_a_guarded_directory_stays_read_only(servers: CommandServers,
                                                                                 tmp_path: Path) -> None:
    """A read-only root nested in a writable one below a directory the guards bind over itself (`.claude`, on the
    way to the protected `.claude/settings.json`; `.git` likewise): the guard's bind carries the mounts below it
    (open_tree with AT_RECURSIVE), so the nested root stays read-only. (Cloned alone, it covered the nested root's
    read-only bind and the command wrote into that root.)"""
    ws = tmp_path / "workspace"
    docs = ws / ".claude" / "commands"
    h = await server_with(servers, [{"name": "workspace", "path": str(ws)},
                                    {"name": "docs", "path": str(docs), "allowed_tools": READ_ONLY}],
                          {"allowed": "*", "sandbox": "bwrap"})
    (docs / "review.md").write_text("as the operator wrote it\n")
    got = await _sh(h, "echo planted > .claude/commands/review.md; echo new > .claude/commands/new.md")
    assert (docs / "review.md").read_text() == "as the operator wrote it\n", got
    assert not (docs / "new.md").exists(), got


_PTY_HOLDER = r'''python3 - <<'PY'
import os, pty, time
master, slave = pty.openpty()
print("mine:", os.ttyname(slave), flush=True)
time.sleep(3)
os.set_blocking(master, False)
try:
    print("read:", os.read(master, 200))
except BlockingIOError:
    print("read: nothing")
PY
'''


async def test_a_command_cannot_open_another_commands_terminal_without_landlock(
        servers: CommandServers, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without Landlock (a kernel without it, or not enabled at boot: `auto` then runs bubblewrap alone), nothing
    but the mount namespace keeps a command out of another's terminals. A bubblewrap per command mounts a devpts
    instance of its own (`--dev`); under the supervisor every command shares the supervisor's /dev, and with it its
    /dev/pts: command B finds the pseudo-terminal command A opened and writes into it (A's master end reads it as
    if A's program had printed it); reading it instead, B would take the input meant for A's program. (With
    Landlock, B cannot open it, `--device` names five devices only, but still lists A's terminals.) The same test
    passes under a bubblewrap per command (`helper._built_supervisor` patched to `[None]`). Each command now mounts
    a devpts instance of its own."""
    monkeypatch.setattr(landlock, "_SUPPORT", landlock.Support(0))
    h = await _server(servers)
    got: dict[str, dict[str, object]] = {}

    async def holder() -> None:
        got["a"] = await _sh(h, _PTY_HOLDER, timeout=20)

    async with anyio.create_task_group() as tg:
        tg.start_soon(holder)
        await anyio.sleep(1.5)
        got["b"] = await _sh(h, "for t in /dev/pts/[0-9]*; do echo typed-by-b > $t && echo wrote $t; done; true")
    assert str(got["a"]["stdout"]).startswith("mine: /dev/pts/"), got
    assert "wrote" not in str(got["b"]["stdout"]), got
    assert "typed-by-b" not in str(got["a"]["stdout"]), got


async def test_a_command_cannot_end_itself_as_a_timeout_would(servers: CommandServers,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """The namespace init ends everything on the server's SIGTERM (a timeout). A SIGTERM from the command itself
    (`kill 1`: it can see its init, and a handled signal reaches a PID namespace's init from inside) must not: under a
    bubblewrap per command its init ignores it. Landlock (ABI >= 6) scopes signals and refuses it; without Landlock,
    only the init can tell: the server's comes from outside the namespace (no PID there)."""
    monkeypatch.setattr(landlock, "_SUPPORT", landlock.Support(0))
    h = await _server(servers)
    got = await _sh(h, "kill -TERM 1; echo sent=$?; sleep 0.3; echo survived")
    assert got["stdout"] == "sent=0\nsurvived\n" and got["exit_code"] == 0, got
    # The server's still ends it at once (not SIGKILL a grace period later), and the result names the timeout.
    result = await h.call("shell", command="sleep 30", root="workspace", timeout=1)
    meta = result.structured_content
    assert meta is not None and meta.get("timeout_seconds") == 1, text_of(result)
    assert meta["execution_time_ms"] < 1500 and "timed out" in text_of(result), text_of(result)


async def test_a_supervisor_whose_commands_could_not_start_is_not_used(servers: CommandServers, tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Where the kernel or a policy refuses part of what each command's start does (an older kernel, AppArmor's
    user-namespace restrictions, a container's seccomp profile), the supervisor's trial at start fails, and each
    command gets a bubblewrap of its own instead of failing with exit 126 one after the other. Simulated here
    with a bind to carry into each /tmp that does not exist."""
    real_view = supervised.view

    def refused(*args: Any, **kwargs: Any) -> supervisor.View:
        got = real_view(*args, **kwargs)
        return dataclasses.replace(got, options=[*got.options, "--carry", str(tmp_path / "not-there")])

    monkeypatch.setattr(supervised, "view", refused)
    h = await _server(servers)
    got = await _sh(h, "cat /proc/1/comm; echo ran")
    assert got["stdout"] == "bwrap\nran\n" and got["exit_code"] == 0, got
    text = "\n".join(_launcher(h).describe())
    assert "a bubblewrap per command (the command supervisor could not start: " in text, text
    assert "cloning a bind under /tmp" in text, text
