"""Which sandbox runs the commands of a configuration (`commands.sandbox`), decided once and fail-closed.

* `auto`: bubblewrap if it actually works here (probed), else Landlock;
* `bwrap` / `landlock`: that one, or nothing;
* `off`: no confinement, as the operator explicitly asked.

When the chosen sandbox cannot be applied, the launcher is `Refusing`: every
command is refused with the reason and the way to opt out, and `rootbound check`
reports the problem. Nothing ever silently runs unconfined.
"""

from __future__ import annotations

import os
import pwd

from rootbound.config import Config, per_config
from rootbound.errors import Denied
from rootbound.execution.launch import UNCONFINED, Launch, Launcher
from rootbound.sandbox import bwrap, creds, landlock, seccomp
from rootbound.sandbox.creds import RunAs
from rootbound.sandbox.launchers import BwrapLauncher, LandlockLauncher

__all__ = ["Refusing", "headline", "launcher_for", "resolve_user"]


class Refusing:
    """No sandbox can be applied: commands are refused (fail closed)."""

    name = "refusing"
    confined = False

    def __init__(self, problem: str) -> None:
        self.problem: str | None = problem

    def wrap(self, launch: Launch) -> Launch:
        raise Denied(f"commands are refused: {self.problem}. Nothing was run")

    def close(self) -> None:
        pass

    def describe(self) -> list[str]:
        return [f"  OS confinement: UNAVAILABLE, so every command is refused: {self.problem}"]


def resolve_user(name: str | None) -> RunAs | None:
    """The `run_as` user; None when unset or already the server's user. Raises ValueError with the reason."""
    if name is None:
        return None
    try:
        entry = pwd.getpwuid(int(name)) if name.isdigit() else pwd.getpwnam(name)
    except (KeyError, ValueError):
        raise ValueError(f"commands.run_as: no such user: {name}") from None
    if entry.pw_uid == os.geteuid():
        return None
    if os.geteuid() != 0:
        raise ValueError(f"commands.run_as: cannot switch to {name}: the server does not run as root")
    groups = tuple(sorted(set(os.getgrouplist(entry.pw_name, entry.pw_gid))))
    return RunAs(entry.pw_name, entry.pw_uid, entry.pw_gid, groups)


_OPT_OUT = "set commands.sandbox: off to run commands unconfined (the allowlist is then the only fence)"


def _choose(config: Config) -> Launcher:
    mode = config.commands.sandbox
    if mode == "off":
        return UNCONFINED
    try:
        user = resolve_user(config.commands.run_as)
    except ValueError as exc:
        return Refusing(str(exc))
    if user is None and os.geteuid() == 0 and not seccomp.supported():
        return Refusing(f"commands would run as root, and without a seccomp filter (none is implemented for "
                        f"{os.uname().machine}) nothing stops them from making set-uid root files; set "
                        f"commands.run_as, or {_OPT_OUT}")
    level = landlock.support()
    if mode in ("auto", "bwrap"):
        found = bwrap.probe()
        if found.ok:
            return BwrapLauncher(config, user, level, found.detail)
        if mode == "bwrap":
            return Refusing(f"commands.sandbox is bwrap but {found.detail}; install bubblewrap (apt-get install "
                            f"bubblewrap), choose commands.sandbox: landlock, or {_OPT_OUT}")
    if level.available:
        if user is not None and not creds.supported():
            return Refusing(f"commands.run_as needs per-thread credentials, not implemented for "
                            f"{os.uname().machine}; install bubblewrap, or {_OPT_OUT}")
        return LandlockLauncher(config, user, level)
    why = "no OS sandbox is available: " + level.describe()
    if mode == "auto":
        why += f", and {bwrap.probe().detail}"
    return Refusing(f"{why}; install bubblewrap, or {_OPT_OUT}")


@per_config
def launcher_for(config: Config) -> Launcher:
    """The launcher for a configuration, chosen once."""
    return _choose(config)


def headline(config: Config, launcher: Launcher | None = None) -> str:
    """One line for the startup log: what confines commands (`launcher`: the App's; else the configuration's)."""
    if not config.commands.allowed:
        return "commands: off"
    if launcher is None:
        launcher = launcher_for(config)
    if isinstance(launcher, BwrapLauncher):
        inner = f" + Landlock ABI {launcher.level.abi} inside" if launcher.level.available else ""
        return f"commands sandbox: {launcher.version}{inner}"
    if isinstance(launcher, LandlockLauncher):
        root = "; chmod and xattrs refused, as commands run as root: set commands.run_as" if launcher.stays_root else ""
        return (f"commands sandbox: Landlock ABI {launcher.level.abi} only (protected paths not enforced for "
                f"commands, no PID or network namespace: install bubblewrap for those{root})")
    if isinstance(launcher, Refusing):
        return f"commands sandbox: NONE, every command is refused: {launcher.problem}"
    return "commands sandbox: OFF (commands.sandbox: off): commands run unconfined as the server's user"
