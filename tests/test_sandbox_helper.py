"""The launcher inside bubblewrap, compiled (`exec_helper.c`) and in Python (`exec.py`, the fallback): both refuse
a bind that did not land where it was checked and a swapped working directory, and under bubblewrap the compiled
one is what runs, with Landlock, seccomp and no capabilities in force."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from rootbound.sandbox import bwrap, helper
from tests.test_commands_support import CommandServers

pytestmark = pytest.mark.anyio

NEEDS_BWRAP = pytest.mark.skipif(not bwrap.probe().ok, reason=f"bubblewrap unusable here: {bwrap.probe().detail}")


@pytest.fixture(params=["compiled", "python"])
def launcher(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    if request.param == "python":
        return bwrap.launcher_argv()
    data = helper.helper_bytes()
    assert data is not None, "the compiled launcher could not be built (CI has a C compiler)"
    path = tmp_path_factory.mktemp("helper") / "exec-helper"
    path.write_bytes(data)
    path.chmod(0o755)
    return [str(path)]


@pytest.mark.parametrize("case", ["not a mount point", "a symlink on the way", "another inode"])
def test_the_launcher_refuses_a_bind_that_did_not_land_at_its_path(tmp_path: Path, case: str,
                                                                  launcher: list[str]) -> None:
    real = tmp_path / "real"
    (real / "sub").mkdir(parents=True)
    (tmp_path / "link").symlink_to("real")
    st = os.stat(real / "sub")
    path = {"not a mount point": real / "sub", "a symlink on the way": tmp_path / "link" / "sub",
            "another inode": tmp_path}[case]
    marker = tmp_path / "MARKER"
    done = subprocess.run([*launcher, "--bound", f"rw:{st.st_dev}:{st.st_ino}:{path}", "--",
                           "/usr/bin/touch", "touch", str(marker)], capture_output=True, text=True)
    assert done.returncode == 126 and not marker.exists()
    assert "a root or a protected path changed while the sandbox was being built" in done.stderr
    assert str(tmp_path) not in done.stderr


def test_the_launcher_accepts_a_bind_that_landed(tmp_path: Path, launcher: list[str]) -> None:
    """A real mount point of the expected inode passes (`/proc` is one); read-only is required for `ro`."""
    st = os.stat("/proc")
    marker = tmp_path / "MARKER"
    done = subprocess.run([*launcher, "--bound", f"rw:{st.st_dev}:{st.st_ino}:/proc", "--", "/usr/bin/touch",
                           "touch", str(marker)], capture_output=True, text=True)
    assert done.returncode == 0 and marker.exists(), done.stderr
    marker.unlink()
    done = subprocess.run([*launcher, "--bound", f"ro:{st.st_dev}:{st.st_ino}:/proc", "--", "/usr/bin/touch",
                           "touch", str(marker)], capture_output=True, text=True)
    assert done.returncode == 126 and not marker.exists()


def test_the_launcher_refuses_a_swapped_working_directory(tmp_path: Path, launcher: list[str]) -> None:
    marker = tmp_path / "MARKER"
    done = subprocess.run([*launcher, "--cwd", "1:1", "--", "/usr/bin/touch", "touch", str(marker)],
                          cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode == 126 and "working directory changed" in done.stderr
    assert not marker.exists()
    st = os.stat(tmp_path)
    done = subprocess.run([*launcher, "--cwd", f"{st.st_dev}:{st.st_ino}", "--", "/usr/bin/touch", "touch",
                           str(marker)], cwd=tmp_path)
    assert done.returncode == 0 and marker.exists()


def test_the_launcher_applies_landlock_and_drops_capabilities(tmp_path: Path, launcher: list[str]) -> None:
    """Landlock denies writes outside the --write rules; the command has no capability; an unknown option stops
    the compiled launcher."""
    out = tmp_path / "out"
    out.mkdir()
    script = f"cat /proc/self/status; touch {out}/allowed; touch {tmp_path}/denied"
    done = subprocess.run([*launcher, "--abi", "7", "--net", "0", "--read", "/usr", "--read", "/proc",
                           "--write", str(out), "--", "/bin/sh", "sh", "-c", script], capture_output=True, text=True)
    assert (out / "allowed").exists() and not (tmp_path / "denied").exists()
    assert "Permission denied" in done.stderr
    status = dict(line.split(":\t", 1) for line in done.stdout.splitlines() if ":\t" in line)
    assert status["CapEff"].strip() == "0" * 16 and status["NoNewPrivs"].strip() == "1"
    if launcher == bwrap.launcher_argv():
        return  # (the Python launcher ignores options it does not know)
    bad = subprocess.run([*launcher, "--nonsense", "x", "--", "/usr/bin/touch", "touch", str(tmp_path / "bad")],
                         capture_output=True, text=True)
    assert bad.returncode == 126 and not (tmp_path / "bad").exists()


def test_a_missing_program_is_reported_with_127(launcher: list[str]) -> None:
    done = subprocess.run([*launcher, "--", "/nonexistent/prog", "prog"], capture_output=True, text=True)
    assert done.returncode == 127 and "prog: not found" in done.stderr


@NEEDS_BWRAP
@pytest.mark.parametrize("kind", ["compiled", "python"])
async def test_bubblewrap_runs_the_launcher_with_every_layer(servers: CommandServers, kind: str,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """Through the tool: the compiled launcher starts the command (or, without a compiler, the Python one), the
    seccomp filter is installed, Landlock holds inside (bubblewrap's own root would be writable without it), and
    no capability is left."""
    if kind == "python":  # as on a machine without a C compiler
        monkeypatch.setattr(helper, "helper_bytes", lambda: None)
    h = await servers({"allowed": "*", "sandbox": "bwrap"})
    got = await h.ok("shell", command=f"test -x {helper.PATH} && echo compiled || echo python; cat /proc/self/status; "
                                      "mkdir /planted 2>&1; true")
    out = got["stdout"]
    assert out.splitlines()[0] == kind
    status = dict(line.split(":\t", 1) for line in out.splitlines() if ":\t" in line)
    assert status["Seccomp"].strip() == "2" and status["NoNewPrivs"].strip() == "1"
    assert status["CapEff"].strip() == "0" * 16 and status["CapPrm"].strip() == "0" * 16
    planted = [line for line in out.splitlines() if "/planted" in line]
    assert planted and planted[0].endswith("Permission denied")  # Landlock's answer (the tmpfs is writable)


@pytest.mark.parametrize("kind", ["compiled", "thread"])
async def test_landlock_alone_runs_the_launcher_with_every_layer(servers: CommandServers, tmp_path: Path, kind: str,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """Under Landlock alone the compiled launcher, executed from its sealed in-memory copy, applies the resource
    limits, Landlock, seccomp and no capabilities, hands the command no descriptor of its own, and keeps the
    program's argv[0]; without it (no compiler) a restricted thread and `prlimit` do the same."""
    if kind == "thread":  # as on a machine without a C compiler
        monkeypatch.setattr(helper, "executable", lambda: None)
    outside = tmp_path / "outside"
    outside.mkdir()
    h = await servers({"allowed": "*", "sandbox": "landlock", "limits": {"open_files": 64}})
    script = ("grep -E '^(Seccomp|NoNewPrivs|CapEff|CapPrm|CapBnd|Max open files)' /proc/self/status "
              "/proc/self/limits; "
              "echo fds: $(ls /proc/self/fd); "
              f"touch {outside}/planted 2>&1; true")
    out = (await h.ok("shell", command=script, root="workspace"))["stdout"]
    seen = {}
    for line in out.splitlines():
        if line.startswith("/proc/self/status:"):
            key, value = line.removeprefix("/proc/self/status:").split(":", 1)
            seen[key] = value.strip()
        elif line.startswith("/proc/self/limits:"):
            seen["open files"] = line.split()[3]  # soft limit
    assert seen["Seccomp"] == "2" and seen["NoNewPrivs"] == "1", out
    assert seen["CapEff"] == seen["CapPrm"] == "0" * 16, out
    if kind == "compiled" and os.geteuid() == 0:  # (the launcher empties a root server's bounding set)
        assert seen["CapBnd"] == "0" * 16, out
    assert seen["open files"] == "64", out
    assert "fds: 0 1 2 3\n" in out  # stdin, stdout, stderr, and the listing's own (not python3: CI's may not run)
    assert "planted': Permission denied" in out and not (outside / "planted").exists()
    got = await h.ok("execute_command", command="sh -c 'echo $0'", root="workspace")
    if kind == "compiled":
        assert got["stdout"] == "sh\n"
    else:  # prlimit executes the absolute path
        assert got["stdout"].startswith("/") and got["stdout"].endswith("/sh\n")


@NEEDS_BWRAP
def test_bubblewraps_info_names_its_sandbox_init() -> None:
    """The server waits for a sandbox's init to be gone before its sweep, and reaps it: both need its PID, from
    bubblewrap's --info-fd (one JSON object over several lines: reading only the first line found none, so the
    sweep never waited)."""
    assert bwrap.BWRAP is not None
    info = os.pipe()
    try:
        done = subprocess.run([bwrap.BWRAP, "--info-fd", str(info[1]), "--unshare-pid", "--ro-bind", "/", "/",
                               "--proc", "/proc", "--", "sh", "-c", "echo $$; cat /proc/1/comm"], pass_fds=(info[1],),
                              capture_output=True, text=True, cwd="/")
    finally:
        os.close(info[1])
    pid = bwrap.init_pid(info[0])
    assert done.returncode == 0 and done.stdout.split() == ["2", "bwrap"], done
    assert isinstance(pid, int) and pid not in (done.args, 0)
    bwrap.reap_init(pid)
