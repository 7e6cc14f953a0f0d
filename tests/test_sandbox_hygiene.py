"""What every sandboxed command starts with: resource limits, a private temp directory and HOME, no capabilities,
the `run_as` user, a checked working directory; and the sandbox choice itself, which fails closed."""

from __future__ import annotations

import ctypes
import os
import subprocess
import threading
from pathlib import Path

import pytest

from rootbound.config import load_config
from rootbound.report import describe_commands
from rootbound.sandbox import bwrap, helper, landlock
from rootbound.sandbox.select import headline
from tests import live
from tests.conftest import Harness
from tests.test_commands_support import CommandServers, eventually

pytestmark = pytest.mark.anyio

NEEDS_BWRAP = pytest.mark.skipif(not bwrap.probe().ok, reason=f"bubblewrap unusable here: "
                                 f"{bwrap.probe().detail} (.ci/run installs it)")
SANDBOXES = [pytest.param("landlock"), pytest.param("bwrap", marks=NEEDS_BWRAP)]
AS_ROOT = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (CI runs the tests as root)")


@pytest.fixture
def servers(servers: CommandServers, tmp_path: Path) -> CommandServers:
    (tmp_path / "workspace").mkdir()  # these tests put files in it before the first server starts
    return servers


def limits_of(text: str) -> dict[str, str]:
    """/proc/self/limits as {name: soft limit}."""
    out = {}
    for line in text.splitlines()[1:]:
        name, soft = line[:26].strip(), line[26:47].strip()
        out[name] = soft
    return out


@pytest.mark.parametrize("sandbox", SANDBOXES)
async def test_resource_limits_apply(servers: CommandServers, tmp_path: Path, sandbox: str) -> None:
    h = await servers({"allowed": "*", "sandbox": sandbox, "limits": {
        "cpu_seconds": 7, "address_space": 2 << 30, "processes": 123, "file_size": 1 << 20, "open_files": 64}})
    got = await h.ok("execute_command", command="cat /proc/self/limits")
    limits = limits_of(got["stdout"])
    assert limits["Max cpu time"] == "7"
    assert limits["Max address space"] == str(2 << 30)
    assert limits["Max processes"] == "123"
    assert limits["Max file size"] == str(1 << 20)
    assert limits["Max open files"] == "64"
    result = await h.call("shell", command="head -c 2000000 /dev/zero > big", root="workspace")
    assert result.is_error  # killed by SIGXFSZ, or stopped with EFBIG
    assert (tmp_path / "workspace" / "big").stat().st_size <= 1 << 20


@pytest.mark.parametrize("sandbox", SANDBOXES)
async def test_private_temp_directory_and_home(servers: CommandServers, sandbox: str) -> None:
    h = await servers({"allowed": "*", "sandbox": sandbox})
    script = ('echo "$TMPDIR"; echo "$HOME"; ls -A "$TMPDIR" "$HOME" | grep -c mine; '
              'touch "$TMPDIR/mine" "$HOME/mine"; echo ok')
    first = (await h.ok("shell", command=script))["stdout"].splitlines()
    second = (await h.ok("shell", command=script))["stdout"].splitlines()
    assert first[-1] == second[-1] == "ok"
    assert first[2] == second[2] == "0"  # what one command left in its temp directory and HOME, the next never sees
    assert first[1] != os.environ.get("HOME")  # the server's HOME is not readable in the sandbox: a private one
    if sandbox == "landlock":
        assert first[0] != second[0]
        # Removed after each call (in the background when not empty, as here).
        assert await eventually(lambda: not os.path.exists(first[0]) and not os.path.exists(second[0]), 5)


@pytest.mark.parametrize("sandbox", SANDBOXES)
async def test_command_output_is_shown_to_commands_once_it_holds_spill_files(servers: CommandServers,
                                                                              sandbox: str) -> None:
    h = await servers({"allowed": "*", "sandbox": sandbox, "max_output_size": 1024})
    assert h.app.spill is not None
    empty = h.app.spill.empty.real_path
    # Before this client's first spill its command-output root is the shared empty placeholder: not in the view.
    got = await h.ok("execute_command", command=f"ls -a {empty}")
    assert got["exit_code"] != 0 and got["stdout"] == "", got
    assert (await h.ok("execute_command", command="pwd", root="command-output"))["exit_code"] == 0
    # Once it holds this client's spill files, a command reads them there (read-only).
    [spill] = (await h.ok("execute_command", command="seq 1 5000"))["output_files"]
    got = await h.ok("execute_command", command=f"tail -n 2 {spill['path']}", root="command-output")
    assert got["stdout"] == "4999\n5000\n", got
    got = await h.ok("execute_command", command=f"truncate -s 0 {spill['path']}", root="command-output")
    assert got["exit_code"] != 0, got


@pytest.mark.parametrize("sandbox", SANDBOXES)
async def test_no_capabilities(servers: CommandServers, sandbox: str) -> None:
    h = await servers({"allowed": "*", "sandbox": sandbox})
    got = await h.ok("execute_command", command="grep -E '^(Cap|NoNewPrivs)' /proc/self/status")
    status = dict(line.split(":\t") for line in got["stdout"].splitlines())
    assert {status[k] for k in ("CapInh", "CapPrm", "CapEff", "CapAmb")} == {"0000000000000000"}, status
    assert status["NoNewPrivs"] == "1"  # (so no exec can grant a capability, whatever the bounding set holds)
    # The bounding set is emptied too where the server may: a root server's compiled launcher under Landlock, and
    # the command supervisor (root or not; a working directory in a root). A bubblewrap per command (the one above:
    # its working directory is outside the roots) keeps bubblewrap's, as root.
    if os.geteuid() == 0 and helper.helper_bytes() is not None \
            and (sandbox == "landlock" or helper.supervisor_bytes() is not None):
        got = await h.ok("execute_command", command="grep CapBnd /proc/self/status", root="workspace")
        assert got["stdout"] == "CapBnd:\t0000000000000000\n", got


@AS_ROOT
@pytest.mark.parametrize("sandbox", SANDBOXES)
async def test_run_as_drops_root(servers: CommandServers, tmp_path: Path, sandbox: str) -> None:
    ws = tmp_path / "workspace"
    ws.chmod(0o777)
    (ws / "roots-file").write_text("root's\n")
    h = await servers({"allowed": "*", "sandbox": sandbox, "run_as": "nobody"})
    result = await h.call("shell", command="id -u; touch made; echo x > roots-file", root="workspace")
    got = result.structured_content
    assert got is not None and got["stdout"].splitlines()[0] == "65534"
    assert (ws / "made").stat().st_uid == 65534
    assert (ws / "roots-file").read_text() == "root's\n"  # plain file permissions apply again
    assert "Permission denied" in got["stderr"]


async def test_run_as_unknown_user_refuses_commands(servers: CommandServers, tmp_path: Path) -> None:
    h = await servers({"allowed": "*", "run_as": "no-such-user-4711"})
    error = await h.err("execute_command", command="touch MARKER", root="workspace")
    assert "commands are refused: commands.run_as: no such user: no-such-user-4711" in error
    assert not (tmp_path / "workspace" / "MARKER").exists()


async def test_the_server_environment_is_not_inherited(servers: CommandServers,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SOME_SERVER_SECRET", "S3CRET")
    h = await servers({"allowed": "*"})  # auto: the default
    got = await h.ok("execute_command", command="cat /proc/self/environ")
    assert "S3CRET" not in got["stdout"] and "PATH=" in got["stdout"]


def test_launcher_refuses_a_swapped_working_directory(tmp_path: Path) -> None:
    """The launcher inside bubblewrap starts only in the directory checked on the server's handle."""
    marker = tmp_path / "MARKER"
    done = subprocess.run([*bwrap.launcher_argv(), "--cwd", "1:1", "--", "/usr/bin/touch", "touch", str(marker)],
                          cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode == 126
    assert "working directory changed" in done.stderr
    assert not marker.exists()
    st = os.stat(tmp_path)
    done = subprocess.run([*bwrap.launcher_argv(), "--cwd", f"{st.st_dev}:{st.st_ino}", "--", "/usr/bin/touch",
                           "touch", str(marker)], cwd=tmp_path)
    assert done.returncode == 0 and marker.exists()


# -- choosing the sandbox: fail closed ------------------------------------------------------------------------


@pytest.fixture
def no_bwrap(monkeypatch: pytest.MonkeyPatch) -> None:
    """As on a machine without bubblewrap."""
    monkeypatch.setattr(bwrap, "BWRAP", None)
    monkeypatch.setattr(bwrap, "_PROBES", {})


@pytest.fixture
def no_landlock(monkeypatch: pytest.MonkeyPatch) -> None:
    """As on a kernel without Landlock."""
    monkeypatch.setattr(landlock, "_SUPPORT", landlock.Support(0))


@pytest.mark.usefixtures("no_bwrap")
async def test_bwrap_required_but_missing_refuses(servers: CommandServers, tmp_path: Path) -> None:
    h = await servers({"allowed": "*", "sandbox": "bwrap"})
    error = await h.err("execute_command", command="touch MARKER", root="workspace")
    assert "commands.sandbox is bwrap but bwrap is not installed" in error
    assert "commands.sandbox: off" in error and "Nothing was run" in error
    assert not (tmp_path / "workspace" / "MARKER").exists()
    h = await servers({"allowed": "*"})  # auto falls back to Landlock
    assert (await h.ok("execute_command", command="touch MARKER", root="workspace"))["exit_code"] == 0


@pytest.mark.usefixtures("no_bwrap", "no_landlock")
async def test_no_sandbox_at_all_fails_closed(servers: CommandServers, tmp_path: Path) -> None:
    for mode in ("auto", "landlock"):
        h = await servers({"allowed": "*", "sandbox": mode})
        error = await h.err("shell", command="touch MARKER", root="workspace")
        assert error.startswith("commands are refused:") and "commands.sandbox: off" in error
        assert not (tmp_path / "workspace" / "MARKER").exists()
        lines, problems = describe_commands(h.app.config)
        assert problems and "OS confinement: UNAVAILABLE" in "\n".join(lines)
    h = await servers({"allowed": "*", "sandbox": "off"})  # the explicit opt-out
    assert (await h.ok("execute_command", command="touch MARKER", root="workspace"))["exit_code"] == 0
    assert "OS confinement: NONE (commands.sandbox: off)" in "\n".join(describe_commands(h.app.config)[0])


def test_startup_headline_names_the_sandbox(tmp_path: Path) -> None:
    def line(sandbox: str) -> str:
        cfg = tmp_path / f"{sandbox}.yaml"
        cfg.write_text(f"roots: [{{name: w, path: {tmp_path}}}]\ncommands: {{allowed: '*', sandbox: {sandbox}}}\n")
        return headline(load_config(str(cfg), env={}))

    assert line("landlock").startswith(f"commands sandbox: Landlock ABI {landlock.abi_version()} only")
    assert line("off").startswith("commands sandbox: OFF")
    if bwrap.probe().ok:
        assert line("auto").startswith("commands sandbox: bubblewrap")


def test_check_names_the_sandbox_and_abi(tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"roots: [{{name: w, path: {tmp_path}}}]\ncommands: {{allowed: '*', sandbox: landlock}}\n")
    text = "\n".join(describe_commands(load_config(str(cfg), env={}))[0])
    assert f"OS confinement: Landlock only (Landlock ABI {landlock.abi_version()}" in text
    assert "TCP denied" in text and "UDP" in text


# -- Landlock itself --------------------------------------------------------------------------------------------


def test_abi_ignores_a_stale_errno() -> None:
    """The PyPI package's bug: it read errno instead of the return value."""
    ctypes.set_errno(5)
    assert landlock.abi_version() == landlock.support().abi >= 1


def test_a_failed_ruleset_restricts_nothing_and_raises(tmp_path: Path) -> None:
    outcome: list[object] = []

    def body() -> None:
        try:
            landlock.restrict_thread([landlock.Rule(landlock.FS_WRITE, fd=987654)], network=False)
        except OSError as exc:
            outcome.append(exc)
        (tmp_path / "still-free").write_text("x")  # this thread was not restricted

    thread = threading.Thread(target=body)
    thread.start()
    thread.join()
    assert isinstance(outcome[0], OSError)
    assert (tmp_path / "still-free").exists()


async def test_other_threads_stay_unrestricted(servers: CommandServers, tmp_path: Path, outside: Path) -> None:
    h: Harness = await servers({"allowed": "*", "sandbox": "landlock"})
    await h.ok("execute_command", command="true")
    (outside / "server-can-still-write").write_text("yes")  # the spawner thread's restriction died with it
    assert (outside / "server-can-still-write").read_text() == "yes"


@AS_ROOT
def test_a_killed_servers_private_directories_are_swept_by_the_next(tmp_path: Path) -> None:
    """A server killed outright removes nothing: the private directory of the command it was running stays in the
    temp folder. The next server that runs a command there removes it, and nothing else: not a live server's, not
    another PID namespace's, not a link with such a name (nor what it leads to), not a name it did not make."""
    temp = tmp_path / "tmp"
    temp.mkdir()
    config = live.write_config(tmp_path, commands={"allowed": ["sleep", "true"], "sandbox": "landlock"})
    env = live.clean_env(TMPDIR=str(temp))
    with live.raw_stdio(["--config", str(config)], tmp_path / "first.log", env) as first:
        first.initialize()
        first.send(live.call("execute_command", {"command": "sleep 30"}, 1))
        assert live.wait_until(lambda: list(temp.iterdir()), 10), "the command made no private directory"
        left = list(temp.iterdir())
        os.kill(first.proc.pid, 9)
        first.proc.wait()
    assert all(p.exists() for p in left)
    namespace = os.stat("/proc/self/ns/pid").st_ino
    gone = _dead_pid()
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "keep.txt").write_text("not the sweeper's")
    kept = [temp / f"rootbound-cmd-{namespace}-{os.getpid()}-{'a' * 16}",  # a live server's
            temp / f"rootbound-cmd-{namespace + 1}-{gone}-{'b' * 16}",  # another PID namespace's
            temp / f"rootbound-cmd-{'c' * 16}",  # not a name a server made
            temp / "unrelated"]
    for path in kept:
        path.mkdir()
    link = temp / f"rootbound-cmd-{namespace}-{gone}-{'d' * 16}"
    link.symlink_to(victim)
    stale = temp / f"rootbound-cmd-{namespace}-{gone}-{'e' * 16}"
    (stale / ".home").mkdir(parents=True)
    (stale / "build.o").write_text("left by a killed command")
    with live.raw_stdio(["--config", str(config)], tmp_path / "second.log", env) as second:
        second.initialize()
        second.send(live.call("execute_command", {"command": "true"}, 1))
        assert "result" in second.answer(1)
        assert live.wait_until(lambda: not stale.exists() and not any(p.exists() for p in left), 10), \
            sorted(p.name for p in temp.iterdir())
    assert all(p.is_dir() for p in kept) and link.is_symlink() and (victim / "keep.txt").exists()


def _dead_pid() -> int:
    """The PID of a process that has ended (and been reaped)."""
    done = subprocess.Popen(["true"])
    done.wait()
    return done.pid
