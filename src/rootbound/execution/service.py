"""One command request from check to result: policy, working directory, environment, queue, run, audit.

Everything that can refuse a request does so before anything is spawned, and
every request, run or refused, leaves one audit line.
"""

from __future__ import annotations

import asyncio
import errno
import os
import time
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import anyio

from rootbound.config import Config
from rootbound.errors import Denied, ToolError
from rootbound.execution import setup
from rootbound.execution.audit import write_audit
from rootbound.execution.denials import sandbox_note
from rootbound.execution.environment import build_env, check_assignment
from rootbound.execution.groups import ProcessGroups
from rootbound.execution.launch import UNCONFINED, Launch, Launcher
from rootbound.execution.policy import CommandPolicy, policy_for
from rootbound.execution.progress import ProgressFeed, Send
from rootbound.execution.runner import RunResult, SpawnError, run
from rootbound.execution.script import analyze
from rootbound.execution.spill import SpillArea, SpillFile, new_command_id
from rootbound.execution.words import CommandSyntaxError, OperatorError, split_command
from rootbound.execution.workdir import WorkDir, open_workdir
from rootbound.fs import Root, journaling

__all__ = ["ENOENT_HINT", "SHELL", "CommandHost", "CommandQueue", "CommandRequest", "Outcome", "execute"]

SHELL = "/bin/sh"
ENOENT_HINT = ("Note: This tool does not support interactive commands. Ensure the command is non-interactive and the "
               "executable exists.")


@dataclass(frozen=True)
class CommandRequest:
    tool: str
    command: str
    shell: bool  # True: `/bin/sh -c command`; False: split into argv and run directly
    cwd: str | None = None
    root: str | None = None
    timeout: int | None = None
    env: Mapping[str, str] | None = None
    line_cost: int = 0  # characters the tool's text adds per line of output (counted by the inline cap)


@dataclass
class Outcome:
    result: RunResult
    working_directory: str
    timeout: int
    removed: list[str] = field(default_factory=list)  # protected paths the command created, removed after it
    sandbox_note: str | None = None  # the command failed, probably because the sandbox denied it: which key allows it


class CommandQueue:
    """At most `size` commands of one App at once; the others wait their turn."""

    def __init__(self, size: int) -> None:
        self.size = size
        # One semaphore per event loop: a semaphore is bound to the loop it first waits on.
        self._per_loop: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore] = \
            weakref.WeakKeyDictionary()

    def turn(self) -> asyncio.Semaphore:
        loop = asyncio.get_running_loop()
        semaphore = self._per_loop.get(loop)
        if semaphore is None:
            semaphore = self._per_loop[loop] = asyncio.Semaphore(self.size)
        return semaphore


@dataclass
class CommandHost:
    """What an App builds once, from its configuration, to run commands, and closes: the launcher (how commands
    are confined, chosen at start-up), the queue, and the registry of their process groups."""

    launcher: Launcher
    queue: CommandQueue
    groups: ProcessGroups = field(default_factory=ProcessGroups)

    @classmethod
    def build(cls, config: Config, launcher: Launcher = UNCONFINED) -> CommandHost:
        return cls(launcher, CommandQueue(config.commands.max_concurrent))

    def close(self) -> None:
        self.groups.kill_all()  # no command outlives the App
        self.launcher.close()


def _operator_message(op: str) -> str:
    return (f"execute_command runs one program directly, without a shell, so the shell operator {op!r} cannot be "
            "used. Nothing was run. Use the shell tool for pipelines, redirections, command lists and substitutions; "
            "pass the working directory as cwd instead of using 'cd'; quote the character to pass it literally.")


def _argv(request: CommandRequest) -> list[str]:
    try:
        return split_command(request.command)
    except OperatorError as exc:
        raise Denied(_operator_message(exc.operator)) from None
    except CommandSyntaxError as exc:
        raise ToolError(f"cannot read the command: {exc}; nothing was run") from None


def _program(policy: CommandPolicy, token: str, cwd: str, path_env: str) -> str:
    decision = policy.decide(token, cwd, path_env)
    if not decision.allowed:
        hint = " ('cd' is not a program: pass the directory as cwd)" if token == "cd" else ""
        raise Denied(decision.reason + hint)
    if decision.executable is None or not os.path.exists(decision.executable):
        raise ToolError(f"command not found: {token}. {ENOENT_HINT}")
    return decision.executable


def _check_script(policy: CommandPolicy, config: Config, script: str, cwd: str) -> None:
    if not policy.restricted and not policy.blocked:
        return

    def refuse_var(name: str) -> str | None:
        return check_assignment(name, config.commands, policy.restricted)  # as for the environment parameter

    report = analyze(script, strict=policy.restricted, refuse_var=refuse_var)
    for cmd in report.commands:
        if policy.restricted and not cmd.builtin:
            if "/" in cmd.name and not cmd.name.startswith("/") and report.changes_directory:
                raise Denied(f"command {cmd.name} is a relative path in a script that changes directory, so the "
                             "file it names cannot be known in advance; use an absolute path. Nothing was run")
            decision = policy.decide(cmd.name, cwd)
            if not decision.allowed:
                raise Denied(f"{decision.reason} (in the shell script). Nothing was run")
        pattern = policy.blocked_by(cmd.words)
        if pattern is not None:
            raise Denied(f"command blocked by the server's policy (pattern {pattern!r}): "
                         f"{' '.join(w if w is not None else '…' for w in cmd.words)}. Nothing was run")


def _identity(workdir: WorkDir) -> tuple[int, int, str]:
    """What must not change while a command waits: the directory (device, inode) and where it is."""
    st = os.fstat(workdir.fd)
    return st.st_dev, st.st_ino, workdir.path


def _spill_opener(area: SpillArea | None, command_id: str, limit: int) -> Callable[[str], SpillFile | None] | None:
    if area is None or limit <= 0:
        return None

    def open_spill(stream: str) -> SpillFile | None:
        try:
            return SpillFile(area.writable_root(), command_id, stream, limit)
        except OSError:
            return None

    return open_spill


def _shown_roots(roots: Mapping[str, Root], spill: SpillArea | None) -> tuple[Root, ...]:
    """The roots a command's sandbox shows. Left out: a root whose directory vanished, and the `command-output`
    root while this client has spilled nothing: its shared empty placeholder holds nothing a command could read
    (a command started there sees an empty directory all the same), and under bubblewrap it cost a mount and a
    bind check per command (~0.6 ms). A client's own spill area, once it exists, is shown read-only."""
    empty = spill.store.empty if spill is not None else None
    return tuple(r for r in roots.values() if r.available() and r is not empty)


def _release(prepared: tuple[WorkDir, Launch]) -> None:
    """What `prepare` opened, for a call cancelled while it ran in a thread."""
    workdir, launch = prepared
    workdir.close()
    if launch.cleanup is not None:
        launch.cleanup()


def _note(roots: Mapping[str, Root], record: dict[str, Any], started: float) -> None:
    """The command's audit record in the journal of the root its working directory lies in (none: not noted)."""
    cwd = str(record["cwd"])
    inside = [r for r in roots.values() if os.path.commonpath([r.real_path, cwd]) == r.real_path]
    if inside:
        root = max(inside, key=lambda r: len(r.real_path))
        journaling.note_command(root, os.path.relpath(cwd, root.real_path), str(record["command"]),
                                record.get("exit_code"), record["duration_ms"] / 1000, started)


async def execute(request: CommandRequest, *, config: Config, roots: Mapping[str, Root], project_dir: str,
                  host: CommandHost, progress: Send | None = None, spill: SpillArea | None = None) -> Outcome:
    """Check and run one command; raise `ToolError`/`Denied` (nothing run) or return what happened."""
    launcher = host.launcher
    policy = policy_for(config.commands)
    command_id = new_command_id()
    record: dict[str, Any] = {"tool": request.tool, "command": request.command, "root": request.root,
                              "cwd": request.cwd, "command_id": command_id,
                              "env_names": sorted(request.env) if request.env else None, "sandbox": launcher.name}
    start, started = time.perf_counter(), time.time()
    try:
        argv = [SHELL, "-c", request.command] if request.shell else _argv(request)
        if request.shell and "\x00" in request.command:
            raise ToolError("the command contains a null byte; nothing was run")
        # The working directory and the roots are looked at on the loop only where that cannot stall it (setup.py).
        off_loop = setup.leaves_loop(roots, request.root, request.cwd, project_dir)

        def check() -> tuple[dict[str, str], str, tuple[int, int, str]]:
            workdir: WorkDir = open_workdir(roots, project_dir, request.cwd, request.root,
                                            config.commands.allowed_cwd_roots)
            try:
                record["cwd"] = workdir.path
                env = build_env(policy, request.env, workdir.path, command_id)
                if request.shell:
                    _check_script(policy, config, request.command, workdir.path)
                    executable = SHELL
                else:
                    executable = _program(policy, argv[0], workdir.path, env["PATH"])
                    pattern = policy.blocked_by(argv)
                    if pattern is not None:
                        raise Denied(f"command blocked by the server's policy (pattern {pattern!r}); nothing was run")
                return env, executable, _identity(workdir)
            finally:
                # A queued command holds no descriptor: 1,100 of them once exhausted the server's
                # RLIMIT_NOFILE, and every other call failed with EMFILE. Reopened once its turn comes.
                workdir.close()

        env, executable, checked = await setup.setup(check, off_loop=off_loop)
        timeout = min(request.timeout or config.commands.default_timeout, config.commands.max_timeout)
        queued = time.perf_counter()
        async with host.queue.turn():
            record["queued_ms"] = round((time.perf_counter() - queued) * 1000, 2)

            def prepare() -> tuple[WorkDir, Launch]:
                workdir = open_workdir(roots, project_dir, request.cwd, request.root,
                                       config.commands.allowed_cwd_roots)
                try:
                    if _identity(workdir) != checked:
                        raise ToolError(f"the working directory {workdir.shown} was replaced or moved while the "
                                        "command waited for its turn; nothing was run. Try again")
                    # Wrapped only when its turn comes: a sandbox may hold resources (temp directory, descriptors).
                    try:
                        return workdir, launcher.wrap(Launch(executable, argv, workdir.fd, workdir.path, env,
                                                             roots=_shown_roots(roots, spill),
                                                             programs=tuple(p.path for p in policy.paths)))
                    except OSError as exc:
                        raise ToolError(f"cannot set up the command sandbox: {exc}; nothing was run") from None
                except BaseException:
                    workdir.close()
                    raise

            workdir, launch = await setup.setup(prepare, off_loop=off_loop, release=_release)
            try:
                removed: list[str] = []
                try:
                    result = await run(launch, timeout=timeout, max_output=config.commands.max_output_size,
                                       command_id=command_id, registry=host.groups,
                                       open_spill=_spill_opener(spill, command_id, config.commands.max_spill_size),
                                       progress=ProgressFeed(progress) if progress is not None else None,
                                       inline_limit=config.commands.inline_output_limit,
                                       line_cost=request.line_cost)
                finally:
                    if launch.cleanup is not None:  # quick by contract (slow work: a thread of its own)
                        done = await setup.finish(launch.cleanup, off_loop=off_loop)
                        removed = list(done or ())
                        if removed:
                            record["removed"] = removed
            finally:
                workdir.close()
        record.update(decision="allowed", outcome="timed_out" if result.timed_out else "exited",
                      exit_code=result.exit_code, signal=result.signal, stdout_bytes=result.stdout.total_bytes,
                      stderr_bytes=result.stderr.total_bytes, truncated=result.truncated)
    except SpawnError as exc:
        record.update(decision="error", reason=exc.message)
        if exc.errno == errno.ENOENT:
            raise ToolError(f"command not found: {argv[0]}. {ENOENT_HINT}") from None
        raise ToolError(f"cannot start {argv[0]}: {exc.message}") from None
    except ToolError as exc:
        record.update(decision="denied" if isinstance(exc, Denied) else "error", reason=exc.message)
        raise
    except anyio.get_cancelled_exc_class():
        record.update(decision="allowed", outcome="cancelled")
        raise
    finally:
        record["duration_ms"] = round((time.perf_counter() - start) * 1000, 2)
        write_audit(record, config.commands.audit_log)
        if record.get("outcome") is not None:  # it ran: the journal's timeline shows it between the changes
            _note(roots, record, started)
    note = None if result.timed_out else sandbox_note(result.stderr.text, result.exit_code, launcher.name,
                                                      config.commands.network)
    return Outcome(result, workdir.shown, timeout, removed, note)
