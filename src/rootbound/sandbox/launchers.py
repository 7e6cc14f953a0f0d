"""The two sandboxes as `Launcher`s: Landlock alone, and bubblewrap with Landlock inside.

Both give a command the same layout (`layout.py`): read the system and the roots,
write the writable roots and a private temp directory, no capabilities, the
resource limits, and (when the server is root and `run_as` is set) another user.
What only bubblewrap adds: read-only protected paths and read-only roots nested in
writable ones (a mount namespace), private /tmp and /proc, a PID namespace that
ends leftover processes, a network namespace, and no metadata change (chmod, chown,
xattrs, timestamps) outside the writable areas (read-only mounts).
"""

from __future__ import annotations

import os
import secrets
import shutil
import tempfile
import threading
from dataclasses import replace
from functools import partial

from rootbound.config import Config
from rootbound.execution.launch import Launch
from rootbound.sandbox import bwrap, creds, landlock, limits, seccomp
from rootbound.sandbox.creds import RunAs
from rootbound.sandbox.layout import DEVICES, SYSTEM_PATHS, Layout, is_under, layout
from rootbound.sandbox.protect import Guards, guard_root, unenforced_rules
from rootbound.sandbox.spawn import spawn_restricted

__all__ = ["BwrapLauncher", "LandlockLauncher"]


def _user_line(user: RunAs | None) -> str:
    if user is not None:
        return f"  runs as: {user.name} (uid {user.uid}, gid {user.gid}), without capabilities"
    if os.geteuid() == 0:
        return ("  runs as: root WITHOUT capabilities (cannot chown, mknod, use raw sockets or override file "
                "permissions; files in the roots owned by other users are not writable: set commands.run_as)")
    return f"  runs as: the server's user (uid {os.geteuid()}), without capabilities"


class _Base:
    confined = True
    problem: str | None = None
    name = ""

    def __init__(self, config: Config, user: RunAs | None, level: landlock.Support) -> None:
        self.config = config
        self.user = user
        self.level = level

    @property
    def stays_root(self) -> bool:
        """Commands stay uid 0, owner of root's files: chmod needs no capability (seccomp limits it)."""
        return self.user is None and os.geteuid() == 0

    def _protected_lines(self, enforced: bool) -> list[str]:
        rules = self.config.protected_paths
        if not rules:
            return []
        if not enforced:
            return ["  protected paths: NOT read-only for commands under Landlock alone (Landlock can only grant "
                    "access, so it cannot carve them out of a writable root); install bubblewrap to enforce them"]
        lines = ["  protected paths: read-only for commands at the top of each writable root (mount namespace; "
                 "renaming a parent cannot undo it; missing ones are held by empty read-only placeholders while "
                 "a command runs); deeper copies (e.g. vendor/x/.git/config) are protected from file tools only"]
        skipped = unenforced_rules(rules)
        if skipped:
            lines.append(f"  not enforced for commands (** before the last component): {', '.join(skipped)}")
        return lines

    def _common_lines(self) -> list[str]:
        c = self.config.commands
        lines = [
            "  reads: system directories (/usr, /etc, ...), the roots, the working directory"
            + (f", {', '.join(c.read_paths)}" if c.read_paths else "")
            + "; not home directories, /root, /run or other users' files",
            "  writes: roots whose file tools include a writing tool, a private per-command TMPDIR"
            + (f", {', '.join(c.write_paths)}" if c.write_paths else "")
            + "; other roots are read-only for commands too",
            _user_line(self.user),
            *([] if c.allowed_cwd_roots else [
                "  note: commands.allowed_cwd_roots is unset, so a command may start in any directory, and can "
                "read the one it starts in: set it to the roots to keep commands (and their reads) inside them"]),
            f"  resource limits: {limits.describe(c.limits)}",
        ]
        readable = [os.path.realpath(p) for p in (*SYSTEM_PATHS, *c.read_paths)]
        entries = dict.fromkeys(p for p in os.environ.get("PATH", "").split(":") if p.startswith("/"))
        hidden = [p for p in entries if not any(is_under(os.path.realpath(p), r) for r in readable)]
        if hidden:
            lines.append(f"  note: PATH entries commands cannot use (not readable in the sandbox; add them to "
                         f"commands.read_paths if needed): {', '.join(hidden)}")
        return lines


def _sockets_filtered(config: Config) -> bool:
    return not config.commands.network and seccomp.supported()


def _home(env: dict[str, str], where: Layout, private: str) -> bool:
    """Point HOME at `private` unless the command can read the server's HOME; True when it did."""
    if where.home is not None:
        return False
    env["HOME"] = private
    return True


class LandlockLauncher(_Base):
    """Landlock (and no capabilities, limits, run_as) applied by a fresh thread that then spawns the command."""

    name = "landlock"

    def _network_line(self) -> str:
        if self.config.commands.network:
            return "  network: allowed (every kind of socket)"
        tcp = "TCP denied (Landlock)" if self.level.tcp else "TCP NOT restricted (Landlock ABI < 4)"
        if not _sockets_filtered(self.config):
            return f"  network: {tcp}; UDP and other non-TCP traffic NOT restricted (no seccomp filter for this CPU)"
        return (f"  network: {tcp}; every other socket refused (seccomp): UDP, ICMP, MPTCP, SCTP, raw, packet, "
                "vsock, netlink except NETLINK_ROUTE (read-only: interfaces and routes); TCP listen() and Fast "
                "Open refused too")

    def _metadata_line(self) -> str:
        if self.stays_root:
            return ("  metadata: chmod and extended-attribute writes (ACLs too) refused everywhere, in the roots too "
                    "(seccomp: a uid-0 command owns root's files), so chmod +x, tar x, cp -p, install -m, git config "
                    "and python3 -m venv fail: use commands.run_as or bubblewrap for chmod; "
                    "chown to another user refused (no CAP_CHOWN); NOT prevented outside the roots on files uid 0 "
                    "owns: timestamps (touch -d), chgrp to one of the server's groups, inode flags (chattr, except "
                    "immutable and append-only)")
        who = self.user.name if self.user is not None else f"the server's user (uid {os.geteuid()})"
        return (f"  metadata: files {who} owns can be chmod-ed, given ACLs or other extended attributes and new "
                "timestamps outside the roots too (Landlock does not cover these; bubblewrap's read-only mounts "
                "do); other users' files cannot (no capabilities)")

    def describe(self) -> list[str]:
        return [f"  OS confinement: Landlock only ({self.level.describe()})",
                *self._common_lines(),
                self._network_line(),
                "  UNIX sockets: " + ("cannot be created (seccomp; socketpair() works), so no pathname socket "
                                      "outside (docker, tmux, ssh-agent) is reachable"
                                      if _sockets_filtered(self.config) else "allowed"),
                self._metadata_line(),
                "  signals: " + ("commands cannot signal the server or other commands (Landlock scope)"
                                 if self.level.scopes else "NOT scoped (Landlock ABI < 6)"),
                *self._protected_lines(False),
                "  not covered by Landlock alone: read-only roots nested inside writable roots are writable; "
                "processes that leave the process group and scrub their environment can outlive the call; "
                "with the network allowed, pathname UNIX sockets (e.g. /run/docker.sock, if readable) can be "
                "connected to; "
                "/proc shows every process (their environments are protected by the missing capabilities only)"]

    def wrap(self, launch: Launch) -> Launch:
        c = self.config.commands
        where = layout(launch, c)
        base = _private_dir()
        try:
            home = os.path.join(base, ".home")
            os.mkdir(home, 0o700)
            if self.user is not None:
                for path in (base, home):
                    os.chown(path, self.user.uid, self.user.gid)
            env = dict(launch.env)
            env["TMPDIR"] = base
            _home(env, where, home)
            rules = [landlock.Rule(landlock.FS_READ, path=p) for p in (*where.read_paths, *where.programs)]
            rules += [landlock.Rule(landlock.FS_READ, path="/proc"), landlock.Rule(landlock.READ_DIR, path="/dev")]
            rules += [landlock.Rule(landlock.FS_DEVICE, path=p) for p in DEVICES]
            rules += [landlock.Rule(landlock.FS_READ, fd=r.fd) for r in where.readonly]
            rules += [landlock.Rule(landlock.FS_WRITE, fd=r.fd) for r in where.writable]
            rules += [landlock.Rule(landlock.FS_WRITE, path=p) for p in (*where.write_paths, base)]
            if not where.cwd_in_root and launch.cwd_path != "/":
                rules.append(landlock.Rule(landlock.FS_READ, fd=launch.cwd_fd))
            prefix = limits.prlimit_argv(c.limits)
            after = None if prefix else partial(limits.apply_to_pid, values=limits.pairs(c.limits))
            restrict = partial(_restrict, rules=rules, network=c.network, user=self.user, level=self.level,
                               metadata=self.stays_root)
        except BaseException:
            _remove(base)
            raise
        argv = [*prefix, launch.executable, *launch.argv[1:]] if prefix else list(launch.argv)
        return replace(launch, executable=prefix[0] if prefix else launch.executable, argv=argv, env=env,
                       spawn=partial(spawn_restricted, restrict=restrict, after_start=after),
                       cleanup=partial(_remove, base))


def _private_dir() -> str:
    """A new directory only this command may write (mode 0700), under the server's temp directory."""
    parent = tempfile.gettempdir()
    while True:
        path = os.path.join(parent, f"rootbound-cmd-{secrets.token_hex(8)}")
        try:
            os.mkdir(path, 0o700)
            return path
        except FileExistsError:
            continue


def _remove(base: str) -> None:
    """Remove a command's private directory: at once when it is empty (the usual case), else in the background
    (a big build tree must not hold up the answer)."""
    try:
        os.rmdir(os.path.join(base, ".home"))
        os.rmdir(base)
    except OSError:
        threading.Thread(target=shutil.rmtree, args=(base,), kwargs={"ignore_errors": True}, daemon=True).start()


def _restrict(*, rules: list[landlock.Rule], network: bool, user: RunAs | None, level: landlock.Support,
              metadata: bool) -> None:
    """Runs on the spawner thread: ruleset (opened as the server), capabilities, user, Landlock, seccomp
    (`metadata`: refuse chmod and xattr writes, for a command that stays uid 0)."""
    ruleset = landlock.build(rules, network=network, level=level)
    try:
        if creds.supported():
            if user is not None:
                creds.switch_user(user)
            creds.drop_capabilities()
    except BaseException:
        os.close(ruleset)
        raise
    landlock.enforce(ruleset)
    sockets = not network and seccomp.supported()
    if sockets or metadata:
        seccomp.restrict_thread(sockets=sockets, metadata=metadata)


class BwrapLauncher(_Base):
    """bubblewrap builds the view; the launcher inside applies Landlock and the limits, then executes."""

    name = "bubblewrap"

    def __init__(self, config: Config, user: RunAs | None, level: landlock.Support, version: str) -> None:
        super().__init__(config, user, level)
        self.version = version

    def describe(self) -> list[str]:
        inner = self.level.describe() if self.level.available else "no Landlock inside (unavailable)"
        return [f"  OS confinement: bubblewrap ({self.version}) + {inner} inside",
                *self._common_lines(),
                "  view: system directories read-only, private /tmp, /dev and /proc; everything else absent",
                "  network: " + ("shared with the host, and pathname UNIX sockets the command can see are reachable"
                                 if self.config.commands.network else
                                 "none (own network namespace: no TCP or UDP; besides, every socket Landlock cannot "
                                 "police is refused (seccomp), so UNIX sockets cannot be created and host sockets "
                                 "in a visible directory are unreachable too)"),
                "  metadata: unchangeable outside the writable areas (read-only mounts: no chmod, chown, xattrs or "
                "timestamps); chmod works in the writable roots"
                + (", except set-uid/set-gid bits (seccomp: a set-uid file made by a uid-0 command would give any "
                   "local user root)" if self.stays_root else ""),
                "  processes: own PID namespace (cannot see or signal the server; everything left behind is "
                "killed when the command exits); dies with the server",
                *self._protected_lines(True)]

    def wrap(self, launch: Launch) -> Launch:
        assert bwrap.BWRAP is not None
        c = self.config.commands
        where = layout(launch, c)
        guards = Guards()
        try:
            for root in where.writable:
                guard_root(root, self.config.protected_paths, guards)
            env = dict(launch.env)
            env["TMPDIR"] = bwrap.TMP
            private_home = _home(env, where, bwrap.HOME)
            argv, pass_fds = bwrap.build(where, guards, cwd_fd=launch.cwd_fd, cwd_path=launch.cwd_path,
                                         network=c.network, switch_user=self.user is not None)
            argv = [bwrap.BWRAP, *argv, *self._launcher(launch, where, private_home)]
        except BaseException:
            guards.release()
            raise
        return replace(launch, executable=bwrap.BWRAP, argv=argv, env=env,
                       popen_options={"pass_fds": tuple(pass_fds)}, cleanup=guards.release)

    def _launcher(self, launch: Launch, where: Layout, private_home: bool) -> list[str]:
        st = os.fstat(launch.cwd_fd)
        opts = ["--cwd", f"{st.st_dev}:{st.st_ino}"]
        for res, value in limits.pairs(self.config.commands.limits):
            opts += ["--limit", f"{res}:{value}"]
        if self.user is not None:
            opts += ["--user", f"{self.user.uid}:{self.user.gid}:{','.join(map(str, self.user.groups))}"]
        if private_home:
            opts += ["--mkdir", bwrap.HOME]
        kinds = [kind for kind, wanted in (("sockets", _sockets_filtered(self.config)), ("setid", self.stays_root))
                 if wanted]
        if kinds:
            opts += ["--seccomp", ",".join(kinds)]
        if self.level.available:
            opts += ["--abi", str(self.level.abi), "--net", "1" if self.config.commands.network else "0"]
            for path in (*where.read_paths, *where.programs, "/proc", *(r.real_path for r in where.readonly)):
                opts += ["--read", path]
            if not where.cwd_in_root and launch.cwd_path != "/":
                opts += ["--read", launch.cwd_path]
            for path in (*(r.real_path for r in where.writable), *where.write_paths, bwrap.TMP):
                opts += ["--write", path]
            for path in DEVICES:
                opts += ["--device", path]
            opts += ["--list", "/dev"]
        return [*bwrap.launcher_argv(), *opts, "--", launch.executable, *launch.argv]

