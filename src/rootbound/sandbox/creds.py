"""Credentials of the calling thread only: drop every capability, switch to another user.

Linux keeps credentials per thread; the C library's `setuid()` & co. broadcast the
change to every thread of the process, so the raw system calls are used instead.
A thread changed here spawns a command and ends; the server's other threads keep
their credentials. (Also imported by the launcher inside bubblewrap: kept lean.)
"""

from __future__ import annotations

import ctypes
import os

from rootbound.libc import libc

TYPE_CHECKING = False  # see landlock.py: the launcher must not import typing
if TYPE_CHECKING:
    from typing import Final

__all__ = ["RunAs", "drop_capabilities", "supported", "switch_user"]

# (setgroups, setresgid, setresuid, capset) per architecture.
_NUMBERS: Final = {"x86_64": (116, 119, 117, 126), "aarch64": (159, 149, 147, 91)}
_PR_CAP_AMBIENT: Final = 47
_PR_CAP_AMBIENT_CLEAR_ALL: Final = 4
_CAP_VERSION_3: Final = 0x20080522

_syscall = libc.syscall
_prctl = libc.prctl


class RunAs:
    """The user commands run as (from `commands.run_as`)."""

    def __init__(self, name: str, uid: int, gid: int, groups: tuple[int, ...]) -> None:
        self.name, self.uid, self.gid, self.groups = name, uid, gid, groups


def supported() -> bool:
    return os.uname().machine in _NUMBERS


def _numbers() -> tuple[int, int, int, int]:
    try:
        return _NUMBERS[os.uname().machine]
    except KeyError:
        raise OSError(f"per-thread credentials are not implemented for {os.uname().machine}") from None


def _check(result: int, what: str) -> None:
    if result < 0:
        code = ctypes.get_errno()
        raise OSError(code, f"{what}: {os.strerror(code)}")


class _CapHeader(ctypes.Structure):
    _fields_ = (("version", ctypes.c_uint32), ("pid", ctypes.c_int))


class _CapData(ctypes.Structure):
    _fields_ = (("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32))


def switch_user(user: RunAs) -> None:
    """Become `user` on this thread (needs CAP_SETUID/CAP_SETGID: the server runs as root)."""
    setgroups, setresgid, setresuid, _ = _numbers()
    groups = (ctypes.c_uint32 * max(1, len(user.groups)))(*user.groups)
    _check(_syscall(ctypes.c_long(setgroups), ctypes.c_size_t(len(user.groups)), groups), "setgroups")
    _check(_syscall(ctypes.c_long(setresgid), ctypes.c_uint32(user.gid), ctypes.c_uint32(user.gid),
                    ctypes.c_uint32(user.gid)), "setresgid")
    _check(_syscall(ctypes.c_long(setresuid), ctypes.c_uint32(user.uid), ctypes.c_uint32(user.uid),
                    ctypes.c_uint32(user.uid)), "setresuid")


def drop_capabilities() -> None:
    """Empty this thread's effective, permitted, inheritable and ambient capability sets.

    A command then runs, even as uid 0, without any capability: it cannot mknod,
    chown others' files, open raw sockets, load modules or bypass file permissions.
    Nothing it executes can add one back: under no_new_privs (which Landlock sets,
    and bubblewrap too) the kernel caps what an exec grants at the permitted set the
    caller had, which is now empty, so the bounding set need not be touched.
    """
    *_, capset = _numbers()
    header = _CapHeader(_CAP_VERSION_3, 0)
    data = (_CapData * 2)()
    _check(_syscall(ctypes.c_long(capset), ctypes.byref(header), data), "capset")
    _check(_prctl(ctypes.c_int(_PR_CAP_AMBIENT), ctypes.c_ulong(_PR_CAP_AMBIENT_CLEAR_ALL), ctypes.c_ulong(0),
                  ctypes.c_ulong(0), ctypes.c_ulong(0)), "prctl(PR_CAP_AMBIENT_CLEAR_ALL)")
