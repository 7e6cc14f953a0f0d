"""The two kinds of failure a tool reports to the agent.

Both carry a message the agent sees verbatim in an `isError` result. Anything
else a tool raises is a bug: the client gets a generic message and the traceback
goes to the log, so no internal detail (host paths, symlink targets) leaks.
"""

from __future__ import annotations


class ToolError(Exception):
    """Bad input or a filesystem condition the agent can act on ("file not found: a.txt")."""

    outcome = "error"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class Denied(ToolError):
    """A fence held: an escape attempt or a tool not allowed on a root. Logged at WARN."""

    outcome = "denied"
