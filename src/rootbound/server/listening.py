"""The HTTP listening socket, bound before the server says it is listening: a port that is taken, or an
address this machine does not have, is one line naming the flag that fixes it, not a traceback after a
"listening" log line."""

from __future__ import annotations

import errno
import socket

__all__ = ["ListenError", "listen"]


class ListenError(Exception):
    """The HTTP port cannot be listened on; the message says which flag or key changes it."""


def listen(host: str, port: int) -> socket.socket:
    """A socket bound to (host, port) and listening, for uvicorn's `serve(sockets=...)`."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(2048)  # bound alone does not hold the port on Linux; listening does
    except OSError as exc:
        sock.close()
        where = f"{'[' + host + ']' if family == socket.AF_INET6 else host}:{port}"
        if exc.errno == errno.EADDRINUSE:
            reason = ("the port is already in use (another rootbound?); choose another with --port N "
                      "(config key: port) or stop what is using it")
        elif exc.errno == errno.EACCES:
            reason = ("permission denied (ports below 1024 need privileges); choose --port 1024 or above "
                      "(config key: port)")
        elif exc.errno in (errno.EADDRNOTAVAIL, errno.EAFNOSUPPORT) or isinstance(exc, socket.gaierror):
            reason = ("this machine has no such address; choose --host 127.0.0.1 (this machine only) or "
                      "--host 0.0.0.0 (every interface) (config key: host)")
        else:
            reason = f"{exc.strerror or exc}; check --host and --port (config keys: host, port)"
        raise ListenError(f"cannot listen on {where}: {reason}") from None
    return sock
