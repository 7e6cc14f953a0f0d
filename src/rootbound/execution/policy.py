"""Which programs the command tools may run: the allowlist, the blocked patterns, the PATH used to find them.

An allowlist entry is a program name (`git`) or an absolute path (`/opt/tool/bin/run`).
A bare name in a command is looked up on the commands' PATH. A command given as a
path (`./echo`, `/tmp/x/echo`, `/usr/bin/echo`) is allowed only when it is exactly
the file an entry stands for: same resolved file *and* same name, so neither a
look-alike elsewhere nor another name of a multi-call binary (busybox) passes.

The allowlist says what the agent is meant to run. It is not a sandbox: many
allowed programs can run others (see docs/security notes); OS confinement is a
separate layer.
"""

from __future__ import annotations

import fnmatch
import os
import shlex
import shutil
from collections.abc import Sequence
from dataclasses import dataclass

from rootbound.config import CommandsConfig, per_config

__all__ = ["DEFAULT_PATH", "CommandPolicy", "Decision", "policy_for"]

DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def sanitized_path(value: str | None) -> str:
    """The server's PATH without empty or relative entries, which would make `ls` mean `./ls`."""
    entries = [p for p in (value or "").split(":") if p.startswith("/")]
    return ":".join(dict.fromkeys(entries)) or DEFAULT_PATH


@dataclass(frozen=True)
class Decision:
    """Whether a command name may run, and which file to execute when it may."""

    allowed: bool
    executable: str | None = None  # None when allowed but not found (the caller reports ENOENT)
    reason: str = ""


@dataclass(frozen=True)
class _PathEntry:
    path: str
    real: str
    base: str


def _real(path: str) -> str | None:
    try:
        return os.path.realpath(path, strict=True)
    except OSError:
        return None


class CommandPolicy:
    def __init__(self, config: CommandsConfig) -> None:
        allowed = config.allowed
        self.any = allowed == "*" or "*" in allowed
        entries = [] if self.any or isinstance(allowed, str) else [e.strip() for e in allowed]
        self.names = frozenset(e for e in entries if "/" not in e)
        self.paths = tuple(_PathEntry(e, _real(e) or e, os.path.basename(e)) for e in entries if "/" in e)
        self.blocked = tuple((p, shlex.split(p)) for p in config.blocked if p.strip())
        self.path_env = sanitized_path(os.environ.get("PATH"))
        self.config = config

    @property
    def restricted(self) -> bool:
        return not self.any

    def listing(self) -> str:
        if self.any:
            return "* (any program)"
        return ", ".join(sorted([*self.names, *(p.path for p in self.paths)])) or "none"

    def decide(self, token: str, cwd: str | None, path_env: str | None = None) -> Decision:
        """May `token` (a command name as the agent wrote it) run, starting in `cwd`?"""
        search = path_env or self.path_env
        if "/" not in token:
            found = shutil.which(token, path=search)
            if self.any or token in self.names:
                return Decision(True, found)
            real = _real(found) if found else None
            if real and any(p.real == real and p.base == token for p in self.paths):
                return Decision(True, found)
            return Decision(False, reason=f"command not allowed: {token}. Allowed commands: {self.listing()}")
        candidate = token if token.startswith("/") or cwd is None else os.path.join(cwd, token)
        real = _real(candidate)
        if self.any:
            return Decision(True, real or candidate)
        base = os.path.basename(token)
        if real is not None:
            if any(p.real == real and p.base == base for p in self.paths):
                return Decision(True, real)
            if base in self.names:
                found = shutil.which(base, path=search)
                if found and _real(found) == real:
                    return Decision(True, real)
        why = f"command not allowed: {token}. Allowed commands: {self.listing()}"
        if base in self.names:
            found = shutil.which(base, path=search)
            where = f"the one on the server's PATH ({found})" if found else "the one on the server's PATH"
            why += f"; {base} is allowed only as {where}, not as another file with that name"
        return Decision(False, reason=why)

    def blocked_by(self, words: Sequence[str | None]) -> str | None:
        """The first blocked pattern matching this argv, if any.

        Pattern words are globs matched against the leading argv words (the program
        by its base name). A word whose value is unknown until the shell runs
        (`rm -rf $DIR`) counts as matching: the check fails closed.
        """
        for text, pattern in self.blocked:
            if len(words) < len(pattern):
                continue
            ok = True
            for i, want in enumerate(pattern):
                got = words[i]
                if got is None:
                    continue
                if i == 0:
                    got = os.path.basename(got)
                if not fnmatch.fnmatchcase(got, want):
                    ok = False
                    break
            if ok:
                return text
        return None


@per_config
def policy_for(config: CommandsConfig) -> CommandPolicy:
    """The policy for a configuration, built once."""
    return CommandPolicy(config)
