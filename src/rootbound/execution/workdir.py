"""Where a command starts: the working directory, opened once and checked on the handle that will be used.

Two ways to name it:

* `root` + a relative path: resolved beneath that root's directory handle exactly
  like a file tool path (`path resolves outside root boundary` on escape);
* a plain `cwd`: absolute, or relative to the project directory (the first client
  root, else `project_dir`, else the server's working directory); omitted means
  the project directory itself (seed 000).

Either way the directory is opened first and its canonical path is read back from
the open handle, so the `ALLOWED_CWD_ROOTS` containment check (seed 000: canonical
paths, symlinks resolved) is made on the very directory the child will enter:
it starts in `/proc/self/fd/N`, not in a path that could be swapped meanwhile.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping
from dataclasses import dataclass

from rootbound.errors import Denied, ToolError
from rootbound.fs import Kinds, Root, display_path, split_path

__all__ = ["WorkDir", "cwd_roots", "open_workdir"]


@dataclass
class WorkDir:
    fd: int
    path: str  # canonical host path (the child's PWD; for the operator's audit log)
    shown: str  # how results name it: the host path, or "root:relative/path"

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self.fd)


def cwd_roots(entries: list[str]) -> list[str]:
    """The canonical allowed cwd roots; a root that cannot be resolved is a configuration error (seed 000)."""
    resolved = []
    for entry in entries:
        try:
            real = os.path.realpath(entry, strict=True)
        except OSError:
            real = None
        if real is None or not os.path.isdir(real):
            raise ToolError(f"configuration error in ALLOWED_CWD_ROOTS (commands.allowed_cwd_roots): {entry} cannot be "
                            "resolved to an existing directory, so no working directory can be checked; commands "
                            "are refused until the operator fixes the setting")
        resolved.append(real)
    return resolved


def _canonical(fd: int) -> str:
    return os.readlink(f"/proc/self/fd/{fd}")


def _open_host(project_dir: str, cwd: str | None) -> tuple[int, str]:
    if cwd is not None and "\x00" in cwd:
        raise ToolError("invalid cwd: contains a null byte")
    target = os.path.join(project_dir, cwd) if cwd else project_dir
    shown = cwd or project_dir
    try:
        return os.open(target, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC), shown
    except FileNotFoundError:
        raise ToolError(f"cwd does not exist: {shown}; nothing was run") from None
    except NotADirectoryError:
        raise ToolError(f"cwd is not a directory: {shown}; nothing was run") from None
    except PermissionError:
        raise ToolError(f"cwd is not accessible: {shown}; nothing was run") from None
    except OSError as exc:
        raise ToolError(f"cwd cannot be opened: {shown}: {exc.strerror}; nothing was run") from None


def open_workdir(roots: Mapping[str, Root], project_dir: str, cwd: str | None, root: str | None,
                 allowed_cwd_roots: list[str]) -> WorkDir:
    """Open and check the working directory; the caller closes the returned `WorkDir`."""
    # Checked first: a broken setting must refuse every request, whatever its cwd.
    allowed = cwd_roots(allowed_cwd_roots)
    if root is not None:
        base = roots.get(root)
        if base is None:
            raise ToolError(f"unknown root: {root}; roots: {', '.join(roots)}")
        base.check_available()
        fd = base.open(cwd or "", Kinds.DIRECTORY).fd
        shown = f"{root}:{display_path(split_path(cwd or ''))}"
    else:
        fd, shown = _open_host(project_dir, cwd)
    try:
        path = _canonical(fd)
        if allowed and not any(os.path.commonpath([a, path]) == a for a in allowed):
            raise Denied(f"cwd not allowed: {shown} is outside the allowed working directories "
                         f"({', '.join(allowed_cwd_roots)}); nothing was run")
    except BaseException:
        os.close(fd)
        raise
    return WorkDir(fd, path, shown)
