"""A seccomp filter that stops a command from creating UNIX-domain sockets (used when `commands.network` is off).

Why: a pathname UNIX socket (`/run/docker.sock`, a root tmux or ssh-agent socket in
`/tmp`, D-Bus) is a door to a process outside the sandbox. Landlock below ABI 9
does not cover `connect()` on one, and a read-only bind does not stop it either
(the kernel checks write permission on a socket, not the mount), so any socket in
a directory the command can see (its working directory outside the roots, a
root, `commands.read_paths`) would be reachable. seccomp cannot read the address
`connect()` is given, so the filter refuses `socket(AF_UNIX, ...)` instead
(EACCES). `socketpair()` keeps working (it reaches nobody else), and so do pipes.
`io_uring_setup` is refused too (ENOSYS, so programs fall back): io_uring can
create sockets without the `socket` system call.

Like Landlock, the filter belongs to the calling thread and is inherited by what
it starts; it needs no_new_privs, which this module sets. Imported by the launcher
inside bubblewrap: ctypes and os only.
"""

from __future__ import annotations

import ctypes
import errno
import os

TYPE_CHECKING = False  # see landlock.py: the launcher must not import typing
if TYPE_CHECKING:
    from typing import Final

__all__ = ["deny_unix_sockets", "supported"]

_PR_SET_NO_NEW_PRIVS: Final = 38
_PR_SET_SECCOMP: Final = 22
_SECCOMP_MODE_FILTER: Final = 2
_RET_ALLOW: Final = 0x7FFF0000
_RET_ERRNO: Final = 0x00050000
_AF_UNIX: Final = 1
_SYS_SOCKET: Final = 1  # socketcall()'s sub-call for socket()
_X32: Final = 0x40000000
# Classic BPF opcodes.
_LD_W_ABS: Final = 0x20
_JEQ_K: Final = 0x15
_RET_K: Final = 0x06
_NR, _ARCH, _ARG0 = 0, 4, 16  # offsets in struct seccomp_data (args[0]'s low word: little-endian only)

# audit arch -> (socket numbers, socketcall numbers, io_uring_setup numbers). Every architecture a process on this
# machine can use is listed, so a 32-bit program cannot slip past a 64-bit-only filter.
_TABLES: Final[dict[str, dict[int, tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]]]] = {
    "x86_64": {0xC000003E: ((41, _X32 | 41), (), (425, _X32 | 425)), 0x40000003: ((359,), (102,), (425,))},
    "aarch64": {0xC00000B7: ((198,), (), (425,)), 0x40000028: ((281,), (), (425,))},
}


def supported() -> bool:
    return os.uname().machine in _TABLES


class _Insn(ctypes.Structure):
    _fields_ = (("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8), ("k", ctypes.c_uint32))


class _Prog(ctypes.Structure):
    _fields_ = (("len", ctypes.c_ushort), ("filter", ctypes.POINTER(_Insn)))


def _program(table: dict[int, tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]]
             ) -> list[tuple[int, int, int, int]]:
    """The filter as (code, jt, jf, k), built with symbolic labels and resolved at the end."""
    code: list[tuple[int, object, object, int]] = []
    labels: dict[object, int] = {}
    code.append((_LD_W_ABS, 0, 0, _ARCH))
    for n, (arch, (sockets, socketcalls, urings)) in enumerate(table.items()):
        labels[("arch", n)] = len(code)
        code.append((_JEQ_K, 0, ("arch", n + 1), arch))
        code.append((_LD_W_ABS, 0, 0, _NR))
        code += [(_JEQ_K, "family", 0, nr) for nr in sockets]
        code += [(_JEQ_K, "socketcall", 0, nr) for nr in socketcalls]
        code += [(_JEQ_K, "nosys", 0, nr) for nr in urings]
        code.append((_RET_K, 0, 0, _RET_ALLOW))
    labels[("arch", len(table))] = len(code)
    code.append((_RET_K, 0, 0, _RET_ALLOW))  # an architecture this machine cannot run
    labels["family"] = len(code)
    code += [(_LD_W_ABS, 0, 0, _ARG0), (_JEQ_K, "deny", 0, _AF_UNIX), (_RET_K, 0, 0, _RET_ALLOW)]
    labels["socketcall"] = len(code)
    code += [(_LD_W_ABS, 0, 0, _ARG0), (_JEQ_K, "deny", 0, _SYS_SOCKET), (_RET_K, 0, 0, _RET_ALLOW)]
    labels["deny"] = len(code)
    code.append((_RET_K, 0, 0, _RET_ERRNO | errno.EACCES))
    labels["nosys"] = len(code)
    code.append((_RET_K, 0, 0, _RET_ERRNO | errno.ENOSYS))

    def jump(at: int, target: object) -> int:
        return 0 if target == 0 else labels[target] - at - 1

    return [(c, jump(i, jt), jump(i, jf), k) for i, (c, jt, jf, k) in enumerate(code)]


_libc = ctypes.CDLL(None, use_errno=True)
_prctl = _libc.prctl
_prctl.restype = ctypes.c_int


def _check(result: int, what: str) -> None:
    if result != 0:
        code = ctypes.get_errno()
        raise OSError(code, f"{what}: {os.strerror(code)}")


def deny_unix_sockets() -> None:
    """Install the filter on the calling thread (irreversible); raise OSError when it cannot be installed."""
    table = _TABLES.get(os.uname().machine)
    if table is None:
        raise OSError(errno.EOPNOTSUPP, f"no seccomp filter for {os.uname().machine}")
    insns = _program(table)
    array = (_Insn * len(insns))(*(_Insn(*i) for i in insns))
    prog = _Prog(len(insns), array)
    _check(_prctl(ctypes.c_int(_PR_SET_NO_NEW_PRIVS), ctypes.c_ulong(1), ctypes.c_ulong(0), ctypes.c_ulong(0),
                  ctypes.c_ulong(0)), "prctl(PR_SET_NO_NEW_PRIVS)")
    _check(_prctl(ctypes.c_int(_PR_SET_SECCOMP), ctypes.c_ulong(_SECCOMP_MODE_FILTER), ctypes.byref(prog),
                  ctypes.c_ulong(0), ctypes.c_ulong(0)), "prctl(PR_SET_SECCOMP)")
