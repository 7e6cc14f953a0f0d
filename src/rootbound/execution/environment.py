"""The environment a command starts with: a small allowlist of the server's variables plus the agent's additions.

Starting from an allowlist (not from a copy minus known secrets) means a secret
the operator forgot to name still does not reach the command. The agent's
`env`/`environment` values are added on top, with three refusals:

* loader variables (`LD_*`, `DYLD_*`) inject code into every program started,
  so they need the operator's `allowed_loader_vars`;
* while the allowlist is restricted, variables that change which program a name
  runs or make a shell run code (`PATH`, `BASH_ENV`, `ENV`, ...) are refused,
  because they would turn an allowed name into a different program;
* names must be plain identifiers.
"""

from __future__ import annotations

import fnmatch
import os
import re
from collections.abc import Mapping

from rootbound.config import CommandsConfig
from rootbound.errors import Denied, ToolError
from rootbound.execution.policy import CommandPolicy

__all__ = ["BASE_PASSTHROUGH", "COMMAND_ID_VAR", "SHELL_CONTROL_VARS", "build_env", "is_loader_var"]

BASE_PASSTHROUGH = ("HOME", "USER", "LOGNAME", "LANG", "LANGUAGE", "LC_*", "TZ", "TMPDIR")
ALWAYS_SECRET = ("ROOTBOUND_AUTH_TOKEN",)
# Variables that decide which file a command name runs, or that make a shell run code.
SHELL_CONTROL_VARS = frozenset({"PATH", "BASH_ENV", "ENV", "SHELLOPTS", "BASHOPTS", "PS4", "PROMPT_COMMAND"})
# Marks every process a command starts, so stragglers that left its process group can be found.
COMMAND_ID_VAR = "ROOTBOUND_COMMAND_ID"

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def _matches(name: str, patterns: tuple[str, ...] | list[str]) -> bool:
    return any(fnmatch.fnmatchcase(name, p) for p in patterns)


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
    return None


def build_env(policy: CommandPolicy, extra: Mapping[str, str] | None, cwd_path: str, command_id: str,
              server_env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The complete environment for one command."""
    config = policy.config
    source = os.environ if server_env is None else server_env
    keep = (*BASE_PASSTHROUGH, *config.env_passthrough)
    secret = (*ALWAYS_SECRET, *config.secret_env)
    env = {k: v for k, v in source.items() if _matches(k, keep) and not _matches(k, secret)}
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
