"""The effective command policy in words, for `rootbound check`: what may run, where, how; and what is not enforced."""

from __future__ import annotations

import os
import shutil

from rootbound.config import Config
from rootbound.errors import ToolError
from rootbound.execution.environment import ALWAYS_SECRET, BASE_PASSTHROUGH
from rootbound.execution.groups import KILL_GRACE
from rootbound.execution.launch import Launcher
from rootbound.execution.policy import policy_for
from rootbound.execution.runner import DRAIN_SECONDS
from rootbound.execution.service import SHELL
from rootbound.execution.workdir import cwd_roots

__all__ = ["describe_commands"]

# Allowed programs that can start any other program from their arguments or configuration.
_RUNNERS = frozenset({
    "sh", "bash", "dash", "zsh", "env", "xargs", "find", "awk", "gawk", "sed", "perl", "python", "python3", "node",
    "npm", "npx", "make", "git", "tar", "vim", "vi", "less", "man", "ssh", "timeout", "nohup", "nice", "setsid",
    "stdbuf", "sudo", "busybox", "watch", "flock", "strace", "gdb", "zip", "sort", "rsync", "docker",
})


def describe_commands(config: Config, launcher: Launcher) -> tuple[list[str], list[str]]:
    """(lines to print, configuration problems). No problems and no lines when commands are off.

    `launcher`: the one that confines the commands (its own lines and problem end the description).
    """
    c = config.commands
    if not c.allowed:
        return ["commands: off (no program allowed; execute_command and shell are not listed)"], []
    policy = policy_for(c)
    problems: list[str] = []
    lines = ["commands: execute_command and shell are listed"]
    if policy.any:
        lines.append("  programs: any (*); the shell tool's scripts are not checked")
    else:
        shown = []
        for name in sorted(policy.names):
            found = shutil.which(name, path=policy.path_env)
            shown.append(f"{name} -> {found}" if found else f"{name} -> NOT FOUND on PATH")
            if not found:  # every call would fail: the operator should hear it now, not the agent later
                problems.append(f"allowed program {name!r} is not on PATH ({policy.path_env}); install it, or "
                                "remove it from commands.allowed / ALLOWED_COMMANDS / --allow-commands")
        shown += [p.path if os.path.exists(p.path) else f"{p.path} (does not exist)" for p in policy.paths]
        problems += [f"allowed program {p.path} does not exist; fix the path in commands.allowed"
                     for p in policy.paths if not os.path.exists(p.path)]
        lines.append(f"  programs: {'; '.join(shown)}")
        lines.append(f"  shell scripts: checked (POSIX sh subset; file redirections refused) and run by {SHELL}")
        risky = sorted(n for n in policy.names | {p.base for p in policy.paths} if n in _RUNNERS)
        if risky:
            lines.append(f"  warning: {', '.join(risky)} can run arbitrary other programs from their arguments or "
                         "configuration; the allowlist cannot stop that")
    lines.append(f"  blocked patterns: {', '.join(repr(p) for p, _ in policy.blocked) or 'none'} "
                 "(a tripwire, not a fence)")
    if c.allowed_cwd_roots:
        try:
            lines.append(f"  working directories: under {', '.join(cwd_roots(c.allowed_cwd_roots))}")
        except ToolError as exc:
            problems.append(exc.message)
            lines.append("  working directories: CONFIGURATION ERROR (every command request is refused)")
    else:
        lines.append("  working directories: any existing directory (ALLOWED_CWD_ROOTS unset); relative ones from "
                     f"the project directory ({config.project_dir or 'the server working directory'})")
    passed = [*BASE_PASSTHROUGH, *c.env_passthrough]
    never = [*ALWAYS_SECRET, *c.secret_env]
    lines.append(f"  environment: PATH={policy.path_env}; passes {', '.join(passed)}; never {', '.join(never)}; "
                 f"loader variables allowed: {', '.join(c.allowed_loader_vars) or 'none'}; "
                 + (f"variables that make a program run another (GIT_SSH_COMMAND, PAGER, NODE_OPTIONS, ...) allowed: "
                    f"{', '.join(c.allowed_exec_vars) or 'none'}" if policy.restricted else
                    "variables that make a program run another: any (every program is allowed anyway)"))
    lines.append(f"  limits: timeout {c.default_timeout} s (max {c.max_timeout} s), then SIGTERM and SIGKILL after "
                 f"{KILL_GRACE:g} s to the whole process group; output {c.max_output_size} bytes per stream (rest in "
                 f"spill files up to {c.max_spill_size} bytes, each client seeing only its own); "
                 f"{c.max_concurrent} at once; open output after exit waits {DRAIN_SECONDS:g} s")
    lines.append(f"  audit: {c.audit_log or 'log only (commands.audit_log not set)'}")
    lines.extend(launcher.describe())
    if launcher.problem is not None:
        problems.append(f"commands are refused: {launcher.problem}")
    return lines, problems
