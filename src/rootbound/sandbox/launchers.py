"""The two sandboxes as `Launcher`s: Landlock alone, and bubblewrap with Landlock inside.

Both give a command the same layout (`layout.py`): read the system, the roots and
the work areas, write the writable roots, the work areas and a private temp
directory, no capabilities, the resource limits, and (when the server is root and
`run_as` is set) another user. What only bubblewrap adds: git's redirection points
and protected paths read-only (`protect.py`), read-only roots nested in writable
ones (a mount namespace), private /tmp and /proc, a PID namespace that
ends leftover processes, a network namespace, and no metadata change (chmod, chown,
xattrs, timestamps) outside the writable areas (read-only mounts).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import replace
from functools import partial

import anyio

from rootbound.config import Config
from rootbound.execution.launch import Child, Launch, PopenChild, popen
from rootbound.logs import log
from rootbound.sandbox import bwrap, creds, helper, janitor, landlock, limits, nofollow, seccomp, supervised, supervisor
from rootbound.sandbox.creds import RunAs
from rootbound.sandbox.layout import DEVICES, SYSTEM_PATHS, Layout, is_under, layout, work_areas
from rootbound.sandbox.protect import GIT_ENTRIES, Bind, Guards, close_binds, guard_root, identity, unenforced_rules
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

    def close(self) -> None:
        pass

    @property
    def stays_root(self) -> bool:
        """Commands stay uid 0, owner of root's files: chmod needs no capability (seccomp limits it)."""
        return self.user is None and os.geteuid() == 0

    def _launcher_process(self) -> list[str]:
        """The compiled launcher's options for the process it becomes: its resource limits and user."""
        opts: list[str] = []
        for res, value in limits.pairs(self.config.commands.limits):
            opts += ["--limit", f"{res}:{value}"]
        if self.user is not None:
            opts += ["--user", f"{self.user.uid}:{self.user.gid}:{','.join(map(str, self.user.groups))}"]
        return opts

    def _launcher_landlock(self) -> list[str]:
        """The compiled launcher's options that open its Landlock ruleset: the ABI and whether TCP is allowed."""
        return ["--abi", str(self.level.abi), "--net", "1" if self.config.commands.network else "0"]

    def _protected_lines(self, enforced: bool) -> list[str]:
        helps = ("what helps: commands.run_as (git's safe.directory ownership check then refuses repositories a "
                 "command created) and `git config --global safe.bareRepository explicit`")
        if not enforced:
            return ["  git's configuration and protected paths: NOT read-only for commands under Landlock alone "
                    "(Landlock can only grant access, so it cannot carve them out of a writable root): a command can "
                    "change .git/config, .git/hooks or .bashrc, or create a repository, and the user's next git "
                    f"command runs what it wrote; install bubblewrap to freeze them; {helps}"]
        lines = ["  git's redirection points: frozen for commands at the top of each writable root, whatever "
                 "protected_paths says: the .git entry (a directory cannot be renamed or replaced, a .git file is "
                 f"read-only) and, in it, {', '.join(GIT_ENTRIES)} (read-only); a .git a command creates where there "
                 "was none, and any of these it creates where missing, are removed when it ends (and reported)",
                 "  protected paths: read-only for commands at the top of each writable root (mount namespace; "
                 "renaming a parent cannot undo it); a missing one is not held by anything visible: what a command "
                 "creates there is removed when it ends (and reported); a symbolic link at a guarded place (e.g. "
                 ".git -> elsewhere) refuses every command until it is replaced",
                 "  NOT frozen for commands: repositories below the top of a root (vendor/x/.git), or created there by "
                 "a command, repositories in work areas, and deeper copies of protected paths (the file tools protect "
                 "those): git run there by "
                 f"the user runs what a command wrote; {helps}"]
        skipped = unenforced_rules(self.config.protected_paths)
        if skipped:
            lines.append(f"  not enforced for commands (** before the last component): {', '.join(skipped)}")
        return lines

    def _cwd_lines(self) -> list[str]:
        c = self.config.commands
        roots = [os.path.realpath(r.path) for r in self.config.roots]
        areas = work_areas(c.allowed_cwd_roots, roots)
        lines = ["  working directory: " + ("any existing directory (commands.allowed_cwd_roots is unset)"
                                            if not c.allowed_cwd_roots else "under commands.allowed_cwd_roots")
                 + "; one outside the roots, work areas and read_paths is entered but shows nothing (" +
                 ("no access to it under Landlock" if self.name == "landlock" else "an empty directory in its place")
                 + "): choosing where a command starts never widens what it can read or write"]
        if areas:
            lines.append(f"  work areas (allowed_cwd_roots outside the roots; readable and writable for commands): "
                         f"{', '.join(areas)}")
        others = [e for e in c.allowed_cwd_roots if os.path.normpath(os.path.expanduser(e)) not in areas]
        if others:
            lines.append(f"  allowed_cwd_roots that are not work areas (inside a root, whose mode applies; `/`; or "
                         f"named through a symbolic link: list the real path): {', '.join(others)}")
        return lines

    def _common_lines(self) -> list[str]:
        c = self.config.commands
        lines = [
            "  reads: system directories (/usr, /etc, ...), the roots, the work areas"
            + (f", {', '.join(c.read_paths)}" if c.read_paths else "")
            + "; not home directories, /root, /run or other users' files",
            "  writes: roots whose file tools include a writing tool, the work areas, a private per-command TMPDIR"
            + (f", {', '.join(c.write_paths)}" if c.write_paths else "")
            + "; other roots are read-only for commands too",
            *self._cwd_lines(),
            _user_line(self.user),
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

    def __init__(self, config: Config, user: RunAs | None, level: landlock.Support) -> None:
        super().__init__(config, user, level)
        helper.prepare()  # the launcher that sets the resource limits, built in the background

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
                "  not covered by Landlock alone: read-only roots nested inside writable roots or work areas are "
                "writable; "
                "processes that leave the process group and scrub their environment can outlive the call; "
                "with the network allowed, pathname UNIX sockets (e.g. /run/docker.sock, if readable) can be "
                "connected to; "
                "/proc shows every process (their environments are protected by the missing capabilities only)"]

    def wrap(self, launch: Launch) -> Launch:
        c = self.config.commands
        where = layout(launch, c)
        base = _private_dir()
        areas: list[Bind] = []
        try:
            env = dict(launch.env)
            env["TMPDIR"] = base
            home = os.path.join(base, ".home")
            made = [base, home] if _home(env, where, home) else [base]  # (a HOME of its own only when needed)
            if len(made) > 1:
                os.mkdir(home, 0o700)
            if self.user is not None:
                for path in made:
                    os.chown(path, self.user.uid, self.user.gid)
            rules = [landlock.Rule(landlock.FS_READ, path=p) for p in (*where.read_paths, *where.programs)]
            rules += [landlock.Rule(landlock.FS_READ, path="/proc"), landlock.Rule(landlock.READ_DIR, path="/dev")]
            rules += [landlock.Rule(landlock.FS_DEVICE, path=p) for p in DEVICES]
            rules += [landlock.Rule(landlock.FS_READ, fd=r.handle()) for r in where.readonly]
            rules += [landlock.Rule(landlock.FS_WRITE, fd=r.handle()) for r in where.writable]
            rules += [landlock.Rule(landlock.FS_WRITE, path=p) for p in (*where.write_paths, base)]
            areas = _open_areas(where.work_areas)
            rules += [landlock.Rule(landlock.FS_WRITE, fd=a.fd) for a in areas]
            # (No rule for a working directory outside all of this: the command starts there and sees nothing.)
            exe = helper.executable()
            held: list[int] = []
            if exe is not None:
                confined, held = self._launched(launch, rules, exe)
            else:
                confined = self._threaded(launch, rules)
        except BaseException:
            close_binds(areas)
            _remove(base)
            raise
        return replace(confined, env=env, cleanup=partial(_after_landlock, base, areas, held))

    def _launched(self, launch: Launch, rules: list[landlock.Rule], exe: int) -> tuple[Launch, list[int]]:
        """Through the compiled launcher, executed from a sealed in-memory copy (`helper.executable`) on the
        loop's own thread: it sets the resource limits (per process: a thread cannot take them), builds the
        Landlock ruleset (the rules for roots and work areas on the handles held here, passed to it, never
        reopened by path), switches user, drops every capability, enforces the ruleset and the seccomp filter,
        and executes the command (argv[0] kept). No thread of the server is restricted, so none has to be started
        per command (under load that hand-off cost milliseconds), and the rules are built in C (a third of a
        millisecond of the loop's time in Python). Also returns the descriptors to close once the command has
        ended (the filter's pipe)."""
        if not self.level.available:  # (never chosen then: the launcher would run the command without Landlock)
            raise landlock.LandlockError(errno.EOPNOTSUPP, "Landlock is not available on this kernel")
        options = self._launcher_landlock()
        handles: list[int] = []
        for rule in rules:
            kind = _RULE_KINDS[rule.access]
            if rule.fd is None:
                assert rule.path is not None
                options += [f"--{kind}", rule.path]
            else:
                options += [f"--{kind}-fd", str(rule.fd)]
                handles.append(rule.fd)
        options += self._launcher_process()
        held: list[int] = []
        if seccomp.supported():  # always: io_uring, leases and keyrings are refused whatever else is
            held.append(helper.stage(seccomp.program(sockets=_sockets_filtered(self.config),
                                                     metadata=self.stays_root)))
            options += ["--filter", str(held[-1])]
        path = f"/proc/self/fd/{exe}"
        return replace(launch, executable=path, argv=[path, *options, "--", launch.executable, *launch.argv],
                       popen_options={"pass_fds": (exe, *handles, *held)}), held

    def _threaded(self, launch: Launch, rules: list[landlock.Rule]) -> Launch:
        """Without the compiled launcher: a fresh thread restricts itself and starts the command (`spawn.py`),
        through util-linux's `prlimit` for the resource limits (about 3 ms more), or, without it, with the limits
        set right after the start (best effort)."""
        c = self.config.commands
        restrict = partial(_restrict, rules=rules, network=c.network, user=self.user, level=self.level,
                           metadata=self.stays_root)
        prefix = limits.prlimit_argv(c.limits)
        after = None if prefix else partial(limits.apply_to_pid, values=limits.pairs(c.limits))
        argv = [*prefix, launch.executable, *launch.argv[1:]] if prefix else list(launch.argv)
        return replace(launch, executable=prefix[0] if prefix else launch.executable, argv=argv,
                       spawn=partial(spawn_restricted, restrict=restrict, after_start=after))


# The launcher's option for each kind of rule `wrap` makes (by path; "-fd" appended for a handle).
_RULE_KINDS = {landlock.FS_READ: "read", landlock.FS_WRITE: "write", landlock.FS_DEVICE: "device",
               landlock.READ_DIR: "list"}


def _open_areas(paths: Sequence[str]) -> list[Bind]:
    """The work areas, each opened without following a symlink (the descriptor is what gets granted or bound)."""
    areas: list[Bind] = []
    for path in paths:
        try:
            parent, fd = nofollow.open_path(path)
        except OSError:
            close_binds(areas)
            raise OSError(errno.ESTALE, "a commands.allowed_cwd_roots work area was replaced or removed "
                                        "meanwhile") from None
        os.close(parent)
        areas.append(Bind(fd, path, writable=True))
    return areas


def _after_landlock(base: str, areas: list[Bind], held: Sequence[int] = ()) -> list[str]:
    close_binds(areas)
    for fd in held:
        with contextlib.suppress(OSError):
            os.close(fd)
    _remove(base)
    return []


def _private_dir() -> str:
    """A new directory only this command may write (mode 0700), under the server's temp directory (where the first
    one also has the directories of killed servers swept: `janitor.sweep_stale`)."""
    parent = tempfile.gettempdir()
    janitor.sweep_stale(parent)
    while True:
        path = os.path.join(parent, janitor.private_name())
        try:
            os.mkdir(path, 0o700)
            return path
        except FileExistsError:
            continue


def _remove(base: str) -> None:
    """Remove a command's private directory, after the answer (`janitor`)."""
    janitor.remove_later(base)


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
    if seccomp.supported():  # always: io_uring, leases and keyrings are refused whatever else is
        seccomp.restrict_thread(sockets=not network, metadata=metadata)


class BwrapLauncher(_Base):
    """bubblewrap builds the view; the launcher inside applies Landlock and the limits, then executes."""

    name = "bubblewrap"

    def __init__(self, config: Config, user: RunAs | None, level: landlock.Support, version: str) -> None:
        super().__init__(config, user, level)
        self.version = version
        self.supervisors = supervisor.Pool()
        helper.prepare(supervisor=True)

    def close(self) -> None:
        """Stop the command supervisors (and every command still in them)."""
        self.supervisors.close()

    def starts(self) -> str:
        """How commands are started, for `rootbound check` and the startup log."""
        why = self._unsupervised_reason()
        if why is None:
            own = "PID, mount, IPC" + (" and network" if self._newnet() else "")
            shared = ("; the network namespace, empty, is shared by a supervisor's commands (Landlock and seccomp "
                      "leave them no socket to reach each other)"
                      if not self.config.commands.network and not self._newnet() else "")
            return ("by a command supervisor: one long-lived bubblewrap sandbox per view (roots, paths, network), "
                    f"each command in new {own} namespaces, with its own /tmp, /proc, /dev/shm and /dev/pts{shared}; "
                    "were it unable to start, a bubblewrap per command (logged, and shown here)")
        return f"a bubblewrap per command ({why})"

    def _unsupervised_reason(self) -> str | None:
        if self.supervisors.problem is not None:
            return f"the command supervisor could not start: {self.supervisors.problem}"
        if self.user is not None:
            return "commands.run_as is set, which the command supervisor does not do"
        if helper.helper_bytes() is None or helper.supervisor_bytes() is None:
            return "no C compiler to build the launcher and the command supervisor"
        return None

    def _newnet(self) -> bool:
        """A network namespace per command? Without the network, commands of one supervisor share its empty one,
        where they could still talk to each other over loopback, unless nothing can: Landlock refuses TCP bind and
        connect (ABI >= 4) and the seccomp filter every other socket. Otherwise each gets its own (+0.8 ms)."""
        return not self.config.commands.network and not (self.level.tcp and "sockets" in self._seccomp_kinds())

    def describe(self) -> list[str]:
        inner = self.level.describe() if self.level.available else "no Landlock inside (unavailable)"
        return [f"  OS confinement: bubblewrap ({self.version}) + {inner} inside",
                f"  commands start: {self.starts()}",
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
        if self._unsupervised_reason() is None:
            wrapped = self._supervised(launch)
            if wrapped is not None:
                return wrapped
        return self._one_bwrap(launch)

    def _supervised(self, launch: Launch) -> Launch | None:
        """`launch` for the view's command supervisor (`supervised.py`); None when it cannot run it."""
        c = self.config.commands
        where = layout(launch, c)
        built = helper.supervisor_bytes()
        if built is None:
            return None
        guards = Guards()
        areas: list[Bind] = []
        try:
            areas = _open_areas(where.work_areas)
            if not supervised.covered(where, areas, launch.cwd_path):
                raise supervisor.Unavailable("not covered")
            self._guard(where, guards)
            env, private_home = _sandbox_env(launch, where)
            args = self._launcher(launch, where, private_home, [], True)[1:]
            request = supervised.request(launch.cwd_fd, launch.cwd_path, guards, env, args)
            kinds = self._seccomp_kinds()
            newnet = self._newnet()
            key = supervised.view_key(where, areas, network=c.network, kinds=kinds, abi=self.level.abi, newnet=newnet)
        except BaseException as exc:
            close_binds(areas)
            guards.close()
            if isinstance(exc, supervisor.Unavailable):
                return None
            raise
        program = (seccomp.program(sockets="sockets" in kinds, metadata=False, setid="setid" in kinds)
                   if kinds else None)
        make_view = partial(supervised.view, where, areas, key=key, network=c.network, newnet=newnet,
                            supervisor=built, seccomp_program=program)
        state: dict[str, object] = {}
        return replace(launch, spawn=partial(self._spawn_supervised, key=key, make_view=make_view, request=request,
                                             state=state, original=launch),
                       cleanup=partial(supervised.after, guards, areas, state))

    async def _spawn_supervised(self, launch: Launch, *, key: tuple[object, ...],
                                make_view: Callable[[], supervisor.View], request: supervisor.Request,
                                state: dict[str, object], original: Launch) -> Child:
        """Start the command in the view's supervisor (started, or restarted, as needed); a bubblewrap of its own
        when no supervisor can start. Not cancellable: a started command always has someone to stop it."""
        loop = asyncio.get_running_loop()
        with anyio.CancelScope(shield=True):
            try:
                try:
                    child = await self.supervisors.get(key, make_view, loop).run(request)
                except supervisor.Ended:  # (it died meanwhile: the next one starts anew)
                    child = await self.supervisors.get(key, make_view, loop).run(request)
            except supervisor.Unavailable as exc:
                if not isinstance(exc, supervisor.Full):
                    self.supervisors.failed(str(exc))
                    log.warning("the command supervisor could not start; each command now gets a bubblewrap of its "
                                "own", extra={"error": str(exc)[:300]})
                alone = self._one_bwrap(original)
                state["cleanup"] = alone.cleanup
                proc = PopenChild(popen(alone, **alone.popen_options), loop)
                await proc.connect()
                return proc
            state["pidfd"] = os.dup(child.pidfd)
            await child.connect()
        return child

    def _one_bwrap(self, launch: Launch) -> Launch:
        """`launch` under a bubblewrap of its own."""
        assert bwrap.BWRAP is not None
        c = self.config.commands
        where = layout(launch, c)
        guards = Guards()
        areas: list[Bind] = []
        info = os.pipe()  # bubblewrap writes its sandbox's PID 1 here: the sweep waits for it to be gone
        staged: list[int] = []  # pipes holding the compiled launcher and the seccomp filter, for bubblewrap
        try:
            self._guard(where, guards)
            areas = _open_areas(where.work_areas)
            env, private_home = _sandbox_env(launch, where)
            compiled = self._compiled(where)
            extra: list[str] = []
            if compiled is not None:
                staged.append(helper.stage(compiled))
                extra += ["--perms", "0555", "--file", str(staged[-1]), helper.PATH]
                filter_kinds = self._seccomp_kinds()
                if filter_kinds:  # bubblewrap installs it right before it executes the launcher
                    staged.append(helper.stage(seccomp.program(sockets="sockets" in filter_kinds, metadata=False,
                                                               setid="setid" in filter_kinds)))
                    extra += ["--seccomp", str(staged[-1])]
            plan = bwrap.build(where, areas, guards, cwd_path=launch.cwd_path, network=c.network,
                               switch_user=self.user is not None, python_launcher=compiled is None, extra=extra)
            argv = [bwrap.BWRAP, "--info-fd", str(info[1]), *plan.argv,
                    *self._launcher(launch, where, private_home, plan.checks, compiled is not None)]
        except BaseException:
            guards.close()
            close_binds(areas)
            for fd in (*info, *staged):
                os.close(fd)
            raise
        return replace(launch, executable=bwrap.BWRAP, argv=argv, env=env,
                       popen_options={"pass_fds": (*plan.pass_fds, info[1], *staged)},
                       cleanup=partial(_after_bwrap, guards, areas, info, staged))

    def _guard(self, where: Layout, guards: Guards) -> None:
        """Add the guards of every writable root to `guards` (another root nested in one stops its walk)."""
        ids = {r.real_path: identity(r.handle()) for r in where.roots}
        for root in where.writable:
            others = {i for path, i in ids.items() if path != root.real_path}
            guard_root(root, self.config.protected_paths, guards, stop=others)

    def _compiled(self, where: Layout) -> bytes | None:
        """The compiled launcher, unless it cannot be built here or its place would be inside a bind."""
        if any(is_under(helper.PATH, p) for p in (*where.read_paths, *where.write_paths, *where.work_areas,
                                                  *(r.real_path for r in where.roots))):
            return None
        return helper.helper_bytes()

    def _seccomp_kinds(self) -> list[str]:
        if not seccomp.supported():
            return []
        return ["base", *(kind for kind, wanted in (("sockets", _sockets_filtered(self.config)),
                                                   ("setid", self.stays_root)) if wanted)]

    def _launcher(self, launch: Launch, where: Layout, private_home: bool, checks: list[str],
                  compiled: bool) -> list[str]:
        opts: list[str] = []
        if where.cwd_visible:  # (else it is an empty directory of the sandbox's own: nothing to check)
            st = os.fstat(launch.cwd_fd)
            opts += ["--cwd", f"{st.st_dev}:{st.st_ino}"]
        for item in checks:
            opts += ["--bound", item]
        opts += self._launcher_process()
        if private_home:
            opts += ["--mkdir", bwrap.HOME]
        kinds = self._seccomp_kinds()
        if kinds and not compiled:  # (the compiled launcher's filter is installed by bubblewrap: see wrap)
            opts += ["--seccomp", ",".join(kinds)]
        if self.level.available:
            opts += self._launcher_landlock()
            for path in (*where.read_paths, *where.programs, "/proc", *(r.real_path for r in where.readonly)):
                opts += ["--read", path]
            for path in (*(r.real_path for r in where.writable), *where.work_areas, *where.write_paths, bwrap.TMP):
                opts += ["--write", path]
            for path in DEVICES:
                opts += ["--device", path]
            opts += ["--list", "/dev"]
        start = [helper.PATH] if compiled else bwrap.launcher_argv()
        return [*start, *opts, "--", launch.executable, *launch.argv]


def _sandbox_env(launch: Launch, where: Layout) -> tuple[dict[str, str], bool]:
    """The command's environment inside bubblewrap (its private TMPDIR, a HOME of its own where needed), and
    whether that HOME is private (the launcher makes it)."""
    env = dict(launch.env)
    env["TMPDIR"] = bwrap.TMP
    return env, _home(env, where, bwrap.HOME)


def _after_bwrap(guards: Guards, areas: list[Bind], info: tuple[int, int], staged: Sequence[int] = ()) -> list[str]:
    """Once the command has ended: release the descriptors, and remove what it created where protected paths were
    missing, once nothing of it can write any more (its PID namespace, and so every process in it, is gone)."""
    close_binds(areas)
    for fd in staged:
        with contextlib.suppress(OSError):
            os.close(fd)
    try:
        os.close(info[1])
    finally:
        pid = bwrap.init_pid(info[0])  # (None: bubblewrap never got as far as starting it)
    try:
        if pid is not None and guards.missing:
            bwrap.wait_init_gone(pid)
        return guards.sweep()
    finally:
        guards.close()

