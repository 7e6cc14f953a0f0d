"""Start-up checks of the roots, before anything listens: the server's own files, which roots must not hold;
roots that are `/` or a home directory; and roots inside other roots.

An agent that can write the Python environment running this server — its virtual
environment, the interpreter, the `rootbound` package, a directory on its import path —
can change the server's own code: a line appended to `.venv/bin/activate`, a `.pth` file
in `site-packages`, an edited `src/rootbound/...` all run the next time someone starts
it, as the operator and outside every sandbox. So no *writable* root (one whose file
tools include a writing tool; commands may write those too) and no write area of
commands may contain them, unless the operator sets `allow_self_modification: true`.
Serving `/` is the operator's explicit choice of everything and is only warned about.

Roots that are `/` or a home directory, or hold one, are served with a loud warning:
shell start-up files, `~/.ssh`, `~/.gitconfig` and every project of that user are in reach.

Roots inside other roots: a root is only as read-only as every root that contains it: a "read-only"
root nested in a writable one can still be changed through the outer root's file tools (and by commands
under Landlock alone, which cannot carve a read-only subtree out of a writable one). `check` and the
startup log warn about it (`nesting_warnings`).
"""

from __future__ import annotations

import os
import pwd
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from rootbound.catalogue import FILE_TOOLS
from rootbound.fs import Root
from rootbound.sandbox.layout import WRITING_TOOLS, is_under

if TYPE_CHECKING:
    from rootbound.config import Config

__all__ = ["OwnCode", "describe_reach", "holds_own_code", "nesting_warnings", "own_code", "refusals",
           "sandbox_refusals", "warnings"]

ALTERNATIVES = ("install rootbound outside the directories you serve (`pipx install /path/to/rootbound`, or a "
                "virtual environment outside the project: `python3 -m venv ~/.venvs/rootbound && "
                "~/.venvs/rootbound/bin/pip install /path/to/rootbound`), or make the root read-only (allowed_tools "
                "without writing tools), or set `allow_self_modification: true` in the configuration if the agent "
                "is really meant to change the server's own code")


@dataclass(frozen=True)
class OwnCode:
    what: str  # for the operator: "the Python environment running rootbound (sys.prefix)"
    path: str  # real host path
    within: bool  # a root *inside* it is refused too (code directories; not whole prefixes such as /usr)


def own_code() -> list[OwnCode]:
    """Where this server's code comes from."""
    import rootbound

    found = [
        OwnCode("the Python environment running rootbound (sys.prefix)", os.path.realpath(sys.prefix),
                sys.prefix != sys.base_prefix),
        OwnCode("the Python installation (sys.base_prefix)", os.path.realpath(sys.base_prefix), False),
        OwnCode("the Python interpreter", os.path.realpath(sys.executable), False),
        OwnCode("the rootbound package", os.path.dirname(os.path.realpath(rootbound.__file__)), True),
    ]
    prefixes = (found[0].path, found[1].path)
    for entry in sys.path:
        if entry and os.path.isdir(entry):
            real = os.path.realpath(entry)
            # A root inside site-packages or the standard library holds imported code; one inside a
            # PYTHONPATH directory such as a home directory does not, unless it contains the entry itself.
            found.append(OwnCode("a directory on rootbound's import path (sys.path)", real,
                                 any(is_under(real, p) for p in prefixes)))
    cwd = getattr(rootbound, "_cwd_on_import_path", None)  # set by __main__ for `python -m rootbound`
    if cwd is not None:
        found.append(OwnCode("the current directory, which `python -m` puts first on the import path (start the "
                             "server as `rootbound` or `python -P -m rootbound` instead)", cwd, False))
    return found


def holds_own_code(path: str) -> OwnCode | None:
    """The first piece of this server's code that the directory `path` (a real path) contains or lies in."""
    if path == "/":
        return None  # serving everything is explicit, and warned about
    for own in own_code():
        if is_under(own.path, path) or (own.within and is_under(path, own.path)):
            return own
    return None


def _writable_places(config: Config) -> list[tuple[str, str]]:
    """(description, real path) of every directory the agent may write: writable roots, commands' write areas."""
    places = []
    for root in config.roots:
        tools = set(FILE_TOOLS) if "*" in root.allowed_tools else set(root.allowed_tools)
        if tools & WRITING_TOOLS:
            places.append((f"root {root.name!r}", os.path.realpath(root.path)))
    c = config.commands
    if c.allowed and c.sandbox != "off":
        # allowed_cwd_roots are work areas commands may write (SPEC v2).
        places += [(f"commands.write_paths entry {p!r}", os.path.realpath(p)) for p in c.write_paths]
        places += [(f"commands.allowed_cwd_roots entry {p!r}", os.path.realpath(p)) for p in c.allowed_cwd_roots]
    return places


def _journal_dirs(config: Config) -> list[str]:
    """The directories the change journal may live in (real paths): journal.dir, or <each state directory>/journal."""
    from rootbound.fs import recovery  # the state directories the journal's default lies in

    if config.journal.dir:
        return [os.path.realpath(config.journal.dir)]
    bases = [config.state_dir] if config.state_dir else recovery.default_state_dirs()
    return [os.path.realpath(os.path.join(b, "journal")) for b in bases]


def journal_refusals(config: Config) -> list[str]:
    """Roots that are, or lie in, a directory the change journal may use: it keeps old contents of every root's
    files, so it must stay out of the agent's reach. (A root holding journal.dir or state_dir is a configuration
    error already; a root holding a default state directory makes the journal choose the next one.)"""
    if not config.journal.enabled:
        return []
    out = []
    for root in config.roots:
        real = os.path.realpath(root.path)
        journal = next((d for d in _journal_dirs(config) if is_under(real, d)), None)
        if journal is not None:
            out.append(f"root {root.name!r} ({real}) lies in the change journal's directory {journal}: the journal "
                       "keeps old contents of every root's files and must stay out of the agent's reach. To fix: "
                       "serve another directory, or set journal.dir outside every root")
    return out


def _private_dirs(config: Config) -> list[tuple[str, str]]:
    """(what, real path) of the server's private directories: every state directory it may use (recovery records,
    and the journal's default home) and journal.dir."""
    from rootbound.fs import recovery

    bases = [config.state_dir] if config.state_dir else recovery.default_state_dirs()
    out = [("the server's state directory (state_dir)", os.path.realpath(b)) for b in bases]
    if config.journal.enabled and config.journal.dir:
        out.append(("the change journal's directory (journal.dir)", os.path.realpath(config.journal.dir)))
    return out


def sandbox_refusals(config: Config) -> list[str]:
    """Commands' read paths, write paths and work areas that contain or lie in a private directory of the server:
    sandboxed commands could read the journal's old contents of every root's files, or forge its records."""
    c = config.commands
    if not c.allowed or c.sandbox == "off":
        return []  # no command runs, or none is confined: these keys grant nothing
    entries = [(f"commands.{key}", p) for key in ("read_paths", "write_paths", "allowed_cwd_roots")
               for p in getattr(c, key)]
    out = []
    for key, entry in entries:
        real = os.path.realpath(os.path.expanduser(entry))
        if key == "commands.allowed_cwd_roots" and real == "/":
            continue  # not a work area: it only lifts the working-directory check (sandbox/layout.work_areas)
        for what, private in _private_dirs(config):
            if is_under(private, real) or is_under(real, private):
                setting = "journal.dir" if "journal.dir" in what else "state_dir"
                if is_under(private, real):
                    fix = f"name narrower directories in {key} that leave it out, or set {setting} outside {real}"
                    relation = "contains"
                else:
                    fix = "remove the entry: the server's own records are never for commands to read"
                    relation = "lies inside"
                out.append(f"{key} entry {entry!r} ({real}) {relation} {what} at {private}: sandboxed commands "
                           "could read the old contents of the roots' files kept there, or change the server's "
                           f"records. To fix: {fix}")
                break
    return out


def refusals(config: Config) -> list[str]:
    """Why this configuration must not be served (empty: it may)."""
    out = journal_refusals(config) + sandbox_refusals(config)
    if config.allow_self_modification:
        return out
    for where, path in _writable_places(config):
        own = holds_own_code(path)
        if own is not None:
            relation = "contains" if is_under(own.path, path) else "lies inside"
            out.append(f"{where} ({path}) is writable by the agent and {relation} {own.what} at {own.path}: the "
                       "agent could change the server's own code, which runs the next time the server starts, "
                       f"outside every sandbox. To fix: {ALTERNATIVES}")
    return out


def _homes() -> dict[str, list[str]]:
    """Home directory (real path) -> the users who have it, from the password database and $HOME."""
    homes: dict[str, list[str]] = {}
    entries = [(u.pw_name, u.pw_dir) for u in pwd.getpwall()]
    if os.environ.get("HOME"):
        entries.append(("$HOME", os.environ["HOME"]))
    for user, home in entries:
        if home and os.path.isdir(home):
            real = os.path.realpath(home)
            if real != "/":
                homes.setdefault(real, []).append(user)
    return homes


def describe_reach(path: str) -> str | None:
    """Why serving `path` deserves a warning: it is `/`, a home directory, or holds some; None otherwise."""
    if path == "/":
        return ("is / (the whole filesystem: every user's files, the system, and this server's own installation "
                "are within the agent's reach)")
    homes = _homes()
    if path in homes:
        return f"is the home directory of {', '.join(homes[path])} (shell start-up files, ~/.ssh, ~/.gitconfig)"
    inside = sorted({u for home, users in homes.items() if is_under(home, path) for u in users})
    if inside:
        shown = ", ".join(inside[:5]) + (f" and {len(inside) - 5} more" if len(inside) > 5 else "")
        return f"holds the home directories of {shown} (shell start-up files, ~/.ssh, ~/.gitconfig)"
    return None


def warnings(config: Config) -> list[str]:
    """Loud warnings about roots that reach too far (they are still served)."""
    out = []
    for root in config.roots:
        reach = describe_reach(os.path.realpath(root.path))
        if reach is not None:
            out.append(f"root {root.name!r} {reach}; serve a project directory instead where you can")
    return out


# -- roots inside other roots ---------------------------------------------------------------------


def _writable(root: Root) -> bool:
    return bool(root.allowed_tools & WRITING_TOOLS)


def nesting_warnings(roots: Iterable[Root]) -> list[str]:
    """One sentence per read-only root that a writable root contains, or that contains a writable root."""
    roots = list(roots)
    warnings = []
    for inner in roots:
        for outer in roots:
            if inner is outer or not is_under(inner.real_path, outer.real_path) or _writable(inner) == \
                    _writable(outer):
                continue
            if _writable(outer):
                warnings.append(f"root {inner.name!r} is read-only, but it lies inside the writable root "
                                f"{outer.name!r}, through which the agent's file tools can still change it; "
                                f"move it out of {outer.name!r}, or narrow {outer.name!r} to the folders that "
                                "should be writable")
            else:
                warnings.append(f"root {outer.name!r} is read-only, but it contains the writable root "
                                f"{inner.name!r}: that part of {outer.name!r} can change")
    return warnings
