"""What gets executed: a `Launch` (program, argv, working directory, environment), and the hook that wraps it.

Every command goes through one `Launcher` before it is spawned. Today that is
`UNCONFINED`, which changes nothing: commands run as the server's user with the
server's view of the filesystem and network. An OS sandbox (bubblewrap, a
Landlock launcher) plugs in here by returning a new `Launch` whose argv runs the
original one inside it, e.g. `bwrap --ro-bind / / --bind ROOT ROOT ... -- argv`;
nothing else in the runner has to change.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

__all__ = ["UNCONFINED", "Launch", "Launcher"]


@dataclass(frozen=True)
class Launch:
    executable: str  # the file to execute (absolute)
    argv: Sequence[str]  # argv[0] is the name the program sees (kept as written: multi-call binaries read it)
    cwd_fd: int  # the checked working directory, as an open handle
    cwd_path: str  # its canonical path (for PWD, and for a sandbox to bind)
    env: Mapping[str, str]


class Launcher(Protocol):
    name: str
    confined: bool

    def wrap(self, launch: Launch) -> Launch: ...


class _Unconfined:
    name = "none"
    confined = False

    def wrap(self, launch: Launch) -> Launch:
        return launch


UNCONFINED: Launcher = _Unconfined()
