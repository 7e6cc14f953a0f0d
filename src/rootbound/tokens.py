"""Which roots each HTTP bearer token reaches (`auth_tokens[].roots`), and what in a configuration would let
a token's commands reach further than its roots.

A token with `roots` sees only those operator roots: the App gives its calls that set of roots (the
file tools, `list_roots`, the client roots a session may narrow to, and the roots a command's sandbox
mounts) and a project directory inside them. What the sandbox shows besides the roots is the operator's,
shared by every token: `commands.allowed_cwd_roots` work areas, `read_paths`, `write_paths`; so `check`
and the HTTP server's start-up warn when one of those (or a root the token does see) holds a root the
token does not, or when commands run with no sandbox at all.
"""

from __future__ import annotations

import os

from rootbound.config import Config, TokenConfig
from rootbound.fs import RootSet
from rootbound.sandbox.layout import is_under

__all__ = ["describe_tokens", "reach", "reach_warnings", "start_dir"]


def reach(roots: RootSet, names: list[str] | None) -> RootSet:
    """The roots a token with `roots: names` sees (all of them for None), in the operator's order."""
    if names is None:
        return roots
    return RootSet(r for r in roots.values() if r.name in names)


def start_dir(reached: RootSet, project_dir: str) -> str:
    """Where a restricted token's relative command working directories start: `project_dir` when it lies in one of
    the token's roots, else the first of them (never a directory of someone else's root)."""
    real = os.path.realpath(project_dir)
    if any(is_under(real, r.real_path) for r in reached.values()):
        return project_dir
    return next(iter(reached.values())).real_path


def describe_tokens(config: Config) -> list[dict[str, object]]:
    """Each token by name with the roots it reaches, for `rootbound check` (never the token itself)."""
    return [{"name": t.name, "roots": t.roots if t.roots is not None else [r.name for r in config.roots],
             "all_roots": t.roots is None} for t in config.tokens]


def reach_warnings(config: Config) -> list[str]:
    """One sentence per way a restricted token's calls could reach a root it is not given (names, no host paths)."""
    warnings: list[str] = []
    restricted = [t for t in config.tokens if t.roots is not None]
    if not restricted:
        return warnings
    if config.commands.allowed and config.commands.sandbox == "off":
        warnings.append(f"token(s) {', '.join(repr(t.name) for t in restricted)} are limited to some roots, but "
                        "commands.sandbox is off: their commands can read and write every path the server can, "
                        "the other roots included; turn the sandbox on (commands.sandbox: auto), or enable no "
                        "commands on this server")
    for token in restricted:
        warnings.extend(_widened(config, token))
    return warnings


def _widened(config: Config, token: TokenConfig) -> list[str]:
    real = {r.name: os.path.realpath(r.path) for r in config.roots}
    others = [(name, path) for name, path in real.items() if name not in (token.roots or ())]
    places = [(f"root {name!r}", path) for name, path in real.items() if name in (token.roots or ())]
    if config.commands.allowed:
        c = config.commands
        for key, entries in (("allowed_cwd_roots", c.allowed_cwd_roots), ("read_paths", c.read_paths),
                             ("write_paths", c.write_paths)):
            places += [(f"commands.{key}[{i}]", os.path.realpath(os.path.expanduser(e))) for i, e in enumerate(entries)]
    found = []
    for place, path in places:
        for name, other in others:
            if is_under(other, path) or (place.startswith("commands.") and is_under(path, other)):
                found.append(f"token {token.name!r} is limited to root(s) {', '.join(token.roots or ())}, but "
                             f"{place} {'contains' if is_under(other, path) else 'lies inside'} root {name!r}, "
                             f"which it can reach that way; keep the token's roots and the commands' paths apart "
                             f"from the other roots")
    return found
