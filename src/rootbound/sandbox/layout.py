"""What one sandboxed command may see and change, whichever sandbox enforces it.

* read and execute: the system directories (below), `commands.read_paths`, every
  root, and the work areas;
* write: the writable roots, `commands.write_paths`, the work areas
  (`commands.allowed_cwd_roots`, except parts of roots: a root keeps its own mode), and
  a private temp directory;
* a working directory outside all of these is entered, but nothing in it is visible
  (choosing where to start never widens what a command can reach);
* the program itself, and the programs the allowlist names by absolute path, are
  readable and executable wherever they are (just those files);
* a root is writable for commands when its allowlist holds a file tool that
  writes (write_file, patch_file, create_folder, copy, move, remove_*): a root the
  agent may only read with file tools is read-only for commands too;
* HOME stays the server's HOME when commands may read it, else it points to a
  private directory (tools such as git fail outright on an unreadable HOME).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass

from rootbound.catalogue import WRITING_TOOLS
from rootbound.config import CommandsConfig
from rootbound.execution.launch import Launch
from rootbound.fs import Root

__all__ = ["DEVICES", "SYSTEM_PATHS", "WRITING_TOOLS", "Layout", "is_under", "layout", "work_areas"]

# Programs, libraries and configuration; never home directories, /root, /run (sockets) or /tmp.
SYSTEM_PATHS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/opt", "/sys",
                "/nix/store", "/gnu/store")
DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom")


def is_under(path: str, base: str) -> bool:
    return path == base or path.startswith(base.rstrip("/") + "/")


@dataclass(frozen=True)
class Layout:
    writable: tuple[Root, ...]  # sorted so that a parent comes before the roots nested in it
    readonly: tuple[Root, ...]
    read_paths: tuple[str, ...]  # existing host paths: system directories, then commands.read_paths
    write_paths: tuple[str, ...]
    programs: tuple[str, ...]  # program files outside all of the above (granted read+execute one by one)
    work_areas: tuple[str, ...]  # allowed_cwd_roots outside the roots, without symlinks: read-write for commands
    cwd_visible: bool  # the working directory lies in one of the above (else the command sees nothing in it)
    home: str | None  # the server's HOME when commands can read it

    @property
    def roots(self) -> tuple[Root, ...]:
        return tuple(sorted((*self.writable, *self.readonly), key=lambda r: r.real_path.count("/")))

    def is_writable(self, root: Root) -> bool:
        return root in self.writable


def _existing(paths: Sequence[str]) -> tuple[str, ...]:
    seen: dict[str, None] = {}
    for path in paths:
        if os.path.isabs(path) and os.path.lexists(path):
            seen.setdefault(os.path.normpath(path), None)
    return tuple(seen)


def work_areas(entries: Sequence[str], roots: Sequence[str]) -> tuple[str, ...]:
    """The `allowed_cwd_roots` commands may write, each at its real path, as the cwd check resolves them: not `/`
    (that would be the whole machine: it only lifts the check), not inside a root, and not named through a link
    inside a root, which the agent could point elsewhere."""
    areas: dict[str, None] = {}
    for entry in entries:
        path = os.path.normpath(os.path.expanduser(entry))
        real = os.path.realpath(path)
        if real != path and any(is_under(path, r) for r in roots):
            continue
        if real != "/" and os.path.isdir(real) and not any(is_under(real, r) for r in roots):
            areas.setdefault(real, None)
    return tuple(sorted(areas, key=lambda p: p.count("/")))


def layout(launch: Launch, config: CommandsConfig) -> Layout:
    by_path: dict[str, tuple[Root, bool]] = {}
    for root in launch.roots:
        can_write = bool(root.allowed_tools & WRITING_TOOLS)
        known = by_path.get(root.real_path)
        # The same directory twice (a client root equal to an operator root): writable if either is,
        # which is what the file tools already allow there.
        if known is None or (can_write and not known[1]):
            by_path[root.real_path] = (root, can_write)
    depth = sorted(by_path.values(), key=lambda rw: rw[0].real_path.count("/"))
    writable = tuple(r for r, w in depth if w)
    readonly = tuple(r for r, w in depth if not w)
    read_paths = _existing([*SYSTEM_PATHS, *(os.path.expanduser(p) for p in config.read_paths)])
    write_paths = _existing([os.path.expanduser(p) for p in config.write_paths])
    areas = work_areas(config.allowed_cwd_roots, list(by_path))
    home = launch.env.get("HOME")
    visible = (*read_paths, *write_paths, *areas, *by_path)
    cwd_visible = any(is_under(launch.cwd_path, p) for p in visible)
    wanted = [launch.executable, *launch.programs]
    programs = tuple(p for p in dict.fromkeys(wanted)
                     if os.path.isabs(p) and os.path.isfile(p) and not any(is_under(p, v) for v in visible))
    if home is None or not os.path.isabs(home) or not any(is_under(os.path.normpath(home), p) for p in visible):
        home = None
    return Layout(writable, readonly, read_paths, write_paths, programs, areas, cwd_visible, home)
