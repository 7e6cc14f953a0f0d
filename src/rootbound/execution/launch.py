"""What gets executed: a `Launch` (program, argv, working directory, environment), and the hook that wraps it.

Every command goes through one `Launcher` before it is spawned. `UNCONFINED`
(`commands.sandbox: off`) changes nothing: commands run as the server's user with
the server's view of the filesystem and network. The OS sandboxes
(`rootbound.sandbox`) return a new `Launch` whose argv runs the original inside
bubblewrap, or whose `spawn` starts it from a thread restricted by Landlock; the
runner only honours `spawn`, `popen_options` and (through the service) `cleanup`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from rootbound.fs import Root

__all__ = ["UNCONFINED", "Child", "Launch", "Launcher"]


class Child(Protocol):
    """A started command, as the runner drives it."""

    pid: int
    stdout: asyncio.StreamReader
    stderr: asyncio.StreamReader
    exited: asyncio.Event  # set once the process has exited (its output may still be open)

    def returncode(self) -> int | None: ...  # negative: ended by that signal

    def close(self) -> None: ...  # release pipes and handles; kill the process if it somehow still runs


@dataclass(frozen=True)
class Launch:
    executable: str  # the file to execute (absolute)
    argv: Sequence[str]  # argv[0] is the name the program sees (kept as written: multi-call binaries read it)
    cwd_fd: int  # the checked working directory, as an open handle
    cwd_path: str  # its canonical path (for PWD, and for a sandbox to bind)
    env: Mapping[str, str]
    roots: Sequence[Root] = ()  # the roots in force for this call: what a sandbox lets the command reach
    # The programs the allowlist names by absolute path: a sandbox lets the command read and execute these files
    # wherever they are (plain data, so that a sandbox needs nothing of the policy).
    programs: Sequence[str] = ()
    # Set by a sandbox: start the command this way instead of the event loop's subprocess support.
    spawn: Callable[[Launch], Awaitable[Child]] | None = None
    popen_options: Mapping[str, Any] = field(default_factory=dict)  # extra subprocess options (pass_fds, user)
    # Run once the command has ended; quick (no waiting on the loop). Returns what the sandbox removed afterwards
    # (protected paths the command created, as "root:path"), which the result reports.
    cleanup: Callable[[], Sequence[str] | None] | None = None


class Launcher(Protocol):
    name: str
    confined: bool
    problem: str | None  # why commands are refused (fail closed), for `rootbound check`

    def wrap(self, launch: Launch) -> Launch: ...

    def describe(self) -> list[str]: ...  # what the confinement guarantees, for `rootbound check`


class _Unconfined:
    name = "none"
    confined = False
    problem: str | None = None

    def wrap(self, launch: Launch) -> Launch:
        return launch

    def describe(self) -> list[str]:
        return ["  OS confinement: NONE (commands.sandbox: off). Commands run as the server's user and can read, "
                "write and reach whatever it can, outside the roots too; the allowlist is policy, not a sandbox"]


UNCONFINED: Launcher = _Unconfined()
