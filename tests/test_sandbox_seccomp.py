"""The seccomp filter under both sandboxes, through the real tools (issue 11, items 5 and 6).

Item 5: with `commands.network: false`, a command can create no socket Landlock cannot police (Landlock covers TCP
bind/connect only): MPTCP reached the server's HTTP port, UDP left freely. Item 6: under Landlock alone a uid-0
command owns root's files, and Landlock does not cover chmod or xattrs: `chmod 4755` on a root-owned copy of `id`
outside the roots made it set-uid. Each test performs the attack from inside a command and checks the side effect
on the host (a connection accepted, a datagram received, a file's mode or xattrs).
"""

from __future__ import annotations

import errno
import itertools
import json
import os
import re
import shutil
import socket
import stat
import struct
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from rootbound.config import load_config
from rootbound.report import describe_commands
from rootbound.sandbox import bwrap, seccomp
from rootbound.sandbox.select import headline
from tests.test_commands_support import CommandServers

NEEDS_BWRAP = pytest.mark.skipif(not bwrap.probe().ok, reason=f"bubblewrap unusable here: {bwrap.probe().detail}")
SANDBOXES = [pytest.param("landlock"), pytest.param("bwrap", marks=NEEDS_BWRAP)]
PYTHON = "/usr/bin/python3"  # the system interpreter: visible inside the sandbox, unlike a user's shims
AS_ROOT = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (CI runs the tests as root)")
pytestmark = [pytest.mark.anyio,
              pytest.mark.skipif(not os.path.exists(PYTHON), reason=f"{PYTHON} is not installed"),
              pytest.mark.skipif(not seccomp.supported(), reason="no seccomp filter for this CPU")]


def run_probe(workspace: Path, source: str) -> str:
    """Put a probe script in the root; the command that runs it is `python3 probe.py ARGS`."""
    workspace.mkdir(parents=True, exist_ok=True)
    (workspace / "probe.py").write_text(source)
    return f"{PYTHON} probe.py"


# -- item 5: sockets with the network off --------------------------------------------------------------------------

# Each case: what it does; the probe prints {case: "ok" | errno name}.
SOCKET_PROBE = r'''
import ctypes, errno, json, os, socket, sys

tcp_port, udp_port = int(sys.argv[1]), int(sys.argv[2])
S = socket

def make(family, kind, proto):
    return lambda: socket.socket(family, kind, proto).close()

def connect(family, kind, proto):
    def go():
        with socket.socket(family, kind, proto) as s:
            s.settimeout(2)
            s.connect(("127.0.0.1", tcp_port))
    return go

def udp_send():
    with socket.socket(S.AF_INET, S.SOCK_DGRAM) as s:
        s.sendto(b"LEAK", ("127.0.0.1", udp_port))

def fast_open():
    with socket.socket() as s:
        s.sendto(b"FASTOPEN", 0x20000000, ("127.0.0.1", tcp_port))  # MSG_FASTOPEN: connects inside sendmsg

def listen():
    with socket.socket() as s:
        s.listen()  # binds an unbound socket to a free port: Landlock's bind hook never runs
        print("listening on", s.getsockname(), file=sys.stderr)

def pair(family, kind):
    def go():
        a, b = socket.socketpair(family, kind)
        with a, b:
            a.send(b"ok")
            assert b.recv(2) == b"ok"
    return go

def pipe():
    r, w = os.pipe()
    os.write(w, b"ok")
    assert os.read(r, 2) == b"ok"

def x32(number, *args):
    def go():
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.syscall(ctypes.c_long(0x40000000 | number), *args) < 0:
            code = ctypes.get_errno()
            raise OSError(code, os.strerror(code))
    return go

cases = {
    "mptcp": make(S.AF_INET, S.SOCK_STREAM, 262), "mptcp6": make(S.AF_INET6, S.SOCK_STREAM, 262),
    "sctp": make(S.AF_INET, S.SOCK_STREAM, 132), "sctp-seqpacket": make(S.AF_INET, S.SOCK_SEQPACKET, 132),
    "inet-seqpacket": make(S.AF_INET, S.SOCK_SEQPACKET, 0),
    "udp": make(S.AF_INET, S.SOCK_DGRAM, 0), "udp6": make(S.AF_INET6, S.SOCK_DGRAM, 0),
    "udp-nonblock": make(S.AF_INET, S.SOCK_DGRAM | S.SOCK_NONBLOCK, 0), "udplite": make(S.AF_INET, S.SOCK_DGRAM, 136),
    "icmp": make(S.AF_INET, S.SOCK_DGRAM, 1), "icmp6": make(S.AF_INET6, S.SOCK_DGRAM, 58),
    "raw": make(S.AF_INET, S.SOCK_RAW, 1), "raw6": make(S.AF_INET6, S.SOCK_RAW, 58),
    "packet": make(17, S.SOCK_RAW, 0x0300), "packet-dgram": make(17, S.SOCK_DGRAM, 0),
    "netlink-sock-diag": make(16, S.SOCK_RAW, 4), "netlink-audit": make(16, S.SOCK_RAW, 9),
    "netlink-uevent": make(16, S.SOCK_DGRAM, 15), "netlink-generic": make(16, S.SOCK_RAW, 16),
    "netlink-route-seqpacket": make(16, S.SOCK_SEQPACKET, 0),
    "unix": make(S.AF_UNIX, S.SOCK_STREAM, 0), "unix-dgram": make(S.AF_UNIX, S.SOCK_DGRAM, 0),
    "vsock": make(40, S.SOCK_STREAM, 0), "bluetooth": make(31, S.SOCK_STREAM, 3), "alg": make(38, S.SOCK_SEQPACKET, 0),
    "xdp": make(44, S.SOCK_RAW, 0), "tipc": make(30, S.SOCK_RDM, 0), "key": make(15, S.SOCK_RAW, 2),
    "can": make(29, S.SOCK_RAW, 1), "rds": make(21, S.SOCK_SEQPACKET, 0), "smc": make(43, S.SOCK_STREAM, 0),
    "socketpair-inet": pair(S.AF_INET, S.SOCK_STREAM), "socketpair-tipc": pair(30, S.SOCK_SEQPACKET),
    "connect-mptcp": connect(S.AF_INET, S.SOCK_STREAM, 262), "connect-tcp": connect(S.AF_INET, S.SOCK_STREAM, 0),
    "sendto-udp": udp_send, "tcp-fast-open": fast_open, "listen": listen,
    # still allowed: what Landlock covers, socketpair(), pipes, read-only netlink, name lookups
    "tcp": make(S.AF_INET, S.SOCK_STREAM, 0), "tcp6": make(S.AF_INET6, S.SOCK_STREAM, 6),
    "tcp-flags": make(S.AF_INET, S.SOCK_STREAM | S.SOCK_NONBLOCK | S.SOCK_CLOEXEC, 0),
    "netlink-route": make(16, S.SOCK_RAW, 0), "netlink-route-dgram": make(16, S.SOCK_DGRAM, 0),
    "socketpair": pair(S.AF_UNIX, S.SOCK_STREAM), "socketpair-dgram": pair(S.AF_UNIX, S.SOCK_DGRAM), "pipe": pipe,
    "getaddrinfo": lambda: socket.getaddrinfo("localhost", 80, flags=socket.AI_ADDRCONFIG),
    "if_nameindex": socket.if_nameindex,
}
if os.uname().machine == "x86_64":  # the same calls through the x32 ABI (the filter must list those numbers too)
    cases["x32-udp"] = x32(41, S.AF_INET, S.SOCK_DGRAM, 0)
    cases["x32-listen"] = x32(50, 0, 0)  # on fd 0, /dev/null: ENOTSOCK unless refused first

out = {}
for name, case in cases.items():
    try:
        case()
        out[name] = "ok"
    except OSError as exc:
        out[name] = errno.errorcode.get(exc.errno, str(exc.errno))
print(json.dumps(out))
'''

REFUSED = ["mptcp", "mptcp6", "sctp", "sctp-seqpacket", "inet-seqpacket", "udp", "udp6", "udp-nonblock", "udplite",
           "icmp", "icmp6", "raw", "raw6", "packet", "packet-dgram", "netlink-sock-diag", "netlink-audit",
           "netlink-uevent", "netlink-generic", "netlink-route-seqpacket", "unix", "unix-dgram", "vsock", "bluetooth",
           "alg", "xdp", "tipc", "key", "can", "rds", "smc", "socketpair-inet", "socketpair-tipc", "connect-mptcp",
           "sendto-udp", "tcp-fast-open", "listen"]
STILL_WORK = ["tcp", "tcp6", "tcp-flags", "netlink-route", "netlink-route-dgram", "socketpair", "socketpair-dgram",
              "pipe", "getaddrinfo", "if_nameindex"]


@pytest.fixture
def listeners() -> Iterator[tuple[socket.socket, socket.socket]]:
    """A TCP listener and a UDP socket on 127.0.0.1, standing for the server's own HTTP port and any local service."""
    with socket.socket() as tcp, socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
        for s in (tcp, udp):
            s.bind(("127.0.0.1", 0))
            s.setblocking(False)
        tcp.listen()
        yield tcp, udp


def reached(tcp: socket.socket, udp: socket.socket) -> list[bytes]:
    """Everything that arrived: b'<connection>' per accepted connection (plus what it sent), and each datagram."""
    got = []
    while True:
        try:
            conn, _ = tcp.accept()
        except BlockingIOError:
            break
        with conn:
            conn.settimeout(1)
            try:
                got.append(b"<connection>" + conn.recv(100))
            except OSError:
                got.append(b"<connection>")
    while True:
        try:
            got.append(udp.recv(100))
        except BlockingIOError:
            return got


async def probe_sockets(servers: CommandServers, tmp_path: Path, listeners: tuple[socket.socket, socket.socket],
                        **commands: object) -> dict[str, str]:
    tcp, udp = listeners
    command = run_probe(tmp_path / "workspace", SOCKET_PROBE)
    h = await servers({"allowed": "*", **commands})
    got = await h.ok("execute_command", command=f"{command} {tcp.getsockname()[1]} {udp.getsockname()[1]}",
                     root="workspace")
    assert got["exit_code"] == 0, got
    result: dict[str, str] = json.loads(got["stdout"])
    return result


@pytest.mark.parametrize("sandbox", SANDBOXES)
async def test_network_off_refuses_every_socket_landlock_cannot_police(
        servers: CommandServers, tmp_path: Path, listeners: tuple[socket.socket, socket.socket],
        sandbox: str) -> None:
    """MPTCP + connect() reached the server's port under Landlock alone; UDP, raw, packet, netlink, vsock ... were
    all creatable. Now socket() refuses them (EACCES), and nothing arrives on the host's listeners."""
    got = await probe_sockets(servers, tmp_path, listeners, sandbox=sandbox)
    assert {name: got[name] for name in REFUSED} == dict.fromkeys(REFUSED, "EACCES")
    assert got["connect-tcp"] == "EACCES"  # plain TCP: Landlock's own refusal
    assert {name: got[name] for name in STILL_WORK} == dict.fromkeys(STILL_WORK, "ok")
    if "x32-udp" in got:
        assert got["x32-udp"] == got["x32-listen"] == "EACCES"
    assert reached(*listeners) == []


@pytest.mark.parametrize("sandbox", SANDBOXES)
async def test_network_on_filters_no_socket(servers: CommandServers, tmp_path: Path,
                                            listeners: tuple[socket.socket, socket.socket], sandbox: str) -> None:
    """Control: with `commands.network: true` the same probe reaches the host's listeners (MPTCP, TCP, Fast Open,
    UDP), so the test above fails when the filter is missing."""
    got = await probe_sockets(servers, tmp_path, listeners, sandbox=sandbox, network=True)
    for name in ("mptcp", "udp", "udp6", "netlink-sock-diag", "unix", "connect-mptcp", "connect-tcp", "sendto-udp",
                 "tcp-fast-open", "listen", "tcp"):
        assert got[name] == "ok", (name, got[name])
    arrived = reached(*listeners)
    assert b"LEAK" in arrived and arrived.count(b"<connection>") >= 2, arrived


async def test_getent_resolves_localhost_with_the_network_off(servers: CommandServers) -> None:
    h = await servers({"allowed": "*", "sandbox": "landlock"})
    got = await h.ok("execute_command", command="getent ahosts localhost")
    assert got["exit_code"] == 0 and "127.0.0.1" in got["stdout"], got
    if bwrap.probe().ok:
        h = await servers({"allowed": "*", "sandbox": "bwrap"})
        got = await h.ok("execute_command", command="getent hosts localhost")
        assert got["exit_code"] == 0 and "localhost" in got["stdout"], got


# -- item 6: metadata outside the roots ----------------------------------------------------------------------------

METADATA_PROBE = r'''
import ctypes, errno, json, os, struct, sys

path = sys.argv[1]
libc = ctypes.CDLL(None, use_errno=True)

def syscall(number, *args):
    def go():
        if libc.syscall(ctypes.c_long(number), *args) < 0:
            code = ctypes.get_errno()
            raise OSError(code, os.strerror(code))
    return go

# user::rwx user:nobody:rwx group::r-x mask::rwx other::r-x (the kernel's xattr form of a POSIX ACL)
acl = struct.pack("<I", 2) + b"".join(struct.pack("<HHI", tag, perm, uid) for tag, perm, uid in
                                      [(1, 7, 2**32 - 1), (2, 7, 65534), (4, 5, 2**32 - 1), (16, 7, 2**32 - 1),
                                       (32, 5, 2**32 - 1)])
at_fdcwd = ctypes.c_int(-100)
cases = {
    "chmod": lambda: os.chmod(path, 0o4755),
    "fchmodat2": syscall(452, at_fdcwd, path.encode(), 0o4755, 0),
    "acl": lambda: os.setxattr(path, "system.posix_acl_access", acl),
    "user-xattr": lambda: os.setxattr(path, "user.mark", b"1"),
    "removexattr": lambda: os.removexattr(path, "user.gone"),
    "chown": lambda: os.chown(path, 65534, -1),
}
if os.uname().machine == "x86_64":
    cases["x32-chmod"] = syscall(0x40000000 | 90, path.encode(), 0o4755)
out = {}
for name, case in cases.items():
    try:
        case()
        out[name] = "ok"
    except OSError as exc:
        out[name] = errno.errorcode.get(exc.errno, str(exc.errno))
print(json.dumps(out))
'''


@pytest.fixture
def idcopy() -> Iterator[Path]:
    """A root-owned copy of /usr/bin/id (mode 0755) outside the roots, in a directory every user can traverse (not
    under /tmp, which bubblewrap replaces with a private one)."""
    where = Path(tempfile.mkdtemp(prefix="rootbound-seccomp-", dir="/var/tmp" if os.path.isdir("/var/tmp") else None))
    try:
        where.chmod(0o755)
        target = where / "idcopy"
        shutil.copyfile("/usr/bin/id", target)
        target.chmod(0o755)
        yield target
    finally:
        shutil.rmtree(where)


def untouched(path: Path) -> None:
    st = path.stat()
    assert (stat.S_IMODE(st.st_mode), st.st_uid) == (0o755, 0)
    assert os.listxattr(path) == []


@AS_ROOT
@pytest.mark.parametrize("network", [False, True])
async def test_landlock_as_root_cannot_change_metadata_outside(servers: CommandServers, tmp_path: Path,
                                                               idcopy: Path, network: bool) -> None:
    """Landlock alone, server root, no run_as: the command cannot read the file, but as its owner (uid 0) it could
    chmod 4755 it, or give another user access through an ACL. seccomp refuses chmod and xattr writes (EPERM);
    chown to another user fails anyway (CAP_CHOWN is dropped)."""
    command = run_probe(tmp_path / "workspace", METADATA_PROBE)
    h = await servers({"allowed": "*", "sandbox": "landlock", "network": network})
    got = await h.ok("execute_command", command=f"{command} {idcopy}", root="workspace")
    assert got["exit_code"] == 0, got
    result = json.loads(got["stdout"])
    assert {k: v for k, v in result.items() if k != "removexattr"} == dict.fromkeys(
        ["chmod", "fchmodat2", "acl", "user-xattr", "chown", *(["x32-chmod"] if "x32-chmod" in result else [])],
        "EPERM")
    assert result["removexattr"] == "EPERM"  # not ENODATA: refused before the kernel looks
    error = await h.err("shell", command=f"chmod 4755 {idcopy}; chmod u+s {idcopy}", root="workspace")
    assert "exit code 1" in error and "Operation not permitted" in error
    untouched(idcopy)


@AS_ROOT
async def test_landlock_as_root_cannot_chmod_in_the_roots_either(servers: CommandServers, tmp_path: Path) -> None:
    """The price, pinned and documented (`check`, docs/security.md): seccomp cannot see paths, so chmod is refused
    in the roots too; creating files with any mode still works. commands.run_as or bubblewrap lift it."""
    ws = tmp_path / "workspace"
    ws.mkdir()
    (ws / "run.sh").write_text("#!/bin/sh\necho ran\n")
    (ws / "run.sh").chmod(0o644)
    h = await servers({"allowed": "*", "sandbox": "landlock"})
    got = await h.ok("execute_command", command="chmod +x run.sh", root="workspace")
    assert got["exit_code"] == 1
    assert "chmod: changing permissions of 'run.sh': Operation not permitted" in got["stderr"]
    assert stat.S_IMODE((ws / "run.sh").stat().st_mode) == 0o644
    got = await h.ok("execute_command", root="workspace", command=f"{PYTHON} -c \"import os; "
                     "os.close(os.open('made.sh', os.O_CREAT | os.O_WRONLY, 0o755))\"")
    assert got["exit_code"] == 0 and (ws / "made.sh").stat().st_mode & 0o100, got
    lines, _ = describe_commands(h.app.config)
    text = "\n".join(lines)
    assert "chmod and extended-attribute writes (ACLs too) refused everywhere, in the roots too" in text
    assert "use commands.run_as or bubblewrap for chmod" in text
    assert "chmod and xattrs refused, as commands run as root: set commands.run_as" in headline(h.app.config)


@AS_ROOT
async def test_run_as_chmod_outside_fails_by_permissions(servers: CommandServers, tmp_path: Path,
                                                         idcopy: Path) -> None:
    """With run_as the command is not the file's owner: chmod fails by plain permissions, and no filter is needed
    (chmod of the user's own files, in the root, works)."""
    ws = tmp_path / "workspace"
    ws.mkdir()
    ws.chmod(0o777)
    h = await servers({"allowed": "*", "sandbox": "landlock", "run_as": "nobody"})
    got = await h.ok("shell", command=f"chmod 4755 {idcopy}; echo $?; touch mine && chmod 700 mine && echo chmodded",
                     root="workspace")
    assert "Operation not permitted" in got["stderr"] and got["stdout"].splitlines() == ["1", "chmodded"], got
    assert stat.S_IMODE((ws / "mine").stat().st_mode) == 0o700
    untouched(idcopy)
    assert "files nobody owns can be chmod-ed" in "\n".join(describe_commands(h.app.config)[0])


@AS_ROOT
@NEEDS_BWRAP
async def test_bwrap_chmod_outside_is_read_only_and_inside_works(servers: CommandServers, tmp_path: Path,
                                                                 idcopy: Path) -> None:
    ws = tmp_path / "workspace"
    ws.mkdir()
    (ws / "run.sh").write_text("#!/bin/sh\necho ran\n")
    h = await servers({"allowed": "*", "sandbox": "bwrap", "read_paths": [str(idcopy.parent)]})
    got = await h.ok("shell", command=f"chmod 700 {idcopy}; chmod 4755 {idcopy}; chmod +x run.sh && ./run.sh",
                     root="workspace")
    assert "Read-only file system" in got["stderr"] and got["stdout"] == "ran\n", got
    untouched(idcopy)


@AS_ROOT
@NEEDS_BWRAP
async def test_bwrap_as_root_cannot_make_a_setuid_file_in_the_roots(servers: CommandServers, tmp_path: Path) -> None:
    """Under bubblewrap, server root, no run_as: `cp /usr/bin/id idcopy && chmod 4755 idcopy` in a writable root made
    a set-uid root program on the host (another user ran it and got euid 0). chmod to set-uid/set-gid is refused;
    other modes, ACLs and xattrs in the root still work."""
    command = run_probe(tmp_path / "workspace", METADATA_PROBE)
    ws = tmp_path / "workspace"
    shutil.copyfile("/usr/bin/id", ws / "idcopy")
    (ws / "idcopy").chmod(0o755)
    h = await servers({"allowed": "*", "sandbox": "bwrap"})
    got = await h.ok("execute_command", command=f"{command} idcopy", root="workspace")
    result = json.loads(got["stdout"])
    assert result["chmod"] == result["fchmodat2"] == result.get("x32-chmod", "EPERM") == "EPERM", result
    assert result["chown"] == "EPERM"  # no CAP_CHOWN
    assert (result["acl"], result["user-xattr"], result["removexattr"]) == ("ok", "ok", "ENODATA")  # in a root: fine
    error = await h.err("shell", command="cp /usr/bin/id id2 && chmod 755 id2 && chmod u+s id2", root="workspace")
    assert "chmod: changing permissions of 'id2': Operation not permitted" in error
    error = await h.err("shell", command="mkdir d && chmod g+s d", root="workspace")
    assert "Operation not permitted" in error
    assert not (ws / "idcopy").stat().st_mode & 0o6000
    assert stat.S_IMODE((ws / "id2").stat().st_mode) == 0o755
    assert "except set-uid/set-gid bits" in "\n".join(describe_commands(h.app.config)[0])


# -- check, and the tables ------------------------------------------------------------------------------------------


def test_check_states_what_the_filter_covers(tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"roots: [{{name: w, path: {tmp_path}}}]\ncommands: {{allowed: '*', sandbox: landlock}}\n")
    text = "\n".join(describe_commands(load_config(str(cfg), env={}))[0])
    assert "TCP denied (Landlock); every other socket refused (seccomp): UDP, ICMP, MPTCP" in text
    assert "TCP listen() and Fast Open refused too" in text
    cfg.write_text(f"roots: [{{name: w, path: {tmp_path}}}]\n"
                   "commands: {allowed: '*', sandbox: landlock, network: true}\n")
    text = "\n".join(describe_commands(load_config(str(cfg), env={}))[0])
    assert "network: allowed (every kind of socket)" in text and "UNIX sockets: allowed" in text


def _header(path: str) -> dict[str, int]:
    """__NR_name -> number from an installed kernel header (x32's are written as (__X32_SYSCALL_BIT + n))."""
    numbers = {}
    text = Path(path).read_text()
    for name, x32, value in re.findall(r"#define __NR_(\w+) (\(__X32_SYSCALL_BIT \+ )?(\d+)\)?", text):
        numbers[name] = (0x40000000 if x32 else 0) | int(value)
    return numbers


@pytest.mark.parametrize(("header", "arch", "index"), [
    ("/usr/include/x86_64-linux-gnu/asm/unistd_64.h", ("x86_64", 0xC000003E), 0),
    ("/usr/include/x86_64-linux-gnu/asm/unistd_x32.h", ("x86_64", 0xC000003E), -1),
    ("/usr/include/x86_64-linux-gnu/asm/unistd_32.h", ("x86_64", 0x40000003), 0),
    ("/usr/include/asm-generic/unistd.h", ("aarch64", 0xC00000B7), 0),
])
def test_syscall_numbers_match_the_kernel_headers(header: str, arch: tuple[str, int], index: int) -> None:
    """The tables were written from the kernel's syscall tables; the installed headers confirm every number they
    define (numbers newer than the headers, e.g. fchmodat2, are the same on every architecture)."""
    if not os.path.exists(header):
        pytest.skip(f"{header} is not installed")
    known = _header(header)
    table = seccomp._TABLES[arch[0]][arch[1]]
    checked = {name: numbers[index] for name, numbers in table.items() if name in known}
    assert checked == {name: known[name] for name in checked}
    assert len(checked) >= 14


def test_the_filter_fits_classic_bpf() -> None:
    """Every jump is forward and within 255 instructions, for every combination of options and architecture."""
    for machine, table in seccomp._TABLES.items():
        for options in itertools.product((False, True), repeat=3):
            sockets, metadata, setid = options
            program = seccomp._program(table, sockets=sockets, metadata=metadata, setid=setid)
            assert len(program) < 4096, (machine, options)


def test_acl_blob_is_what_the_kernel_accepts(tmp_path: Path) -> None:
    """Control for the ACL case above: the same xattr, set unconfined, is accepted (so EPERM there is the filter)."""
    target = tmp_path / "f"
    target.write_text("")
    acl = struct.pack("<I", 2) + b"".join(struct.pack("<HHI", tag, perm, uid) for tag, perm, uid in
                                          [(1, 7, 2**32 - 1), (2, 7, 65534), (4, 5, 2**32 - 1), (16, 7, 2**32 - 1),
                                           (32, 5, 2**32 - 1)])
    try:
        os.setxattr(target, "system.posix_acl_access", acl)
    except OSError as exc:
        if exc.errno == errno.EOPNOTSUPP:
            pytest.skip("this file system has no POSIX ACLs")
        raise
    assert "system.posix_acl_access" in os.listxattr(target)


LEASE_PROBE = r'''
import errno, fcntl, json, os, signal, sys
signal.signal(signal.SIGIO, lambda *_: None)  # a lease holder told of an open elsewhere holds on
out = {}
for name, kind in (("write", fcntl.F_WRLCK), ("read", fcntl.F_RDLCK)):
    fd = os.open(sys.argv[1], os.O_RDONLY)
    try:
        fcntl.fcntl(fd, fcntl.F_SETLEASE, kind)
        out[name] = "ok"
    except OSError as e:
        out[name] = errno.errorcode[e.errno]
    finally:
        os.close(fd)
# F_SETDELEG (F_LINUX_SPECIFIC_BASE + 16, Linux after 6.18): a delegation is a lease by another name (an open
# elsewhere waits for its holder in the same way); struct delegation {u32 d_flags; u16 d_type; u16 pad}
fd = os.open(sys.argv[1], os.O_RDONLY)
try:
    fcntl.fcntl(fd, 1024 + 16, fcntl.F_RDLCK.to_bytes(2, "little").rjust(6, b"\0").ljust(8, b"\0"))
    out["delegation"] = "ok"
except OSError as e:
    out["delegation"] = errno.errorcode[e.errno]  # EINVAL: a kernel without delegations; EACCES: refused
finally:
    os.close(fd)
print(json.dumps(out))
'''


@AS_ROOT
@pytest.mark.parametrize("network", [False, True])
@pytest.mark.parametrize("sandbox", SANDBOXES)
async def test_no_command_can_take_a_file_lease(servers: CommandServers, tmp_path: Path, sandbox: str,
                                                network: bool) -> None:
    """A lease holder makes every other process's open() of the file wait for it, up to lease-break-time (45 s),
    again and again: a uid-0 command owns every root-owned file it can read (/etc/passwd, a system program) and
    could stall the host's processes and the server. The filter refuses F_SETLEASE in every sandboxed command,
    whatever the network setting (with the network allowed there was no filter at all)."""
    command = run_probe(tmp_path / "workspace", LEASE_PROBE)
    leased = tmp_path / "workspace" / "owned-by-root.txt"
    leased.write_text("a file the command's uid owns\n")
    h = await servers({"allowed": "*", "sandbox": sandbox, "network": network})
    got = await h.ok("execute_command", command=f"{command} {leased.name}", root="workspace")
    assert got["exit_code"] == 0, got
    assert json.loads(got["stdout"]) == {"write": "EACCES", "read": "EACCES", "delegation": "EACCES"}


KEYRING_PROBE = r'''
import ctypes, errno, json, os
libc = ctypes.CDLL(None, use_errno=True)
NR = {"x86_64": (248, 249, 250), "aarch64": (217, 218, 219)}[os.uname().machine]
USER_KEYRING = -4
out = {}
for name, nr, args in (("add_key", NR[0], (b"user", b"rootbound-probe", b"x", 1, USER_KEYRING)),
                       ("request_key", NR[1], (b"user", b"rootbound-probe", None, 0)),
                       ("keyctl", NR[2], (0, USER_KEYRING, 0))):  # KEYCTL_GET_KEYRING_ID of @u
    got = libc.syscall(nr, *args)
    out[name] = "ok" if got >= 0 else errno.errorcode[ctypes.get_errno()]
print(json.dumps(out))
'''


@pytest.mark.parametrize("sandbox", SANDBOXES)
async def test_no_command_can_use_the_kernel_keyrings(servers: CommandServers, tmp_path: Path, sandbox: str) -> None:
    """Keyrings belong to a uid, not to a mount or PID namespace: a command running as root would read and add to
    the host root's user keyring (Kerberos tickets, fscrypt keys), and commands sharing a supervisor's user
    namespace would share one, a store outliving the call. The filter makes the three calls fail with ENOSYS (as
    on a kernel without keyrings)."""
    command = run_probe(tmp_path / "workspace", KEYRING_PROBE)
    h = await servers({"allowed": "*", "sandbox": sandbox})
    got = await h.ok("execute_command", command=command, root="workspace")
    assert got["exit_code"] == 0, got
    assert json.loads(got["stdout"]) == {"add_key": "ENOSYS", "request_key": "ENOSYS", "keyctl": "ENOSYS"}
