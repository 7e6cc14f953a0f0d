"""A seccomp filter for what Landlock cannot police: sockets other than TCP (network off), and chmod/xattrs (uid 0).

Sockets (`sockets=True`, when `commands.network` is off). Landlock (ABI 4-7)
handles exactly one thing on the network: bind() and connect() of TCP sockets.
Everything else would pass: UDP and ICMP datagrams, MPTCP (`socket(AF_INET,
SOCK_STREAM, 262)` connects like TCP but is not TCP to Landlock), SCTP, raw and
packet sockets, netlink, vsock, ... and pathname UNIX sockets (`/run/docker.sock`,
a root tmux or ssh-agent socket: a read-only bind does not stop `connect()`, the
kernel checks write permission on the socket inode, not the mount). Even on a
TCP socket two paths skip Landlock's connect hook: `sendto()` with MSG_FASTOPEN
(TCP Fast Open connects from inside sendmsg) and `listen()` on an unbound socket
(the kernel binds it to a free port). seccomp cannot read socket addresses, so
the filter works on what it can see (EACCES for all of these):

* `socket()`: only AF_INET/AF_INET6 + SOCK_STREAM + protocol 0 or IPPROTO_TCP (what
  Landlock covers), and AF_NETLINK + NETLINK_ROUTE (without CAP_NET_ADMIN it only
  reads the interface and route tables, facts /proc/net shows anyway;
  getifaddrs() needs it: `ip addr`, Python's `if_nameindex()`, Node's
  `os.networkInterfaces()`, glibc's AI_ADDRCONFIG). The type's SOCK_NONBLOCK and
  SOCK_CLOEXEC flags are masked off; any other bit refuses.
* `socketpair()`: AF_UNIX only (a connected pair reaches nobody else).
* `listen()`: refused; `sendto()`/`sendmsg()`/`sendmmsg()` (and ARM's `send()`):
  refused when the flags carry MSG_FASTOPEN.
* i386 `socketcall()`: refused wholesale (its arguments sit behind a pointer the
  filter cannot follow), so 32-bit programs built for socketcall have no sockets.

Metadata (`metadata=True`, when a command runs as uid 0 under Landlock alone).
Landlock (ABI <= 7) does not cover chmod or extended attributes, and uid 0 owns
root's files, so even without capabilities it could `chmod 4755` any root-owned
program outside the roots, or give another user access to it through an ACL
(`system.posix_acl_access` is an xattr an owner may set). The filter refuses the
chmod family and the xattr writes (EPERM) everywhere, the roots included (seccomp
cannot see paths).

Set-id bits (`setid=True`, when a command runs as uid 0 under bubblewrap). There the
writable roots are the only writable host directories, and chmod in them is
wanted, but `chmod 4755` (or 2755) on a copy of a program there makes a set-uid
root file on the host that any local user can run to become root. chmod calls
whose mode carries S_ISUID or S_ISGID are refused (EPERM). (A file *created* with
those bits loses them on its first write: the command has no CAP_FSETID.)

Always (whenever a command is sandboxed on a CPU this filter knows): `io_uring_setup` is
refused (ENOSYS, so programs fall back): io_uring creates sockets and sets xattrs without
these system calls; and so is taking a file lease (`fcntl(F_SETLEASE)`, EACCES), or a
delegation (`F_SETDELEG`, Linux after 6.18: a lease by another name). A lease
holder makes every other process's open() of the file wait for it, up to the kernel's
lease-break-time (45 s) each time: a uid-0 command could take one on any root-owned file it
can read (/etc/passwd, a system program) and stall the host's processes, and the server's.
The kernel's keyrings are refused too (`add_key`, `request_key`, `keyctl`: ENOSYS, as on a
kernel built without them, so programs fall back to files): they belong to a uid, not to a
mount or PID namespace, so a command would read and add to the user keyring of the uid it
runs as on the host (root's, under Landlock alone or a bubblewrap per command), or of the
user namespace the commands of one supervisor share: a store, and a channel, that outlives
its call.

Like Landlock, the filter belongs to the calling thread and is inherited by what
it starts; it needs no_new_privs, which this module sets. Imported by the launcher
inside bubblewrap: ctypes and os only.
"""

from __future__ import annotations

import ctypes
import errno
import os

from rootbound.libc import libc

TYPE_CHECKING = False  # see landlock.py: the launcher must not import typing
if TYPE_CHECKING:
    from typing import Final

__all__ = ["restrict_thread", "supported"]

_PR_SET_NO_NEW_PRIVS: Final = 38
_PR_SET_SECCOMP: Final = 22
_SECCOMP_MODE_FILTER: Final = 2
_RET_ALLOW: Final = 0x7FFF0000
_RET_ERRNO: Final = 0x00050000
_X32: Final = 0x40000000
_AF_UNIX, _AF_INET, _AF_INET6, _AF_NETLINK = 1, 2, 10, 16
_SOCK_STREAM, _SOCK_DGRAM, _SOCK_RAW = 1, 2, 3
_SOCK_FLAGS: Final = 0o4000 | 0o2000000  # SOCK_NONBLOCK | SOCK_CLOEXEC (x86 and ARM values)
_IPPROTO_TCP: Final = 6
_NETLINK_ROUTE: Final = 0
_MSG_FASTOPEN: Final = 0x20000000
_SET_ID: Final = 0o6000  # S_ISUID | S_ISGID
_F_SETLEASE: Final = 1024
_F_SETDELEG: Final = 1024 + 16  # (Linux after 6.18) a delegation: a lease by another name, as able to stall opens
# Classic BPF opcodes.
_LD_W_ABS: Final = 0x20
_AND_K: Final = 0x54
_JEQ_K: Final = 0x15
_JSET_K: Final = 0x45
_RET_K: Final = 0x06
_NR, _ARCH = 0, 4  # offsets in struct seccomp_data


def _arg(n: int) -> int:
    """Offset of argument n's low 32 bits (little-endian only); every argument checked here is an int."""
    return 16 + 8 * n


# What the filter does with each system call (labels in `_program`).
_SOCKET_ACTIONS: Final = {"socket": "socket", "socketpair": "socketpair", "listen": "eacces",
                          "send": "flags3", "sendto": "flags3", "sendmmsg": "flags3", "sendmsg": "flags2",
                          "socketcall": "eacces"}
_METADATA: Final = ("chmod", "fchmod", "fchmodat", "fchmodat2", "setxattr", "lsetxattr", "fsetxattr",
                    "removexattr", "lremovexattr", "fremovexattr", "setxattrat", "removexattrat")
_SETID_ACTIONS: Final = {"chmod": "mode1", "fchmod": "mode1", "fchmodat": "mode2", "fchmodat2": "mode2"}
_ALWAYS: Final = {"io_uring_setup": "nosys", "fcntl": "lease", "fcntl64": "lease",
                  "add_key": "nosys", "request_key": "nosys", "keyctl": "nosys"}

# Numbers from the kernel's tables (arch/x86/entry/syscalls/syscall_{64,32}.tbl, include/uapi/asm-generic/unistd.h
# for arm64, arch/arm/tools/syscall.tbl); 425 and up are the same on every architecture. tests/test_sandbox_seccomp.py
# checks them against the installed headers.
_NEW: Final = {"io_uring_setup": 425, "fchmodat2": 452, "setxattrat": 463, "removexattrat": 466}
_X86_64: Final = {"socket": 41, "sendto": 44, "sendmsg": 46, "listen": 50, "socketpair": 53, "fcntl": 72,
                  "chmod": 90, "fchmod": 91, "setxattr": 188, "lsetxattr": 189, "fsetxattr": 190, "removexattr": 197,
                  "lremovexattr": 198, "fremovexattr": 199, "add_key": 248, "request_key": 249, "keyctl": 250,
                  "fchmodat": 268, "sendmmsg": 307, **_NEW}
_X32_OWN: Final = {"sendmsg": 518, "sendmmsg": 538}  # x32's own entries (its 64-bit-only numbers are listed too)
_I386: Final = {"chmod": 15, "fcntl": 55, "fchmod": 94, "socketcall": 102, "fcntl64": 221, "setxattr": 226,
                "lsetxattr": 227, "fsetxattr": 228, "removexattr": 235, "lremovexattr": 236, "fremovexattr": 237,
                "fchmodat": 306, "sendmmsg": 345, "socket": 359, "socketpair": 360, "listen": 363, "sendto": 369,
                "sendmsg": 370, "add_key": 286, "request_key": 287, "keyctl": 288, **_NEW}
_AARCH64: Final = {"setxattr": 5, "lsetxattr": 6, "fsetxattr": 7, "removexattr": 14, "lremovexattr": 15,
                   "fremovexattr": 16, "fcntl": 25, "fchmod": 52, "fchmodat": 53, "socket": 198, "socketpair": 199,
                   "listen": 201, "sendto": 206, "sendmsg": 211, "add_key": 217, "request_key": 218, "keyctl": 219,
                   "sendmmsg": 269, **_NEW}
_ARM: Final = {"chmod": 15, "fcntl": 55, "fchmod": 94, "fcntl64": 221, "setxattr": 226, "lsetxattr": 227,
               "fsetxattr": 228, "removexattr": 235, "lremovexattr": 236, "fremovexattr": 237, "socket": 281,
               "listen": 284, "socketpair": 288, "send": 289, "sendto": 290, "sendmsg": 296, "fchmodat": 333,
               "add_key": 309, "request_key": 310, "keyctl": 311, "sendmmsg": 374, **_NEW}


def _x86_64_and_x32() -> dict[str, tuple[int, ...]]:
    # x32 programs run under the x86_64 audit arch with bit 30 set in the number: both ABIs must be listed.
    return {name: (nr, _X32 | nr, *((_X32 | _X32_OWN[name],) if name in _X32_OWN else ()))
            for name, nr in _X86_64.items()}


def _single(numbers: dict[str, int]) -> dict[str, tuple[int, ...]]:
    return {name: (nr,) for name, nr in numbers.items()}


# machine -> audit arch -> system call name -> numbers. Every architecture a process on the machine can use is
# listed, so a 32-bit program cannot slip past a 64-bit-only filter.
_TABLES: Final[dict[str, dict[int, dict[str, tuple[int, ...]]]]] = {
    "x86_64": {0xC000003E: _x86_64_and_x32(), 0x40000003: _single(_I386)},
    "aarch64": {0xC00000B7: _single(_AARCH64), 0x40000028: _single(_ARM)},
}


def supported() -> bool:
    return os.uname().machine in _TABLES


class _Insn(ctypes.Structure):
    _fields_ = (("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8), ("k", ctypes.c_uint32))


class _Prog(ctypes.Structure):
    _fields_ = (("len", ctypes.c_ushort), ("filter", ctypes.POINTER(_Insn)))


def _program(table: dict[int, dict[str, tuple[int, ...]]], *, sockets: bool, metadata: bool, setid: bool
             ) -> list[tuple[int, int, int, int]]:
    """The filter as (code, jt, jf, k), built with symbolic labels (all jumps forward) and resolved at the end."""
    actions = dict(_ALWAYS)
    if sockets:
        actions.update(_SOCKET_ACTIONS)
    if setid:
        actions.update(_SETID_ACTIONS)
    if metadata:  # refuses outright what `setid` inspects
        actions.update(dict.fromkeys(_METADATA, "eperm"))
    code: list[tuple[int, object, object, int]] = [(_LD_W_ABS, 0, 0, _ARCH)]
    labels: dict[object, int] = {}
    for n, (arch, numbers) in enumerate(table.items()):
        labels[("arch", n)] = len(code)
        code.append((_JEQ_K, 0, ("arch", n + 1), arch))
        code.append((_LD_W_ABS, 0, 0, _NR))
        code += [(_JEQ_K, action, 0, nr) for name, action in actions.items() for nr in numbers.get(name, ())]
        code.append((_RET_K, 0, 0, _RET_ALLOW))
    labels[("arch", len(table))] = len(code)
    code.append((_RET_K, 0, 0, _RET_ALLOW))  # an architecture this machine cannot run

    def block(label: str, *insns: tuple[int, object, object, int]) -> None:
        labels[label] = len(code)
        code.extend(insns)

    # socket(family, type, protocol): what Landlock covers, and read-only netlink.
    block("socket", (_LD_W_ABS, 0, 0, _arg(0)), (_JEQ_K, "inet", 0, _AF_INET), (_JEQ_K, "inet", 0, _AF_INET6),
          (_JEQ_K, "netlink", "eacces", _AF_NETLINK))
    block("inet", (_LD_W_ABS, 0, 0, _arg(1)), (_AND_K, 0, 0, ~_SOCK_FLAGS & 0xFFFFFFFF),
          (_JEQ_K, 0, "eacces", _SOCK_STREAM), (_LD_W_ABS, 0, 0, _arg(2)), (_JEQ_K, "allow", 0, 0),
          (_JEQ_K, "allow", "eacces", _IPPROTO_TCP))
    block("netlink", (_LD_W_ABS, 0, 0, _arg(2)), (_JEQ_K, 0, "eacces", _NETLINK_ROUTE), (_LD_W_ABS, 0, 0, _arg(1)),
          (_AND_K, 0, 0, ~_SOCK_FLAGS & 0xFFFFFFFF), (_JEQ_K, "allow", 0, _SOCK_RAW),
          (_JEQ_K, "allow", "eacces", _SOCK_DGRAM))
    block("socketpair", (_LD_W_ABS, 0, 0, _arg(0)), (_JEQ_K, "allow", "eacces", _AF_UNIX))
    block("flags2", (_LD_W_ABS, 0, 0, _arg(2)), (_JSET_K, "eacces", "allow", _MSG_FASTOPEN))
    block("flags3", (_LD_W_ABS, 0, 0, _arg(3)), (_JSET_K, "eacces", "allow", _MSG_FASTOPEN))
    # chmod(path, mode), fchmod(fd, mode); fchmodat(dirfd, path, mode), fchmodat2(dirfd, path, mode, flags)
    block("mode1", (_LD_W_ABS, 0, 0, _arg(1)), (_JSET_K, "eperm", "allow", _SET_ID))
    block("mode2", (_LD_W_ABS, 0, 0, _arg(2)), (_JSET_K, "eperm", "allow", _SET_ID))
    # fcntl(fd, cmd, arg): no lease (F_SETLEASE) nor delegation (F_SETDELEG); every other command as it is
    block("lease", (_LD_W_ABS, 0, 0, _arg(1)), (_JEQ_K, "eacces", 0, _F_SETLEASE),
          (_JEQ_K, "eacces", "allow", _F_SETDELEG))
    block("allow", (_RET_K, 0, 0, _RET_ALLOW))
    block("eacces", (_RET_K, 0, 0, _RET_ERRNO | errno.EACCES))
    block("eperm", (_RET_K, 0, 0, _RET_ERRNO | errno.EPERM))
    block("nosys", (_RET_K, 0, 0, _RET_ERRNO | errno.ENOSYS))

    def jump(at: int, target: object) -> int:
        if target == 0:
            return 0
        offset = labels[target] - at - 1
        assert 0 <= offset <= 255, f"BPF jump out of range: {offset}"
        return offset

    return [(c, jump(i, jt), jump(i, jf), k) for i, (c, jt, jf, k) in enumerate(code)]


_prctl = libc.prctl
# Built once per set of options and kept (the kernel copies the program; the array must only outlive the call).
_BUILT: dict[tuple[bool, bool, bool], tuple[_Prog, object]] = {}


def _check(result: int, what: str) -> None:
    if result != 0:
        code = ctypes.get_errno()
        raise OSError(code, f"{what}: {os.strerror(code)}")


def _prog(sockets: bool, metadata: bool, setid: bool) -> _Prog:
    key = (sockets, metadata, setid)
    built = _BUILT.get(key)
    if built is None:
        table = _TABLES.get(os.uname().machine)
        if table is None:
            raise OSError(errno.EOPNOTSUPP, f"no seccomp filter for {os.uname().machine}")
        insns = _program(table, sockets=sockets, metadata=metadata, setid=setid)
        array = (_Insn * len(insns))(*(_Insn(*i) for i in insns))
        built = _BUILT[key] = (_Prog(len(insns), array), array)
    return built[0]


def program(*, sockets: bool, metadata: bool, setid: bool = False) -> bytes:
    """The filter as bytes (struct sock_filter array), as bubblewrap's `--seccomp FD` takes it."""
    prog = _prog(sockets, metadata, setid)
    return ctypes.string_at(prog.filter, prog.len * ctypes.sizeof(_Insn))


def restrict_thread(*, sockets: bool, metadata: bool, setid: bool = False) -> None:
    """Install the filter on the calling thread (irreversible); raise OSError when it cannot be installed.

    `sockets`: refuse every socket Landlock cannot police (network off). `metadata`: refuse chmod and xattr
    writes (uid 0 under Landlock alone). `setid`: refuse chmod to set-uid or set-gid (uid 0 under bubblewrap).
    io_uring, file leases and keyrings are refused whatever the options.
    """
    prog = _prog(sockets, metadata, setid)
    _check(_prctl(ctypes.c_int(_PR_SET_NO_NEW_PRIVS), ctypes.c_ulong(1), ctypes.c_ulong(0), ctypes.c_ulong(0),
                  ctypes.c_ulong(0)), "prctl(PR_SET_NO_NEW_PRIVS)")
    _check(_prctl(ctypes.c_int(_PR_SET_SECCOMP), ctypes.c_ulong(_SECCOMP_MODE_FILTER), ctypes.byref(prog),
                  ctypes.c_ulong(0), ctypes.c_ulong(0)), "prctl(PR_SET_SECCOMP)")
