"""Landlock through raw system calls (ctypes; no third-party package): a ruleset for one command, applied to the
calling thread.

Landlock is an unprivileged Linux LSM: a thread builds a ruleset ("these rights are
handled; grant them only beneath these directories"), restricts itself with it, and
every process it starts afterwards inherits the restriction, which can never be lifted.

Rules are handed over as open descriptors (a root's handle, the working directory's
handle) or paths opened here, so a rule covers the inode that was opened. What each
kernel supports is its ABI version; rights a kernel does not know are left out
(best-effort degradation), and `Support` says what is in force:

* ABI 1: file-system rights; 2: REFER (rename/link across directories);
  3: TRUNCATE; 4: TCP bind/connect; 5: IOCTL_DEV; 6: scopes (abstract UNIX sockets,
  signals); 7: audit flags (unused here).

Every call's return value is checked (never a stale `errno`), and any failure raises:
the caller must not run the command unconfined.

This module is also imported by the launcher inside bubblewrap (`exec.py`), which
pays for every import on every command: it uses nothing beyond ctypes and os.
"""

from __future__ import annotations

import ctypes
import errno
import os
import stat

from rootbound.libc import libc

TYPE_CHECKING = False  # not `from typing import ...`: importing typing costs the launcher about 8 ms
if TYPE_CHECKING:
    from collections.abc import Iterable
    from typing import Final

__all__ = ["FS_READ", "FS_WRITE", "LandlockError", "Rule", "Support", "abi_version", "build", "enforce",
           "restrict_thread", "support"]

_SYS_CREATE_RULESET: Final = 444  # the same numbers on every architecture
_SYS_ADD_RULE: Final = 445
_SYS_RESTRICT_SELF: Final = 446
_CREATE_RULESET_VERSION: Final = 1
_RULE_PATH_BENEATH: Final = 1
_PR_SET_NO_NEW_PRIVS: Final = 38

# File-system rights (include/uapi/linux/landlock.h).
EXECUTE: Final = 1 << 0
WRITE_FILE: Final = 1 << 1
READ_FILE: Final = 1 << 2
READ_DIR: Final = 1 << 3
REMOVE_DIR: Final = 1 << 4
REMOVE_FILE: Final = 1 << 5
MAKE_CHAR: Final = 1 << 6
MAKE_DIR: Final = 1 << 7
MAKE_REG: Final = 1 << 8
MAKE_SOCK: Final = 1 << 9
MAKE_FIFO: Final = 1 << 10
MAKE_BLOCK: Final = 1 << 11
MAKE_SYM: Final = 1 << 12
REFER: Final = 1 << 13  # ABI 2
TRUNCATE: Final = 1 << 14  # ABI 3
IOCTL_DEV: Final = 1 << 15  # ABI 5
# Network rights (ABI 4) and scopes (ABI 6).
NET_BIND_TCP: Final = 1 << 0
NET_CONNECT_TCP: Final = 1 << 1
SCOPE_ABSTRACT_UNIX_SOCKET: Final = 1 << 0
SCOPE_SIGNAL: Final = 1 << 1

_FS_BY_ABI: Final = {1: (1 << 13) - 1, 2: (1 << 14) - 1, 3: (1 << 15) - 1, 4: (1 << 15) - 1, 5: (1 << 16) - 1}
# Rights that make sense on a file rule (the kernel refuses directory rights there).
_FILE_RIGHTS: Final = EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE | IOCTL_DEV

FS_READ: Final = EXECUTE | READ_FILE | READ_DIR
# Everything a writable tree needs, except creating device nodes (never granted) and device ioctls.
FS_WRITE: Final = (FS_READ | WRITE_FILE | REMOVE_DIR | REMOVE_FILE | MAKE_DIR | MAKE_REG | MAKE_SOCK | MAKE_FIFO
                   | MAKE_SYM | REFER | TRUNCATE)
FS_DEVICE: Final = READ_FILE | WRITE_FILE | TRUNCATE  # /dev/null and friends


class LandlockError(OSError):
    """The ruleset could not be built or applied; the command must not run."""


class _RulesetAttr(ctypes.Structure):
    _fields_ = (("handled_access_fs", ctypes.c_uint64), ("handled_access_net", ctypes.c_uint64),
                ("scoped", ctypes.c_uint64))


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1  # __attribute__((packed)) in the kernel header: 12 bytes
    _fields_ = (("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32))


_syscall = libc.syscall
_prctl = libc.prctl


def _call(number: int, *args: object) -> int:
    result = int(_syscall(ctypes.c_long(number), *args))
    if result < 0:
        code = ctypes.get_errno()
        raise LandlockError(code, f"landlock syscall {number}: {os.strerror(code)}")
    return result


def abi_version() -> int:
    """The kernel's Landlock ABI; 0 when Landlock is missing or disabled at boot."""
    try:
        return _call(_SYS_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(_CREATE_RULESET_VERSION))
    except LandlockError:
        return 0


class Support:
    """What this kernel's Landlock enforces."""

    def __init__(self, abi: int) -> None:
        self.abi = abi

    @property
    def available(self) -> bool:
        return self.abi >= 1

    @property
    def fs_handled(self) -> int:
        return _FS_BY_ABI.get(self.abi, _FS_BY_ABI[5]) if self.abi else 0

    @property
    def tcp(self) -> bool:
        return self.abi >= 4

    @property
    def scopes(self) -> bool:
        return self.abi >= 6

    def describe(self) -> str:
        if not self.available:
            return "Landlock unavailable (kernel without it, or disabled at boot)"
        parts = ["file system"]
        if self.abi < 2:
            parts.append("no cross-directory rename or link")
        if self.abi < 3:
            parts.append("truncate not covered")
        parts.append("TCP bind/connect" if self.tcp else "no TCP rules (ABI < 4)")
        parts.append("signals and abstract sockets scoped" if self.scopes else "signals not scoped (ABI < 6)")
        return f"Landlock ABI {self.abi}: " + ", ".join(parts)


_SUPPORT: Support | None = None


def support() -> Support:
    global _SUPPORT
    if _SUPPORT is None:
        _SUPPORT = Support(abi_version())
    return _SUPPORT


class Rule:
    """Grant `access` beneath a directory (or on a file): given as an open descriptor or a path."""

    __slots__ = ("access", "fd", "path")

    def __init__(self, access: int, path: str | None = None, fd: int | None = None) -> None:
        self.access, self.path, self.fd = access, path, fd


def _add(ruleset: int, rule: Rule, handled: int) -> None:
    own = rule.fd is None
    if own:
        assert rule.path is not None
        try:
            fd = os.open(rule.path, os.O_PATH | os.O_CLOEXEC)
        except (FileNotFoundError, NotADirectoryError):
            return  # nothing there to grant access to
    else:
        assert rule.fd is not None
        fd = rule.fd
    try:
        access = rule.access & handled
        if not stat.S_ISDIR(os.fstat(fd).st_mode):
            access &= _FILE_RIGHTS
        if access:
            attr = _PathBeneathAttr(access, fd)
            _call(_SYS_ADD_RULE, ctypes.c_int(ruleset), ctypes.c_int(_RULE_PATH_BENEATH), ctypes.byref(attr),
                  ctypes.c_uint32(0))
    finally:
        if own:
            os.close(fd)


def build(rules: Iterable[Rule], *, network: bool, level: Support | None = None) -> int:
    """A ruleset descriptor granting `rules` (paths are opened now, with the caller's permissions).

    Handles every file-system right this kernel knows, TCP bind/connect unless
    `network` (no port is granted: all denied), and both scopes.
    """
    level = level or support()
    if not level.available:
        raise LandlockError(errno.EOPNOTSUPP, "Landlock is not available on this kernel")
    handled_fs = level.fs_handled
    attr = _RulesetAttr(handled_fs, 0, 0)
    size = 8
    if level.tcp:
        size = 16
        if not network:
            attr.handled_access_net = NET_BIND_TCP | NET_CONNECT_TCP
    if level.scopes:
        size = 24
        attr.scoped = SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL
    ruleset = _call(_SYS_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(size), ctypes.c_uint32(0))
    try:
        for rule in rules:
            _add(ruleset, rule, handled_fs)
    except BaseException:
        os.close(ruleset)
        raise
    return ruleset


def enforce(ruleset: int) -> None:
    """Restrict the calling thread (and everything it starts from now on) to `ruleset`, then close it.

    Sets no_new_privs first, which Landlock requires of a caller without CAP_SYS_ADMIN.
    Irreversible for this thread.
    """
    try:
        if _prctl(ctypes.c_int(_PR_SET_NO_NEW_PRIVS), ctypes.c_ulong(1), ctypes.c_ulong(0), ctypes.c_ulong(0),
                  ctypes.c_ulong(0)) != 0:
            code = ctypes.get_errno()
            raise LandlockError(code, f"prctl(PR_SET_NO_NEW_PRIVS): {os.strerror(code)}")
        _call(_SYS_RESTRICT_SELF, ctypes.c_int(ruleset), ctypes.c_uint32(0))
    finally:
        os.close(ruleset)


def restrict_thread(rules: Iterable[Rule], *, network: bool, level: Support | None = None) -> None:
    """`build` and `enforce` in one step."""
    enforce(build(rules, network=network, level=level))
