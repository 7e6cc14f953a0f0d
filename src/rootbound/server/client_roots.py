"""Client roots (MCP `roots`): how a client narrows or names the workspace, per connection.

The operator's roots are the fence. A client that declares the `roots` capability
on a handshake-era connection (stdio, stateful HTTP) is asked for its roots after
`notifications/initialized` and again on `notifications/roots/list_changed`. Each
`file://` URI becomes a named root, under the policy `client_roots`:

* `within` (default): accepted only inside an operator root, opened *beneath that
  root's handle* and given its allowlist; the accepted roots replace the operator
  roots for this connection (a narrowing). None accepted: the operator roots stay.
* `replace`: the client's directories become the roots, all file tools allowed
  (desktop use, as the reference filesystem server does) — except one that holds
  the server's own installation (`preflight.py`; `allow_self_modification`).
* `off`: ignored.

The first accepted client root is the connection's project directory. Requests of
the sessionless 2026-07-28 protocol cannot be asked anything, so they always get
the operator's roots (roots are deprecated there: SEP-2577).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal
from urllib.parse import unquote, urlsplit

from rootbound import preflight
from rootbound.errors import PathError
from rootbound.fs import Root, RootSet
from rootbound.fs.root import host_directory
from rootbound.journal.settings import inside
from rootbound.logs import log

__all__ = ["ClientRootsState", "Policy", "build_client_roots"]

Policy = Literal["off", "within", "replace"]


@dataclass
class ClientRootsState:
    """What one connection's client said about its roots."""

    roots: RootSet | None = None  # None: use the operator's roots
    project_dir: str | None = None
    answered: bool = False  # an answer (or a definitive failure) is recorded; no need to ask mid-call
    # Handles opened for this connection, by (name, real path): reused across refreshes so a
    # client that keeps sending list_changed cannot exhaust descriptors, and never closed while
    # a call might still use them (only when the connection ends).
    opened: dict[tuple[str, str], Root] = field(default_factory=dict)

    def close(self) -> None:
        for root in self.opened.values():
            root.close()
        self.opened.clear()


def uri_to_path(uri: str) -> str | None:
    """A `file://` URI to a host path, percent-decoded exactly once; None for anything else."""
    parts = urlsplit(uri)
    if parts.scheme != "file" or parts.netloc not in ("", "localhost"):
        return None
    path = unquote(parts.path)
    if not path.startswith("/") or "\x00" in path:
        return None
    return path


def _unique(name: str, taken: set[str]) -> str:
    candidate, n = name, 2
    while candidate in taken:
        candidate, n = f"{name}-{n}", n + 1
    taken.add(candidate)
    return candidate


def _enclosing(operator: RootSet, real: str) -> Root | None:
    """The operator root that contains `real` (component-wise, never a string prefix)."""
    best: Root | None = None
    for root in operator.values():
        if os.path.commonpath([root.real_path, real]) == root.real_path and (
            best is None or len(root.real_path) > len(best.real_path)
        ):
            best = root
    return best


def _open_within(operator: RootSet, name: str, real: str, state: ClientRootsState) -> Root | None:
    parent = _enclosing(operator, real)
    if parent is None:
        log.warning("client root refused: outside every operator root", extra={"client_root": name})
        return None
    key = (name, real)
    if key in state.opened:
        return state.opened[key]
    try:
        root = parent.open_root(name, os.path.relpath(real, parent.real_path), parent.allowed_tools)
    except PathError as exc:
        log.warning("client root refused: cannot open beneath its operator root",
                    extra={"client_root": name, "operator_root": parent.name, "error": exc.kind.value})
        return None
    state.opened[key] = root
    return root


def _open_replace(name: str, real: str, state: ClientRootsState, allow_self_modification: bool) -> Root | None:
    key = (name, real)
    if key in state.opened:
        return state.opened[key]
    own = None if allow_self_modification else preflight.holds_own_code(real)
    if own is not None:  # it would be writable: the agent could change the server's own code
        log.warning("client root refused: it contains rootbound's own installation (set allow_self_modification "
                    "to serve it)", extra={"client_root": name, "contains": own.what})
        return None
    reach = preflight.describe_reach(real)
    if reach is not None:
        log.warning(f"client root {reach}", extra={"client_root": name})
    try:
        root = Root.at(name, real, ["*"])
    except OSError as exc:
        log.warning("client root refused: not an openable directory",
                    extra={"client_root": name, "error": exc.strerror})
        return None
    state.opened[key] = root
    return root


def build_client_roots(policy: Policy, operator: RootSet, roots: Iterable[tuple[str, str | None]],
                       state: ClientRootsState, reserved: set[str] | None = None, *,
                       allow_self_modification: bool = False, journal_dir: str | None = None) -> None:
    """Turn the client's `(uri, name)` pairs into this connection's roots and project directory.

    `reserved`: names a client root may not take (the server adds its `command-output` root itself)."""
    accepted: list[Root] = []
    taken: set[str] = set(reserved or ())
    for uri, given in roots:
        path = uri_to_path(uri)
        if path is None:
            log.info("client root ignored: not a local file:// URI", extra={"uri": uri[:200]})
            continue
        real = host_directory(path)
        if real is None:
            log.warning("client root refused: not a directory", extra={"uri": uri[:200]})
            continue
        if journal_dir is not None and (inside(real, journal_dir) or inside(journal_dir, real)):
            # The journal keeps old contents of every root's files: never in an agent's reach.
            log.warning("client root refused: it is, holds or lies in the change journal's directory (journal.dir)",
                        extra={"uri": uri[:200]})
            continue
        base = (given or "").strip().replace("/", "_") or os.path.basename(real) or "root"
        name = _unique(base, taken)
        if policy == "within":
            root = _open_within(operator, name, real, state)
        else:
            root = _open_replace(name, real, state, allow_self_modification)
        if root is not None:
            accepted.append(root)
    state.roots = RootSet(accepted) if accepted else None
    state.project_dir = accepted[0].real_path if accepted else None
    state.answered = True
    log.info("client roots", extra={"roots": [r.name for r in accepted], "policy": policy})
