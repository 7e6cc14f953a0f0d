"""A filesystem that hangs, for tests: a FUSE mount served by a thread of the test process that answers what
it takes to mount and serve a root (the top directory's attributes, statfs, listing it) and never answers a
lookup of the name `hang`, so anything that touches `hang` waits, as on an NFS server that went away.

It speaks the kernel's FUSE protocol on /dev/fuse directly (a few messages: no libfuse needed); it needs root
and /dev/fuse (`available()` says why not). Closing the device (`HungFs.release`, also on exit of the context)
aborts the connection: whatever still waits gets ENOTCONN, so a test that failed never hangs the run.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import select
import stat
import struct
import threading
from collections.abc import Iterator
from pathlib import Path

__all__ = ["HungFs", "available", "hung_fs"]

_IN = struct.Struct("IIQQIIIHH")  # fuse_in_header: len, opcode, unique, nodeid, uid, gid, pid, extlen, padding
_OUT = struct.Struct("IiQ")  # fuse_out_header: len, error (negative errno), unique
_LOOKUP, _FORGET, _GETATTR, _STATFS, _INIT, _OPENDIR, _READDIR, _RELEASEDIR, _BATCH_FORGET = 1, 2, 3, 17, 26, 27, 28, \
    29, 42
_ATTR_OUT = struct.Struct("QII")  # attr_valid, attr_valid_nsec, dummy; then fuse_attr
_ATTR = struct.Struct("QQQQQQIIIIIIIIII")  # ino size blocks a/m/ctime, nsecs, mode nlink uid gid rdev blksize flags
_INIT_OUT = struct.Struct("IIIIHHIIHHII24x")  # major minor readahead flags max_bg congestion max_write time_gran ...
_KSTATFS = struct.Struct("QQQQQIIII24x")  # blocks bfree bavail files ffree bsize namelen frsize padding spare

_libc = ctypes.CDLL(None, use_errno=True)


def available() -> str | None:
    """None when a hung filesystem can be mounted here, else why not."""
    if os.geteuid() != 0:
        return "mounting a FUSE filesystem without fusermount needs root"
    if not os.access("/dev/fuse", os.R_OK | os.W_OK):
        return "no /dev/fuse"
    return None


class HungFs:
    def __init__(self, mountpoint: Path) -> None:
        self.mountpoint = mountpoint
        self._stop = threading.Event()
        self._unmounted = False
        self.waiting = threading.Event()  # set once something waits on `hang`
        fd = os.open("/dev/fuse", os.O_RDWR | os.O_CLOEXEC)
        options = f"fd={fd},rootmode=40000,user_id=0,group_id=0,allow_other".encode()
        if _libc.mount(b"rootbound-hung", str(mountpoint).encode(), b"fuse.rootbound-hung", 0, options) != 0:
            code = ctypes.get_errno()
            os.close(fd)
            raise OSError(code, f"cannot mount a FUSE filesystem: {os.strerror(code)}")
        self._thread = threading.Thread(target=self._serve, args=(fd,), daemon=True)
        self._thread.start()

    def _serve(self, fd: int) -> None:
        # The device is closed by this thread, once told to stop: a close from another thread while this one
        # reads it would wait for that read, which nothing answers; the close is what aborts the connection.
        poll = select.poll()
        poll.register(fd, select.POLLIN)
        try:
            while not self._stop.is_set():
                if poll.poll(50):
                    self._answer(fd)
        finally:
            os.close(fd)

    def _answer(self, fd: int) -> None:
        try:
            request = os.read(fd, 1 << 20)
        except OSError:  # EINTR, ENOENT (the waiter was interrupted), ENODEV (unmounted)
            return
        _, opcode, unique, node, *_ = _IN.unpack_from(request)
        body = request[_IN.size:]

        def reply(data: bytes = b"", error: int = 0, unique: int = unique) -> None:
            with contextlib.suppress(OSError):  # the waiter may have gone (interrupted)
                os.write(fd, _OUT.pack(_OUT.size + len(data), -error, unique) + data)

        if opcode == _INIT:
            reply(_INIT_OUT.pack(7, 31, 0, 0, 16, 12, 4096, 1, 0, 0, 0, 0))
        elif opcode == _GETATTR:
            reply(_ATTR_OUT.pack(0, 0, 0) + _ATTR.pack(node, 4096, 8, 0, 0, 0, 0, 0, 0, stat.S_IFDIR | 0o755, 2,
                                                       0, 0, 0, 4096, 0))
        elif opcode == _STATFS:
            reply(_KSTATFS.pack(0, 0, 0, 0, 0, 4096, 255, 4096, 0))
        elif opcode == _LOOKUP and body.rstrip(b"\0") == b"hang":
            self.waiting.set()
            return  # never answered
        elif opcode in (_FORGET, _BATCH_FORGET):
            return  # no reply expected
        elif opcode == _OPENDIR:
            reply(struct.pack("QII", 0, 0, 0))
        elif opcode in (_READDIR, _RELEASEDIR):
            reply()  # an empty directory
        else:
            reply(error=errno.ENOENT if opcode == _LOOKUP else errno.ENOSYS)

    def abort(self) -> None:
        """The daemon is gone: whatever waits, and every later call on the mount, gets ENOTCONN."""
        self._stop.set()
        self._thread.join(5)

    def release(self) -> None:
        """Abort the connection and unmount."""
        if not self._stop.is_set():
            self.abort()
        if not self._unmounted:
            self._unmounted = True
            _libc.umount2(str(self.mountpoint).encode(), 2)  # MNT_DETACH


@contextlib.contextmanager
def hung_fs(mountpoint: Path, *, deadline: float = 20.0) -> Iterator[HungFs]:
    """A hung filesystem at `mountpoint` (an empty directory), released on exit or after `deadline` seconds
    at the latest: a test whose event loop the filesystem stalled then fails instead of hanging the run."""
    fs = HungFs(mountpoint)
    watchdog = threading.Timer(deadline, fs.release)
    watchdog.daemon = True
    watchdog.start()
    try:
        yield fs
    finally:
        watchdog.cancel()
        fs.release()
