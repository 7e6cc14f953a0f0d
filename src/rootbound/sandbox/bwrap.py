"""bubblewrap: the command line that builds one command's private view of the machine, and the probe.

The view: the system directories read-only; a fresh /dev, /proc (only the
sandbox's own processes) and /tmp (the private temp directory); each root bound
by its open handle (read-write or read-only), so a path swapped after the check
cannot redirect a bind; protected paths frozen on top (`protect.py`); new PID,
IPC, UTS and cgroup namespaces, and a network namespace unless
`commands.network`; a new session; all capabilities dropped when run as root; and
`--die-with-parent`, so nothing in it outlives the server, while the PID namespace
ends every process left behind (`setsid sleep 1000 &`) as soon as the command exits.

The environment is not put on bubblewrap's command line (`--setenv` would show the
agent's values to every user via /proc/PID/cmdline): bubblewrap is started with the
command's environment, already built from an allowlist, and passes it through.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass

from rootbound.sandbox.layout import Layout, is_under
from rootbound.sandbox.protect import Guards

__all__ = ["BWRAP", "HOME", "TMP", "Probe", "build", "launcher_argv", "launcher_paths", "probe"]

BWRAP = shutil.which("bwrap", path="/usr/bin:/bin:/usr/local/bin:/usr/sbin:/sbin")
TMP = "/tmp"
HOME = "/tmp/home"
_NEVER_BIND_CWD = ("/proc", "/dev", "/sys")


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
        flags += ["--cap-drop", "ALL"]
        if switch_user:  # kept for the launcher only, which becomes commands.run_as and then drops them
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
        argv = [BWRAP, *_namespace_flags(False, uid == 0), "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc",
                "--tmpfs", TMP, "--", "true"]
        # In `/` with a bare environment: the probe needs nothing of the server's (secrets included).
        env = {"PATH": "/usr/bin:/bin"}
        try:
            done = subprocess.run(argv, capture_output=True, timeout=10, cwd="/", env=env)
            version = subprocess.run([BWRAP, "--version"], capture_output=True, timeout=10, cwd="/", env=env).stdout
        except (OSError, subprocess.SubprocessError) as exc:
            result = Probe(False, f"bwrap cannot be started: {exc}")
        else:
            if done.returncode == 0:
                result = Probe(True, version.decode(errors="replace").strip() or "bwrap")
            else:
                why = done.stderr.decode(errors="replace").strip().splitlines()
                result = Probe(False, f"bwrap fails here: {why[-1] if why else f'exit {done.returncode}'}")
    _PROBES[uid] = result
    return result


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


def build(layout: Layout, guards: Guards, *, cwd_fd: int, cwd_path: str, network: bool,
          switch_user: bool) -> tuple[list[str], list[int]]:
    """(bubblewrap's arguments up to and including `--`, the descriptors it must inherit)."""
    argv = [*_namespace_flags(network, os.geteuid() == 0, switch_user)]
    pass_fds: list[int] = []
    _ro(layout.read_paths, argv)
    argv += ["--dev", "/dev", "--proc", "/proc", "--perms", "1777", "--tmpfs", TMP]
    visible = [*layout.read_paths, *(r.real_path for r in layout.roots)]
    needed: list[str] = []
    for path in launcher_paths():
        if not any(is_under(path, v) for v in (*visible, *needed)):
            needed.append(path)
    _ro(needed, argv)
    if not layout.cwd_in_root and cwd_path != "/" and not any(
            is_under(cwd_path, p) for p in (*layout.read_paths, *_NEVER_BIND_CWD)):
        argv += ["--ro-bind-fd", str(cwd_fd), cwd_path]
        pass_fds.append(cwd_fd)
    for path in layout.programs:  # a symlink is followed here: the program file itself appears at its path
        argv += ["--ro-bind", path, path]
    for root in layout.roots:
        argv += ["--bind-fd" if layout.is_writable(root) else "--ro-bind-fd", str(root.fd), root.real_path]
        pass_fds.append(root.fd)
    for path in layout.write_paths:
        argv += ["--bind", path, path]
    for path in sorted(guards.keep, key=lambda p: p.count("/")):
        argv += ["--bind", path, path]
    for path in sorted(guards.freeze, key=lambda p: p.count("/")):
        argv += ["--ro-bind", path, path]
    argv += ["--chdir", cwd_path, "--"]
    return argv, pass_fds
