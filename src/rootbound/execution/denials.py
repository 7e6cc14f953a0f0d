"""Telling a sandbox denial from an ordinary failure: which setting would have allowed it.

A sandboxed command that reaches outside its view fails the way any program does
(`Permission denied`, `Read-only file system`, `Network is unreachable`, ...), and the
agent cannot tell that apart from a real permission problem. When a sandboxed command
exits non-zero with one of those texts in its stderr, the result gets a note naming
the configuration key an operator would change. It is a hint from the text, not proof:
it says "probably". (Under bubblewrap a path outside the view does not exist at all,
so `No such file or directory` is not taken as a denial: it is far more often just that.)
"""

from __future__ import annotations

from typing import Final

__all__ = ["sandbox_note"]

_NETWORK: Final = ("network is unreachable", "could not resolve host", "temporary failure in name resolution",
                   "name or service not known", "couldn't connect to server", "no address associated with hostname")
_DENIED: Final = ("permission denied", "operation not permitted")
_READ_ONLY: Final = "read-only file system"


def _quote(stderr: str, needle: str) -> str:
    start = stderr.lower().index(needle)
    return stderr[start:start + len(needle)]


def sandbox_note(stderr: str, exit_code: int | None, sandbox: str, network: bool) -> str | None:
    """The note for a command that failed (`exit_code` non-zero) in `sandbox` ("none": not confined), or None."""
    if sandbox == "none" or not exit_code:
        return None
    text = stderr.lower()
    denied = next((d for d in _DENIED if d in text), None)
    if not network:
        said = next((n for n in _NETWORK if n in text), None)
        if said is None and denied is not None and ("connect" in text or "socket" in text):
            said = denied
        if said is not None:
            return (f'the command probably tried to use the network (stderr says "{_quote(stderr, said)}"), which '
                    "the sandbox gives commands no access to; an operator can allow it with commands.network: true")
    if _READ_ONLY in text:
        return (f'the command probably wrote where the sandbox allows only reading (stderr says "'
                f'{_quote(stderr, _READ_ONLY)}"): commands write only in writable roots, their temp directory, '
                "commands.write_paths and allowed_cwd_roots; an operator can add the folder to commands.write_paths")
    if denied is not None:
        return (f'the sandbox may have refused this (stderr says "{_quote(stderr, denied)}"): commands read only '
                "the system directories, the roots and commands.read_paths, and write only in writable roots, "
                "commands.write_paths and allowed_cwd_roots; an operator can add the folder to commands.read_paths "
                "(read and run) or commands.write_paths (write), or to allowed_cwd_roots (a work area)")
    return None
