"""The compiled launcher (`exec_helper.c`): built once per server process from the package's own source.

Starting Python inside every sandbox costs 10-40 ms per command; the C launcher does the same checks and
restrictions in well under a millisecond. It is compiled with the machine's C compiler (`cc`) into a new
private directory, read into memory and the directory removed: bubblewrap gets the bytes through a pipe
(`--file`), so no file on disk is trusted after the build. Without a compiler (or if the build fails) the
Python launcher (`exec.py`) is used, as before. It stays dynamically linked: a static build with glibc is
about 680 KB (the dynamic one 19 KB), and copying that into every sandbox through `--file` cost more (+0.7 ms
per bubblewrap command, same run) than the dynamic loader it saves (0.1-0.15 ms per exec).

Under Landlock alone the same program sets the resource limits (per process: a thread cannot set them) and
executes the command: the restricted thread runs it from a sealed in-memory copy (`executable`), one small
exec where util-linux's `prlimit` (which it replaces when it can be built) cost about 3 ms per command.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import os
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path

__all__ = ["PATH", "SUPERVISOR_PATH", "executable", "helper_bytes", "prepare", "stage", "supervisor_bytes"]

PATH = "/.rootbound-exec"  # where it appears in the sandbox: on bubblewrap's own root, outside every bind
SUPERVISOR_PATH = "/.rootbound-supervisor"  # the command supervisor (`supervisor.c`), beside it
_SOURCE = Path(__file__).with_name("exec_helper.c")
_SUPERVISOR_SOURCE = Path(__file__).with_name("supervisor.c")
_PIPE_SIZE = 1 << 16  # what a pipe holds without a reader (the helper is about 15 KB)

_MFD_EXEC = 0x10  # (Linux >= 6.3: executable memfd, said explicitly; older kernels refuse the flag)
_SEALS = fcntl.F_SEAL_SEAL | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_WRITE

_lock = threading.Lock()
_built: list[bytes | None] = []
_built_supervisor: list[bytes | None] = []
_sealed: list[int | None] = []
_building: list[threading.Thread] = []


def _compile(source: Path = _SOURCE) -> bytes | None:
    compiler = shutil.which("cc", path="/usr/bin:/bin:/usr/local/bin") or shutil.which(
        "gcc", path="/usr/bin:/bin:/usr/local/bin")
    if compiler is None or not source.is_file():
        return None
    with tempfile.TemporaryDirectory(prefix="rootbound-helper-") as tmp:
        out = os.path.join(tmp, "exec-helper")
        nice = shutil.which("nice", path="/usr/bin:/bin")  # at server start: leave the CPU to the server first
        try:
            done = subprocess.run([*([nice, "-n", "19"] if nice else []), compiler, "-O2", "-s", "-o", out,
                                   str(source)], capture_output=True,
                                  timeout=60, cwd=tmp, env={"PATH": "/usr/bin:/bin:/usr/local/bin"})
        except (OSError, subprocess.SubprocessError):
            return None
        if done.returncode != 0:
            return None
        data = Path(out).read_bytes()
    return data if 0 < len(data) < _PIPE_SIZE else None


def helper_bytes() -> bytes | None:
    """The compiled launcher (built on first use, then kept), or None when it cannot be built here."""
    with _lock:
        if not _built:
            _built.append(_compile())
        return _built[0]


def supervisor_bytes() -> bytes | None:
    """The compiled command supervisor (`supervisor.c`, built on first use, then kept), or None when it cannot be
    built here (bubblewrap then runs once per command, as before)."""
    with _lock:
        if not _built_supervisor:
            _built_supervisor.append(_compile(_SUPERVISOR_SOURCE))
        return _built_supervisor[0]


def executable() -> int | None:
    """A descriptor of a sealed in-memory copy of the compiled launcher, executable as `/proc/self/fd/N` (kept for
    the life of the process), or None when it cannot be built here."""
    data = helper_bytes()
    with _lock:
        if not _sealed:
            _sealed.append(None if data is None else _seal(data))
        return _sealed[0]


def _seal(data: bytes) -> int | None:
    """`data` in a memfd nobody can change any more (no write, grow, shrink, or new seal)."""
    try:
        fd = os.memfd_create("rootbound-exec", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING | _MFD_EXEC)
    except OSError:
        try:
            fd = os.memfd_create("rootbound-exec", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        except OSError:
            return None
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, _SEALS)
    except OSError:
        with contextlib.suppress(OSError):
            os.close(fd)
        return None
    return fd


def prepare(*, supervisor: bool = False) -> None:
    """Build it (and the command supervisor, for bubblewrap) in the background at server start, so the first
    command does not wait for the compiler."""
    if _built or _building:
        return

    def build() -> None:
        helper_bytes()
        if supervisor:
            supervisor_bytes()

    thread = threading.Thread(target=build, name="rootbound-helper-build", daemon=True)
    _building.append(thread)
    thread.start()
    # A server stopped during the build still removes the build directory (daemon threads are cut at exit).
    atexit.register(thread.join, 60)


def stage(data: bytes) -> int:
    """A pipe's read end holding `data` (for bubblewrap's `--file FD` / `--seccomp FD`); the caller closes it."""
    read, write = os.pipe()
    try:
        if os.write(write, data) != len(data):  # (an empty pipe takes up to 64 KB in one write)
            raise OSError("could not stage the sandbox launcher")
    except BaseException:
        os.close(read)
        raise
    finally:
        os.close(write)
    return read
