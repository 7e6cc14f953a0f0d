"""Quick looks on the event loop, where they cannot stall it.

A hop to a worker thread and back costs ~350 us on a small VM: more than a stat or a small read itself.
So a read-only quick call (stat_file, read_file of a small file) first runs on the event loop, within
`on_loop()`, and the core lets it go on only while every step is known to wait on nothing but a local disk:

* the root's filesystem is a local one (its statfs magic is in LOCAL_FILESYSTEMS: no NFS, SMB, FUSE, sshfs);
* paths resolve with openat2 and RESOLVE_NO_XDEV, so no mount point beneath the root (an NFS or FUSE mount,
  an automount) is ever entered — the kernel refuses at the mount, before the other filesystem is asked;
* a file to read is at most MAX_BYTES, and is opened without waiting (O_NONBLOCK): a file another process
  holds a lease on (Samba, an NFS server, any process owning it) makes an open for reading wait for the holder,
  up to /proc/sys/fs/lease-break-time (45 s).

Anything else raises `Offload` before any data is read, and the call runs in a worker thread as it always did
(`tools/base.py`): a read-only call has changed nothing. The resolution is the same RESOLVE_BENEATH walk, with one
more restriction, so nothing becomes reachable that was not.
"""

from __future__ import annotations

import ctypes
from contextvars import ContextVar
from typing import Final

from rootbound.libc import libc
from rootbound.scopes import scoped

__all__ = ["MAX_BYTES", "Offload", "active", "check_size", "local_filesystem", "on_loop"]

MAX_BYTES: Final = 256 * 1024  # read on the loop: well under a millisecond from the page cache

# statfs f_type magic numbers (linux/magic.h) of filesystems whose calls wait only on a local device.
LOCAL_FILESYSTEMS: Final = frozenset({
    0xEF53,  # ext2/3/4
    0x58465342,  # xfs
    0x9123683E,  # btrfs
    0x01021994,  # tmpfs
    0x858458F6,  # ramfs
    0x794C7630,  # overlayfs (containers)
    0xF2F52010,  # f2fs
    0x2FC12FC1,  # zfs
    0xCA451A4E,  # bcachefs
})

_active: ContextVar[bool] = ContextVar("rootbound_on_loop", default=False)


class Offload(Exception):  # not an error: an instruction to run the call in a thread
    """This call cannot be sure to stay quick on the event loop: run it in a worker thread."""


def active() -> bool:
    """True within `on_loop()`: the core must refuse (`Offload`) whatever could wait on more than a local disk."""
    return _active.get()


def on_loop() -> scoped[bool]:
    """`with on_loop():` the core runs on the event loop, and refuses (`Offload`) what could wait there."""
    return scoped(_active, True)


def check_size(size: int) -> None:
    """On the loop, a file to read must be small."""
    if size > MAX_BYTES and _active.get():
        raise Offload


class _StatFs(ctypes.Structure):
    # struct statfs on 64-bit Linux: f_type first; the rest is room (120 bytes in all)
    _fields_ = (("f_type", ctypes.c_long), ("rest", ctypes.c_byte * 112))


_fstatfs = libc.fstatfs
_fstatfs.argtypes = (ctypes.c_int, ctypes.POINTER(_StatFs))
_fstatfs.restype = ctypes.c_int


def local_filesystem(fd: int) -> bool:
    """Whether the filesystem `fd` lies on is one of LOCAL_FILESYSTEMS (False when statfs fails)."""
    buf = _StatFs()
    if _fstatfs(fd, ctypes.byref(buf)) != 0:
        return False
    return (buf.f_type & 0xFFFFFFFF) in LOCAL_FILESYSTEMS
