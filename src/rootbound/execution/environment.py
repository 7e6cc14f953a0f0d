"""The environment a command starts with: a small allowlist of the server's variables plus the agent's additions.

Starting from an allowlist (not from a copy minus known secrets) means a secret
the operator forgot to name still does not reach the command. The agent's
`env`/`environment` values are added on top, with three refusals:

* loader variables (`LD_*`, `DYLD_*`) inject code into every program started,
  so they need the operator's `allowed_loader_vars`;
* while the allowlist is restricted, variables that change which program a name
  runs or make a shell run code (`PATH`, `BASH_ENV`, `ENV`, ...) are refused,
  because they would turn an allowed name into a different program;
* while the allowlist is restricted, variables that make an allowed program run
  another program or load code (`GIT_SSH_COMMAND`, `GIT_CONFIG_*`, `PAGER`,
  `EDITOR`, `NODE_OPTIONS`, `PYTHONPATH`, ... — `EXEC_VARS`) are refused unless
  the operator lists them in `allowed_exec_vars`. Only while restricted: with
  `allowed: "*"` the agent may run any program directly, so refusing them would
  fence nothing and only break ordinary uses (`GIT_PAGER=cat`, `PYTHONPATH=src`);
* names must be plain identifiers.

The shell-script checker applies the same rules to assignments in a script
(`FOO=x git status`, `export FOO=x`).
"""

from __future__ import annotations

import fnmatch
import functools
import os
import re
from collections.abc import Mapping

from rootbound.config import CommandsConfig
from rootbound.errors import Denied, ToolError
from rootbound.execution.policy import CommandPolicy

__all__ = ["BASE_PASSTHROUGH", "COMMAND_ID_VAR", "EXEC_VARS", "SHELL_CONTROL_VARS", "build_env", "check_assignment",
           "is_loader_var"]

BASE_PASSTHROUGH = ("HOME", "USER", "LOGNAME", "LANG", "LANGUAGE", "LC_*", "TZ", "TMPDIR")
ALWAYS_SECRET = ("ROOTBOUND_AUTH_TOKEN",)
# Variables that decide which file a command name runs, or that make a shell run code.
SHELL_CONTROL_VARS = frozenset({"PATH", "BASH_ENV", "ENV", "SHELLOPTS", "BASHOPTS", "PS4", "PROMPT_COMMAND"})
# Variables that make an allowed program run another program, or load code, named by the agent: git's
# configuration, helpers and repository redirection, pagers and editors, language runtimes' option and
# module-path variables, and their like (globs).
EXEC_VARS: tuple[str, ...] = (
    "GIT_CONFIG", "GIT_CONFIG_PARAMETERS", "GIT_CONFIG_COUNT", "GIT_CONFIG_KEY_*", "GIT_CONFIG_VALUE_*",
    "GIT_CONFIG_GLOBAL", "GIT_CONFIG_SYSTEM", "GIT_DIR", "GIT_COMMON_DIR", "GIT_EXEC_PATH", "GIT_TEMPLATE_DIR",
    "GIT_SSH", "GIT_SSH_COMMAND", "GIT_PROXY_COMMAND", "GIT_EXTERNAL_DIFF", "GIT_PAGER", "GIT_EDITOR",
    "GIT_SEQUENCE_EDITOR", "GIT_ASKPASS", "SSH_ASKPASS",
    "PAGER", "MANPAGER", "EDITOR", "VISUAL", "BROWSER", "LESSOPEN", "LESSCLOSE", "SHELL",
    "PS0", "PS1", "PS2", "ZDOTDIR",
    "*_OPTIONS", "JAVA_OPTS", "MAVEN_OPTS", "GRADLE_OPTS", "SBT_OPTS", "NODE_PATH",
    "PERL5OPT", "PERL5LIB", "PERLLIB", "PERL5DB", "RUBYOPT", "RUBYLIB",
    "PYTHONSTARTUP", "PYTHONPATH", "PYTHONHOME", "PYTHONUSERBASE", "PYTHONBREAKPOINT",
)
# Marks every process a command starts, so stragglers that left its process group can be found.
COMMAND_ID_VAR = "ROOTBOUND_COMMAND_ID"

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


@functools.lru_cache(maxsize=64)
def _pattern(patterns: tuple[str, ...]) -> re.Pattern[str]:
    """One regex for a set of globs (compiled once per set: every command checks the server's whole environment)."""
    return re.compile("|".join(f"(?:{fnmatch.translate(p)})" for p in patterns) or r"(?!)")


def _matches(name: str, patterns: tuple[str, ...] | list[str]) -> bool:
    return _pattern(tuple(patterns)).match(name) is not None


def is_loader_var(name: str) -> bool:
    return name.startswith(("LD_", "DYLD_"))


def check_assignment(name: str, config: CommandsConfig, restricted: bool) -> str | None:
    """Why the agent may not set `name` (None when it may). Shared with the shell-script checker."""
    if is_loader_var(name) and not _matches(name, config.allowed_loader_vars):
        return (f"environment variable {name} is refused: loader variables inject code into every program; "
                "the operator can allow it with commands.allowed_loader_vars")
    if restricted and name in SHELL_CONTROL_VARS:
        return (f"environment variable {name} is refused while the command allowlist is restricted: "
                "it would change which program a command name runs")
    if restricted and _matches(name, EXEC_VARS) and not _matches(name, config.allowed_exec_vars):
        return (f"environment variable {name} is refused while the command allowlist is restricted: it makes an "
                "allowed program run another program or load code; the operator can allow it with "
                "commands.allowed_exec_vars")
    return None


def build_env(policy: CommandPolicy, extra: Mapping[str, str] | None, cwd_path: str, command_id: str,
              server_env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The complete environment for one command."""
    config = policy.config
    source = os.environ if server_env is None else server_env
    keep = _pattern((*BASE_PASSTHROUGH, *config.env_passthrough))
    secret = _pattern((*ALWAYS_SECRET, *config.secret_env))
    env = {k: v for k, v in source.items() if keep.match(k) is not None and secret.match(k) is None}
    env["PATH"] = policy.path_env
    for name, value in (extra or {}).items():
        if not _NAME.match(name):
            raise ToolError(f"invalid environment variable name: {name!r} (letters, digits and _ only)")
        if "\x00" in value:
            raise ToolError(f"environment variable {name} contains a null byte")
        reason = check_assignment(name, config, policy.restricted)
        if reason:
            raise Denied(reason)
        env[name] = value
    env["PWD"] = cwd_path
    env[COMMAND_ID_VAR] = command_id
    return env
