"""The filesystem core is the only door: no module outside `rootbound/fs/` resolves a path or makes a path syscall.

Read from the source (an AST walk), over every module of the package but `fs/` itself: the tool handlers,
grep, command execution, the sandbox, the server and client roots, the change journal, the command line
and configuration. A path syscall there would be a second door, where an escape could hide; the file
tools reach files only
through `Root`. The few modules that must work on host paths of their own — the operator's
configuration, the server's own files, /proc, the sandbox's mount namespace — are listed in `ALLOWED`
with the calls they may make and why. The list must stay true: an entry no longer needed fails too.
To add one, name the module, the calls, and the reason.
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src" / "rootbound"
CORE = SRC / "fs"

# Path syscalls: what opens, looks at or changes a file by its name.
_OS = {"open", "stat", "lstat", "mkdir", "rmdir", "unlink", "rename", "renames", "replace", "link", "symlink",
       "readlink", "listdir", "scandir", "chmod", "lchmod", "chown", "lchown", "utime", "remove", "removedirs",
       "makedirs", "walk", "fwalk", "getxattr", "setxattr", "listxattr", "removexattr", "mkfifo", "mknod",
       "truncate", "access", "chdir", "chroot", "statvfs", "pathconf"}
_OS_PATH = {"exists", "lexists", "isdir", "isfile", "islink", "ismount", "realpath", "getsize", "getmtime",
            "getatime", "getctime", "samefile"}
_SHUTIL = {"rmtree", "copy", "copy2", "copyfile", "copytree", "move", "copymode", "copystat", "chown", "which"}
# rootbound.fs.beneath's: only Root may resolve
_RESOLVERS = {"open_beneath", "locate", "locate_making", "make_dirs", "undo_dirs"}
# rootbound.fs.removal's: removes a tree by name (beneath a descriptor, or a host path)
_REMOVERS = {"remove_tree"}

# module (relative to src/rootbound) -> (the calls it may make, why)
ALLOWED: dict[str, tuple[set[str], str]] = {
    "client_snippets.py": ({"os.access", "os.path.isfile"}, "finds the installed `rootbound` program to name in "
                           "the client snippets it prints"),
    "config.py": ({"open", "os.access", "os.path.exists", "os.path.isdir", "os.path.realpath"},
                  "reads the operator's config file and checks the host paths it names"),
    "preflight.py": ({"os.path.isdir", "os.path.realpath"}, "start-up checks of the operator's roots against the "
                     "server's own installation"),
    "report.py": ({"os.path.exists", "shutil.which"}, "what `check` reports about the programs commands may run"),
    "tokens.py": ({"os.path.realpath"}, "compares the host paths the operator configured (roots, commands' paths) "
                  "to warn when a token limited to some roots could reach another"),
    "outlet.py": ({"os.open"}, "opens the server's own terminal (its stdout or stderr) again, non-blocking, "
                  "through /proc/self/fd: never a path a client names"),
    "server/stdio.py": ({"os.open"}, "points fd 0 at /dev/null once the client's pipe is moved aside"),
    "execution/audit.py": ({"os.open"}, "appends to the operator's audit log, a host path from the configuration"),
    "execution/groups.py": ({"open", "os.listdir", "os.path.exists", "os.stat"},
                            "reads /proc to find and kill the processes of a command"),
    "execution/policy.py": ({"shutil.which", "os.path.realpath"},
                            "finds the allowlisted programs on PATH (host programs, not paths in a root)"),
    "execution/service.py": ({"os.path.exists"}, "checks the resolved program exists before it is run"),
    "leftovers.py": ({"os.stat", "os.listdir", "os.lstat", "remove_tree"},
                     "the temp directories killed servers left (the server's own kind, outside every root)"),
    "execution/spill.py": ({"os.open", "remove_tree", "os.scandir", "os.mkdir", "os.unlink"},
                           "the server's own spill directory, made by the server outside every root"),
    "execution/workdir.py": ({"os.readlink", "os.path.realpath", "os.open", "os.path.isdir"},
                             "a plain cwd is a host path by contract (seed 000), checked against allowed_cwd_roots "
                             "on the opened handle; a root-relative cwd goes through Root.open"),
    # The change journal (issue 17, phase 1: not wired to Root yet, it is handed root descriptors). Its state
    # directory (settings.resolve: a private 0700 host folder outside every root) is not a root: plain os calls.
    "journal/blobs.py": ({"os.link", "os.mkdir", "os.open", "os.rename", "os.scandir", "os.stat", "os.unlink"},
                         "the blob store, a folder in the journal's own state directory (not a root)"),
    "journal/capture.py": ({"os.open", "os.readlink", "os.scandir"},
                           "reads before-states by (directory handle the door holds, single name) with O_NOFOLLOW, "
                           "and walks folders by descriptor (its own walker: a candidate for fs.trees.walk)"),
    "journal/change.py": ({"os.mkdir", "os.open", "os.unlink"},
                          "the writer lock files in the journal's own state directory (not a root)"),
    "journal/cli.py": ({"os.path.realpath", "os.open"},
                       "the journal CLI opens the operator's configured roots by their host paths, as Root.at does"),
    "journal/locks.py": ({"os.open"}, "the per-root lock file in the journal's own state directory (not a root)"),
    "journal/query.py": ({"open_beneath", "os.open"},
                         "reads a file as it is now, for a diff, beneath the root's handle (final name O_NOFOLLOW)"),
    "journal/recovery.py": ({"open_beneath", "os.open", "os.listdir", "os.unlink"},
                            "digests what stands at a recorded path beneath the root's handle; the writer lock "
                            "files in the journal's own state directory"),
    "journal/restore.py": ({"locate", "locate_making", "os.mkdir", "os.open", "os.readlink", "os.rename", "os.rmdir",
                            "os.stat", "os.symlink", "os.unlink", "os.utime"},
                           "undo puts recorded before-states back at recorded paths, resolved beneath the root's "
                           "handle (fs.beneath), each change by (directory handle, single name) with *at calls"),
    "journal/retention.py": ({"os.stat", "os.unlink"}, "prunes the blob store in the journal's own state directory"),
    "journal/settings.py": ({"os.path.realpath"}, "compares the journal's own state directory (a host path from "
                            "the configuration, outside every root) with the roots"),
    "journal/store.py": ({"os.mkdir"}, "a root's journal folder in the journal's own state directory (not a root)"),
    "sandbox/bwrap.py": ({"os.path.realpath", "shutil.which", "os.path.islink", "os.readlink", "open"},
                         "the mount namespace: system paths and operator-configured host paths, bound by descriptor; "
                         "/proc/PID/stat of a sandbox's init"),
    "sandbox/exec.py": ({"os.stat", "os.open", "os.mkdir"},
                        "the launcher inside bubblewrap checks each bind landed where it was meant to"),
    "sandbox/helper.py": ({"shutil.which"}, "finds the C compiler that builds the launcher, in its own temp directory"),
    "sandbox/janitor.py": ({"remove_tree", "os.rmdir"},
                           "removes a finished command's private temp directory (the server's own)"),
    "sandbox/landlock.py": ({"os.open"}, "Landlock rules for system and operator-configured host paths"),
    "sandbox/launchers.py": ({"os.path.realpath", "os.mkdir", "os.chown"},
                             "a command's private temp directory and the operator's work areas"),
    "sandbox/layout.py": ({"os.path.lexists", "os.path.isdir", "os.path.realpath", "os.path.isfile"},
                          "which system and operator-configured host paths exist for a command"),
    "sandbox/limits.py": ({"shutil.which"}, "finds prlimit"),
    "sandbox/nofollow.py": ({"os.open"}, "opens operator host paths without following links (the launcher inside "
                                         "bubblewrap imports it: it may import only what os has)"),
    "sandbox/supervised.py": ({"os.stat", "open", "os.open", "shutil.which"},
                              "identities (dev:ino) of operator-configured host paths; finds util-linux's unshare and "
                              "writes the id maps of the user namespace it made (/proc/PID/uid_map, ns/user)"),
    "sandbox/supervisor.py": ({"open"}, "wraps the command's pipe descriptors as files for the event loop"),
    "sandbox/protect.py": ({"os.open", "os.stat", "os.listdir", "remove_tree", "os.unlink"},
                           "binds git's and protected_paths' entries read-only by descriptor, walking beneath "
                           "Root.handle() one O_PATH|O_NOFOLLOW component at a time, and sweeps what a command "
                           "made there (a candidate for a Root method)"),
}


def _call_name(node: ast.Call) -> str | None:
    f = node.func
    if isinstance(f, ast.Name) and f.id in (*_RESOLVERS, *_REMOVERS, "open"):
        return f.id
    if not isinstance(f, ast.Attribute):
        return None
    owner = f.value
    if isinstance(owner, ast.Name):
        if owner.id == "os" and f.attr in _OS:
            return f"os.{f.attr}"
        if owner.id == "shutil" and f.attr in _SHUTIL:
            return f"shutil.{f.attr}"
        if owner.id == "beneath" and f.attr in _RESOLVERS:
            return f.attr
    if isinstance(owner, ast.Attribute) and isinstance(owner.value, ast.Name) and \
            (owner.value.id, owner.attr) == ("os", "path") and f.attr in _OS_PATH:
        return f"os.path.{f.attr}"
    return None


def path_calls(source: str) -> list[tuple[int, str]]:
    """The path syscalls (and resolver calls) in a module's source, with their lines."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and (name := _call_name(node)) is not None:
            found.append((node.lineno, name))
        elif isinstance(node, ast.ImportFrom) and node.module in ("os", "os.path", "shutil"):
            found += [(node.lineno, f"from {node.module} import {a.name}") for a in node.names]
        elif isinstance(node, ast.ImportFrom) and (node.module or "").endswith("beneath"):
            found += [(node.lineno, a.name) for a in node.names if a.name in _RESOLVERS]
        elif isinstance(node, ast.ImportFrom) and (node.module or "").endswith("removal"):
            found += [(node.lineno, a.name) for a in node.names if a.name in _REMOVERS]
    return found


def _modules() -> list[Path]:
    return [m for m in sorted(SRC.rglob("*.py")) if not m.is_relative_to(CORE)]


def test_no_path_syscall_outside_the_filesystem_core() -> None:
    problems = []
    for module in _modules():
        rel = module.relative_to(SRC).as_posix()
        allowed = ALLOWED.get(rel, (set(), ""))[0]
        problems += [f"{rel}:{line}: {name}" for line, name in path_calls(module.read_text()) if name not in allowed]
    assert problems == [], "path work outside rootbound/fs/ (use a Root method, or justify it in ALLOWED):\n" + \
        "\n".join(problems)


def test_the_allowlist_stays_true() -> None:
    """Every allowed call is still made: a module that no longer needs its entry must lose it."""
    stale = []
    for rel, (calls, why) in ALLOWED.items():
        assert why, f"{rel}: say why"
        module = SRC / rel
        made = {name for _, name in path_calls(module.read_text())} if module.exists() else set()
        stale += [f"{rel}: {name}" for name in sorted(calls - made)]
    assert stale == []


def test_the_check_sees_what_it_must() -> None:
    """The walk itself: each kind of door is found (a check that finds nothing proves nothing)."""
    source = ("import os, shutil\nfrom rootbound.fs.beneath import open_beneath\nfrom os import stat\n"
              "os.open('x', 0)\nos.path.realpath('x')\nshutil.rmtree('x')\nopen('x')\nopen_beneath(3, [], 0)\n"
              "os.stat('x', dir_fd=3)\nos.fstat(3)\nos.close(3)\n"
              "from rootbound.fs.removal import remove_tree\nremove_tree(None, 'x')\n")
    assert sorted(name for _, name in path_calls(source)) == sorted([
        "open_beneath", "from os import stat", "os.open", "os.path.realpath", "shutil.rmtree", "open",
        "open_beneath", "os.stat", "remove_tree", "remove_tree"])  # fd calls (fstat, close) are not path work
