"""bubblewrap's sandbox for one command, started by a long-lived supervisor (`supervisor.py`) instead of a bubblewrap.

The same view as `bwrap.build` (the supervisor's bubblewrap is built by it, once per
view), and per command what bubblewrap would do: fresh /tmp, /proc and /dev/shm,
new PID, mount and IPC namespaces, the guards, the working directory checked by
inode, then the compiled launcher with the same options. What is not covered here
goes to a bubblewrap per command (`BwrapLauncher.wrap`): a `run_as` user, a working
directory outside the view (bubblewrap makes an empty one there), binds under /proc or
/dev, a request too large for one message, and a supervisor that cannot start. A server
that is not root is covered (`view`: its user is uid 0 in the sandbox, each command
maps it back).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable, Sequence

from rootbound.sandbox import bwrap, helper
from rootbound.sandbox.layout import Layout, is_under
from rootbound.sandbox.protect import Bind, Guards, close_binds, identity
from rootbound.sandbox.supervisor import Request, View

__all__ = ["after", "carried", "covered", "request", "view", "view_key"]

_KERNEL_FS = ("/proc", "/dev")  # file systems each command gets afresh: nothing of the view may lie there
_GONE_SECONDS = 2.0


def _places(where: Layout, areas: Sequence[Bind]) -> list[str]:
    """Every place the view binds something."""
    return [*where.read_paths, *where.write_paths, *where.programs, *(r.real_path for r in where.roots),
            *(a.path for a in areas)]


def covered(where: Layout, areas: Sequence[Bind], cwd_path: str) -> bool:
    """Can a supervisor run this command as a bubblewrap would?"""
    if not where.cwd_visible or any(is_under(cwd_path, k) for k in _KERNEL_FS):
        return False
    return not any(is_under(p, k) for p in _places(where, areas) for k in _KERNEL_FS)


def carried(where: Layout, areas: Sequence[Bind]) -> list[str]:
    """The binds under /tmp, outermost only (each is moved, with what is bound in it, into every fresh /tmp)."""
    under = sorted({p for p in _places(where, areas) if is_under(p, bwrap.TMP) and p != bwrap.TMP},
                   key=lambda p: p.count("/"))
    top: list[str] = []
    for path in under:
        if not any(is_under(path, t) for t in top):
            top.append(path)
    return top


def _identity(path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def view_key(where: Layout, areas: Sequence[Bind], *, network: bool, kinds: Sequence[str], abi: int,
             newnet: bool) -> tuple[object, ...]:
    """What the supervisor's sandbox depends on: the places it binds (first), then what is there (dev:ino). Another
    key, another supervisor: a root added or removed, replaced, or a path bound by name replaced."""
    places = (tuple((r.real_path, where.is_writable(r)) for r in where.roots), tuple(a.path for a in areas),
              where.read_paths, where.write_paths, where.programs, network, tuple(kinds), abi, newnet)
    return (places, tuple(identity(r.handle()) for r in where.roots), tuple(identity(a.fd) for a in areas),
            tuple(_identity(p) for p in (*where.read_paths, *where.write_paths, *where.programs)))


_UNSHARE = shutil.which("unshare", path="/usr/bin:/bin")
_ALL_IDS = "0 0 4294967295"


def identity_userns() -> int | None:
    """A descriptor of a new user namespace mapping every uid and gid to itself, or None (no `unshare` here).

    The supervisor runs in it: its capabilities (CAP_SYS_ADMIN to build each command's mounts) count in that
    namespace only, never as the host's, while users and groups stay what they are (chown to another user is
    refused for lack of CAP_CHOWN, as under a bubblewrap per command, not for an unmapped id). Made by a shell
    that util-linux's `unshare` put in it, whose maps this server (root) writes."""
    if _UNSHARE is None:
        return None
    try:
        holder = subprocess.Popen([_UNSHARE, "--user", "--", "/bin/sh", "-c", "echo; read x"], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, cwd="/",
                                  env={"PATH": "/usr/bin:/bin"})
    except OSError:
        return None
    assert holder.stdin is not None and holder.stdout is not None
    try:
        if holder.stdout.readline() != b"\n":  # (it runs inside the new namespace now)
            return None
        for name in ("uid_map", "gid_map"):
            with open(f"/proc/{holder.pid}/{name}", "w") as f:
                f.write(_ALL_IDS)
        return os.open(f"/proc/{holder.pid}/ns/user", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    finally:
        holder.stdin.close()
        holder.stdout.close()
        holder.wait()


def view(where: Layout, areas: Sequence[Bind], *, key: tuple[object, ...], network: bool, newnet: bool,
         supervisor: bytes, seccomp_program: bytes | None) -> View:
    """The supervisor's bubblewrap: the view of `bwrap.build` without a command's guards or working directory,
    in a user namespace of its own (a capability bug in it cannot reach the host's), the supervisor (the launcher
    compiled in) on its root, then `/` and /dev read-only."""
    staged: list[int] = []
    try:
        staged.append(helper.stage(supervisor))
        extra = ["--perms", "0555", "--file", str(staged[0]), helper.SUPERVISOR_PATH]
        filter_fd = -1
        if seccomp_program is not None:
            staged.append(helper.stage(seccomp_program))
            filter_fd = staged[-1]
        plan = bwrap.build(where, areas, Guards(), cwd_path="/", network=network, switch_user=False,
                           python_launcher=False, extra=extra)
        root = os.geteuid() == 0
        userns = identity_userns() if root else None
    except BaseException:
        for fd in staged:
            os.close(fd)
        raise
    if userns is not None:
        staged.append(userns)
        user = ["--userns", str(userns)]
    else:  # uid 0 alone mapped: chown to another user is then EINVAL, not EPERM
        user = ["--unshare-user", "--uid", "0", "--gid", "0"]
    caps = ["CAP_SYS_ADMIN", "CAP_SETPCAP"]
    options = ["--newnet"] if newnet else []
    if not root:
        # The server's user is uid 0 in the sandbox (mapped to itself, bubblewrap would nest a second user namespace
        # owning none of the mounts and the PID namespace: the supervisor could mount no /proc or devpts and send no
        # command's PID); each command maps it back in a user namespace of its own, which needs CAP_SETFCAP (it maps
        # the parent's uid 0), dropped right after. Plus the launcher's one capability, which build() gives a root
        # server's sandbox only (supervisor.c command()).
        caps += ["CAP_DAC_READ_SEARCH", "CAP_SETFCAP"]
        options += ["--user", f"{os.geteuid()}:{os.getegid()}"]
    # (the capabilities after build's --cap-drop ALL, which would undo them)
    argv = [*user, *plan.argv[:-1], *(arg for cap in caps for arg in ("--cap-add", cap)),
            "--remount-ro", "/dev", "--remount-ro", "/"]
    for path in carried(where, areas):
        options += ["--carry", path]
    return View(key, argv, plan.pass_fds, staged, options, filter_fd)


def request(cwd_fd: int, cwd_path: str, guards: Guards, env: dict[str, str], args: Sequence[str]) -> Request:
    """One command for the supervisor: its working directory and guards by path and inode (each looked up again in
    the command's own mount namespace, never followed through a link, and checked to be the inode the server
    checked), its environment, and the launcher's options."""
    st = os.fstat(cwd_fd)
    items = []
    for bind in sorted(guards.binds.values(), key=lambda b: b.path.count("/")):  # parents first
        dev, ino = identity(bind.fd)
        items.append(f"{'rw' if bind.writable else 'ro'}:{dev}:{ino}:{bind.path}")
    return Request(f"{st.st_dev}:{st.st_ino}:{cwd_path}", items, [f"{k}={v}" for k, v in env.items()], args)


def after(guards: Guards, areas: Sequence[Bind], state: dict[str, object]) -> list[str]:
    """Once the command has ended: release the descriptors, and remove what it created where protected paths were
    missing, once nothing of it can write any more (its namespace init is gone: so is every process of it)."""
    close_binds(areas)
    pidfd = state.pop("pidfd", None)
    try:
        if isinstance(pidfd, int):
            if guards.missing:
                bwrap.wait_exit(pidfd, _GONE_SECONDS)  # (at once: the runner saw its end)
            os.close(pidfd)
        inner = state.pop("cleanup", None)  # a bubblewrap took over (no supervisor): its own clean-up
        if callable(inner):
            return list(_call(inner))
        return guards.sweep()
    finally:
        guards.close()


def _call(inner: Callable[[], Sequence[str] | None]) -> Sequence[str]:
    return inner() or ()
