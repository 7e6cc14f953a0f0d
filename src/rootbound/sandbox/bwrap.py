"""bubblewrap: the command line that builds one command's private view of the machine, and the probe.

The view: the system directories read-only; a fresh /dev, /proc (only the
sandbox's own processes) and /tmp (the private temp directory); each root, work
area and guard (`protect.py`) bound by an open descriptor, so no source path is
resolved again after the check (the launcher inside checks that each landed at its
destination: `exec.py`); a working directory outside all of that is an empty
directory; new PID, IPC, UTS and cgroup namespaces, and a network namespace unless
`commands.network`; a new session; all capabilities dropped when run as root; and
`--die-with-parent`, so nothing in it outlives the server, while the PID namespace
ends every process left behind (`setsid sleep 1000 &`) as soon as the command exits.

The environment is not put on bubblewrap's command line (`--setenv` would show the
agent's values to every user via /proc/PID/cmdline): bubblewrap is started with the
command's environment, already built from an allowlist, and passes it through.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import shutil
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass

from rootbound.sandbox.layout import Layout, is_under
from rootbound.sandbox.protect import Bind, Guards

__all__ = ["BWRAP", "HOME", "TMP", "Plan", "Probe", "build", "launcher_argv", "launcher_paths", "probe"]

BWRAP = shutil.which("bwrap", path="/usr/bin:/bin:/usr/local/bin:/usr/sbin:/sbin")
TMP = "/tmp"
HOME = "/tmp/home"
_NO_DIR = ("/proc", "/dev")  # kernel file systems: a working directory there is entered as it is


@dataclass(frozen=True)
class Probe:
    ok: bool
    detail: str  # the version, or why it does not work


_PROBES: dict[int, Probe] = {}


def _namespace_flags(network: bool, as_root: bool, switch_user: bool = False) -> list[str]:
    flags = ["--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try", "--die-with-parent",
             "--new-session"]
    if not network:
        flags.append("--unshare-net")
    if as_root:
        # Kept for the launcher only, which drops every capability before it executes the command:
        # DAC_READ_SEARCH to check each bind whatever the permissions on the way, SETUID/SETGID to become run_as.
        flags += ["--cap-drop", "ALL", "--cap-add", "CAP_DAC_READ_SEARCH"]
        if switch_user:
            flags += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
    return flags


def probe() -> Probe:
    """Does bubblewrap work here, as this server's user? (Cached; a few milliseconds, once.)"""
    uid = os.geteuid()
    if uid in _PROBES:
        return _PROBES[uid]
    if BWRAP is None:
        result = Probe(False, "bwrap is not installed")
    else:
        info = os.pipe()  # (bubblewrap names its sandbox's init there: reaped below)
        argv = [BWRAP, "--info-fd", str(info[1]), *_namespace_flags(False, uid == 0), "--ro-bind", "/", "/", "--dev",
                "/dev", "--proc", "/proc", "--tmpfs", TMP, "--", "true"]
        # In `/` with a bare environment: the probe needs nothing of the server's (secrets included).
        env = {"PATH": "/usr/bin:/bin"}
        try:
            done = subprocess.run(argv, capture_output=True, timeout=10, cwd="/", env=env, pass_fds=(info[1],))
            version = subprocess.run([BWRAP, "--version"], capture_output=True, timeout=10, cwd="/", env=env).stdout
        except (OSError, subprocess.SubprocessError) as exc:
            result = Probe(False, f"bwrap cannot be started: {exc}")
        else:
            if done.returncode == 0:
                result = Probe(True, version.decode(errors="replace").strip() or "bwrap")
            else:
                why = done.stderr.decode(errors="replace").strip().splitlines()
                result = Probe(False, f"bwrap fails here: {why[-1] if why else f'exit {done.returncode}'}")
        finally:
            os.close(info[1])
            reap_init(init_pid(info[0]))
    _PROBES[uid] = result
    return result


def init_pid(info_fd: int) -> int | None:
    """The PID of the sandbox's init, from bubblewrap's --info-fd (the read end, closed here); None when bubblewrap
    started none. Call it once bubblewrap has ended (or written its info)."""
    try:
        os.set_blocking(info_fd, False)
        # (one JSON object, spread over several lines)
        pid = json.JSONDecoder().raw_decode(os.read(info_fd, 4096).decode())[0].get("child-pid")
    except (OSError, ValueError, AttributeError):
        pid = None
    finally:
        os.close(info_fd)
    return pid if isinstance(pid, int) and pid > 0 else None


def wait_exit(pidfd: int, seconds: float) -> None:
    """Wait (at most `seconds`) until the process `pidfd` names has ended: then every other process of a PID
    namespace it was the init of has ended too. (poll: a select() cannot take a descriptor numbered 1024 or
    more.)"""
    waiting = select.poll()
    waiting.register(pidfd, select.POLLIN)
    waiting.poll(seconds * 1000)


def _pidfd(pid: int) -> int | None:
    """A descriptor that pins process `pid`; None when it is gone."""
    try:
        return os.pidfd_open(pid)
    except OSError:
        return None


def wait_init_gone(pid: int, seconds: float = 2.0) -> None:
    """Wait until the sandbox's init has ended. At once after a normal exit (bubblewrap waited for it); a few ms
    after a timeout killed bubblewrap."""
    fd = _pidfd(pid)
    if fd is not None:
        try:
            wait_exit(fd, seconds)
        finally:
            os.close(fd)


def reap_init(pid: int | None, seconds: float = 1.0) -> None:
    """Reap the sandbox's init of a bubblewrap that has ended. bubblewrap learns its exit status through a pipe
    and may exit without reaping it: the init is then re-parented to this server (a child subreaper, for commands'
    daemons) and would stay a zombie until a command's stray round, if any, reaps it."""
    fd = None if pid is None else _pidfd(pid)
    if fd is None:
        return
    try:
        with open(f"/proc/{pid}/comm", "rb") as f:  # (the descriptor pins the process: no PID reuse from here)
            if f.read().strip() != b"bwrap":
                return
        wait_exit(fd, seconds)
        with contextlib.suppress(ChildProcessError):  # (not ours: bubblewrap reaps it)
            os.waitid(os.P_PIDFD, fd, os.WEXITED | os.WNOHANG)
    except OSError:
        return  # gone meanwhile
    finally:
        os.close(fd)


_BOOT = "import sys;sys.path.insert(0,{path!r});from rootbound.sandbox.exec import main;main()"


def launcher_argv() -> list[str]:
    """The launcher (`exec.py`): this interpreter, isolated (-I: no environment, no user site; -S: no site)."""
    return [os.path.realpath(sys.executable), "-I", "-S", "-c", _BOOT.format(path=launcher_paths()[0])]


def launcher_paths() -> list[str]:
    """What the in-sandbox launcher needs to be readable: the interpreter's installation and this package."""
    import rootbound

    package_parent = os.path.dirname(os.path.dirname(os.path.realpath(rootbound.__file__)))
    return [package_parent, os.path.realpath(sys.base_prefix), os.path.dirname(os.path.realpath(sys.executable))]


def _ro(paths: Sequence[str], out: list[str]) -> None:
    for path in paths:
        if os.path.islink(path):
            out += ["--symlink", os.readlink(path), path]
        else:
            out += ["--ro-bind", path, path]


def _binds(binds: Sequence[Bind], out: list[str]) -> None:
    for bind in binds:
        out += ["--bind-fd" if bind.writable else "--ro-bind-fd", str(bind.fd), bind.path]


@dataclass(frozen=True)
class Plan:
    argv: list[str]  # bubblewrap's arguments up to and including `--`
    pass_fds: list[int]  # the descriptors it must inherit
    checks: list[str]  # for the launcher's --bound: MODE:DEV:INO:PATH of every bind made by descriptor


# The kernel's knobs in /proc, read-only. bubblewrap covers these itself only when access(W_OK) succeeds for it,
# which it does not as root once the capabilities are dropped (the directories are 0555): the command, uid 0 on the
# host, could then write any sysctl (a write needs the file's mode only: kernel.core_pattern "|/a/root/file" runs
# that file as root on the next crash), crash or reboot the host through sysrq-trigger, or set IRQ affinities.
# Landlock's read-only /proc stops it too, but bubblewrap may run without Landlock. (The source is the host's /proc:
# sysctls are global, and a network one reads the namespace of the process that opens it.)
_PROC_COVERS = [arg for path in ("/proc/sys", "/proc/sysrq-trigger", "/proc/irq", "/proc/bus")
                for arg in ("--ro-bind-try", path, path)]


def build(layout: Layout, work_areas: Sequence[Bind], guards: Guards, *, cwd_path: str, network: bool,
          switch_user: bool, python_launcher: bool = True, extra: Sequence[str] = ()) -> Plan:
    """The view, in mount order: system directories, private /dev /proc /tmp, the directories leading to what
    is bound next (0755, so a `run_as` user can pass), read_paths inside /tmp, work areas, the launcher and
    programs, roots (parents first), write_paths, guards (parents first), `extra` (the compiled launcher, its
    seccomp filter), and the working directory: an empty one unless it is visible. The Python launcher's
    interpreter and package are bound only when it is used (`python_launcher`)."""
    argv = [*_namespace_flags(network, os.geteuid() == 0, switch_user)]
    inside_private = [p for p in layout.read_paths if any(is_under(p, d) for d in (TMP, *_NO_DIR))]
    _ro([p for p in layout.read_paths if p not in inside_private], argv)
    argv += ["--dev", "/dev", "--proc", "/proc", *_PROC_COVERS, "--perms", "1777", "--tmpfs", TMP]
    roots = [Bind(r.handle(), r.real_path, layout.is_writable(r)) for r in layout.roots]
    visible = [*layout.read_paths, *(r.real_path for r in layout.roots), *layout.work_areas, *layout.write_paths,
               "/dev", "/proc"]
    needed: list[str] = []
    for path in launcher_paths() if python_launcher else ():
        if not any(is_under(path, v) for v in (*visible, *needed)):
            needed.append(path)
    dests = (*inside_private, *needed, *layout.programs, *(b.path for b in (*roots, *work_areas)), *layout.write_paths)
    for path in dict.fromkeys(os.path.dirname(p) for p in dests):
        if path not in ("/", TMP) and not any(is_under(path, v) for v in visible):
            argv += ["--perms", "0755", "--dir", path]
    _ro(inside_private, argv)  # (bound before the private /tmp, it would be hidden by it)
    _binds(work_areas, argv)  # (never inside a root: a root keeps its own mode over a work area holding it)
    _ro(needed, argv)
    for path in layout.programs:  # a symlink is followed here: the program file itself appears at its path
        argv += ["--ro-bind", path, path]
    _binds(roots, argv)
    for path in layout.write_paths:
        argv += ["--bind", path, path]
    guarded = sorted(guards.binds.values(), key=lambda b: b.path.count("/"))
    _binds(guarded, argv)
    by_fd = [*work_areas, *roots, *guarded]
    if not layout.cwd_visible and cwd_path != "/" and not any(is_under(cwd_path, p) for p in _NO_DIR):
        argv += ["--perms", "0755", "--dir", cwd_path]  # entered, but empty: choosing it widens nothing
    argv += [*extra, "--chdir", cwd_path, "--"]
    checks = []
    for bind in by_fd:
        st = os.fstat(bind.fd)
        checks.append(f"{'rw' if bind.writable else 'ro'}:{st.st_dev}:{st.st_ino}:{bind.path}")
    return Plan(argv, [b.fd for b in by_fd], checks)
