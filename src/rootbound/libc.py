"""The C library, loaded once, for the system calls Python does not wrap (openat2, renameat2, prctl, landlock, ...).

`ctypes.CDLL(None)` is the process's own libc. The sandbox launcher imports this before
every command, so it imports ctypes and nothing else.
"""

from __future__ import annotations

import ctypes
import os

__all__ = ["errno_error", "libc", "prctl", "syscall"]

libc = ctypes.CDLL(None, use_errno=True)
syscall = libc.syscall
syscall.restype = ctypes.c_long
prctl = libc.prctl
prctl.restype = ctypes.c_int


def errno_error() -> OSError:
    """The OSError for the errno the last failed call left."""
    err = ctypes.get_errno()
    return OSError(err, os.strerror(err))
