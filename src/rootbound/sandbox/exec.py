"""The launcher that runs inside bubblewrap, between its setup and the command.

bubblewrap needs `mount`, which Landlock forbids, so Landlock cannot be applied
before bubblewrap starts; this small program applies it afterwards, inside:

    python -I -S -c BOOT [options] -- EXECUTABLE ARGV0 ARGS...

options (all repeatable but --cwd/--net/--abi):
    --cwd DEV:INO    the working directory must be this inode (it was checked on a handle
                     in the server; bubblewrap enters it by path, so a swap is caught here)
    --bound MODE:DEV:INO:PATH   bubblewrap bound this inode (by descriptor) at PATH; it resolved
                     PATH itself, so a symlink swapped in could have sent the mount elsewhere:
                     PATH, looked up without following any symlink, must be a mount of that
                     inode, read-only when MODE is ro, or nothing is run
    --limit RES:VAL  setrlimit(RES, (VAL, VAL))
    --user UID:GID:G1,G2   become this user (bubblewrap runs as root and keeps only CAP_SETUID/SETGID
                     for this), then drop every capability
    --mkdir PATH     create this directory (the private HOME), owned by the user the command runs as
    --read PATH / --write PATH / --device PATH / --list PATH    Landlock rules
    --net 0|1        allow TCP
    --abi N          apply Landlock at this ABI (0: not at all)
    --seccomp KINDS  install the seccomp filter (`seccomp.py`), comma-separated: `sockets` (network off: every
                     socket Landlock cannot police, UNIX ones included), `setid` (chmod to set-uid/gid),
                     `metadata` (any chmod, xattr writes)

It then executes the command in place (same process). It imports nothing heavy:
every millisecond here is paid by every command.
"""

from __future__ import annotations

import _signal  # type: ignore[import-not-found]  # not `signal`, which imports enum: every command pays
import os
import resource
import sys

from rootbound.sandbox import creds, landlock, nofollow, seccomp

TYPE_CHECKING = False  # see landlock.py: the launcher must not import typing
if TYPE_CHECKING:
    from typing import NoReturn

__all__ = ["main"]

_MOVED = ("a root or a protected path changed while the sandbox was being built (renamed, or replaced by a symbolic "
          "link), so it could not be confined as checked; nothing was run. Try again")


def _fail(message: str, code: int = 126) -> NoReturn:
    os.write(2, f"rootbound sandbox: {message}\n".encode(errors="replace"))
    os._exit(code)


def _parse(args: list[str]) -> tuple[dict[str, list[str]], list[str]]:
    options: dict[str, list[str]] = {}
    i = 0
    while i < len(args) and args[i] != "--":
        if not args[i].startswith("--") or i + 1 >= len(args):
            _fail(f"bad launcher argument {args[i]!r}")
        options.setdefault(args[i][2:], []).append(args[i + 1])
        i += 2
    return options, args[i + 1:]


def _mount_id(fd: int) -> bytes:
    info = os.open(f"/proc/self/fdinfo/{fd}", os.O_RDONLY | os.O_CLOEXEC)
    try:
        text = os.read(info, 4096)
    finally:
        os.close(info)
    return text.split(b"mnt_id:", 1)[1].split(b"\n", 1)[0].strip()


def _check_bound(item: str) -> None:
    mode, dev, ino, path = item.split(":", 3)
    try:
        parent, entry = nofollow.open_path(path)
    except OSError:
        _fail(_MOVED)
    try:
        st = os.fstat(entry)
        landed = (f"{st.st_dev}:{st.st_ino}" == f"{dev}:{ino}" and _mount_id(entry) != _mount_id(parent)
                  and (mode != "ro" or os.fstatvfs(entry).f_flag & os.ST_RDONLY))
    finally:
        os.close(parent)
        os.close(entry)
    if not landed:
        _fail(_MOVED)


def _make_home(path: str) -> None:
    """The private HOME: new, or one this user already made in this /tmp (never someone else's, never a link)."""
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        st = os.stat(path, follow_symlinks=False)
        if (st.st_mode & 0o170000) != 0o040000 or st.st_uid != os.geteuid():
            _fail(f"{path} exists and is not this user's directory")


def _run(args: list[str]) -> None:
    options, command = _parse(args)
    if len(command) < 2:
        _fail("no command given")
    for want in options.get("cwd", []):
        st = os.stat(".")
        if f"{st.st_dev}:{st.st_ino}" != want:
            _fail("the working directory changed between the check and the start; nothing was run")
    for item in options.get("bound", []):  # before the user switch: CAP_DAC_READ_SEARCH sees every path
        _check_bound(item)
    for item in options.get("limit", []):
        res, value = (int(v) for v in item.split(":"))
        resource.setrlimit(res, (value, value))
    abi = int(options.get("abi", ["0"])[0])
    ruleset = None
    if abi:  # built before the user switch: the rules' paths are opened with the launcher's permissions
        rules = ([landlock.Rule(landlock.FS_READ, path=p) for p in options.get("read", [])]
                 + [landlock.Rule(landlock.FS_WRITE, path=p) for p in options.get("write", [])]
                 + [landlock.Rule(landlock.FS_DEVICE, path=p) for p in options.get("device", [])]
                 + [landlock.Rule(landlock.READ_DIR, path=p) for p in options.get("list", [])])
        ruleset = landlock.build(rules, network=options.get("net", ["0"])[0] == "1", level=landlock.Support(abi))
    for item in options.get("user", []):
        uid, gid, groups = item.split(":")
        # This process has a single thread, so the C library's calls are fine here.
        os.setgroups([int(g) for g in groups.split(",") if g])
        os.setresgid(int(gid), int(gid), int(gid))
        os.setresuid(int(uid), int(uid), int(uid))
    creds.drop_capabilities()
    for path in options.get("mkdir", []):
        _make_home(path)
    kinds = {kind for value in options.get("seccomp", []) for kind in value.split(",")}
    if kinds - {"base", "sockets", "setid", "metadata"}:  # base: io_uring, leases, keyrings refused (in every filter)
        _fail(f"bad --seccomp {','.join(sorted(kinds))}")
    if kinds:
        seccomp.restrict_thread(sockets="sockets" in kinds, metadata="metadata" in kinds, setid="setid" in kinds)
    if ruleset is not None:
        landlock.enforce(ruleset)
    executable, argv = command[0], command[1:]
    # Python ignores these itself; an ignored disposition survives exec (`yes | head` would then see EPIPE).
    for name in ("SIGPIPE", "SIGXFSZ", "SIGXFZ"):
        if hasattr(_signal, name):
            _signal.signal(getattr(_signal, name), _signal.SIG_DFL)
    try:
        os.execve(executable, argv, os.environ)
    except FileNotFoundError:
        _fail(f"{argv[0]}: not found", 127)
    except OSError as exc:
        _fail(f"cannot execute {argv[0]}: {exc.strerror}")


def main() -> None:
    try:
        _run(sys.argv[1:])
    except OSError as exc:  # never run the command half-confined
        _fail(f"cannot confine the command: {exc}")
