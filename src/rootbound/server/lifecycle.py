"""The server process from its first log line to its exit status: serve one App over one transport until end
of input (stdio) or a stop signal, then clean up (`App.close`: no command outlives the server)."""

from __future__ import annotations

import gc
import signal
import sys
from types import FrameType

import anyio

from rootbound import __version__
from rootbound.logs import log
from rootbound.server.app import App
from rootbound.server.signals import STOP_SIGNALS, exit_status
from rootbound.server.stdio import serve_stdio_until_signal
from rootbound.tools import exposed

__all__ = ["run"]


class _StopEarly(BaseException):
    """A stop signal that came before the transport watched for them (while starting up)."""

    def __init__(self, sig: int) -> None:
        super().__init__(sig)
        self.sig = sig


def _stop_early(sig: int, frame: FrameType | None) -> None:
    raise _StopEarly(sig)


def run(app: App, transport: str) -> int:
    """Serve until end of input (stdio) or a stop signal, clean up, and return the exit status."""
    stopped_by: int | None = None
    for sig in STOP_SIGNALS:  # from the first line on, a stop signal still cleans up (the transports take over)
        signal.signal(sig, _stop_early)
    try:
        log.info("starting", extra={"version": __version__, "transport": transport, "roots": list(app.roots),
                                    "config": app.config.source, "tools": len(exposed(app.config)),
                                    # the sandbox is chosen by the first command ("commands ready" says which)
                                    "commands": "allowed" if app.config.commands.allowed else "off"})
        if transport == "stdio" and sys.stderr.isatty():
            names = ", ".join(app.roots)
            print(f"rootbound {__version__}: serving root(s) {names} over stdio. This process speaks MCP on "
                  "stdin/stdout; start it from an MCP client (see README), or press Ctrl-C to stop.",
                  file=sys.stderr, flush=True)
        # Start-up is over (cli.py ran it without garbage collection): what it built lives as long as the server,
        # so it is frozen out of every later collection, which then only walks what calls make.
        gc.freeze()
        gc.enable()
        if transport == "stdio":
            stopped_by = anyio.run(serve_stdio_until_signal, app)
        else:
            from rootbound.server.http import serve_http  # uvicorn and its ASGI stack: HTTP only

            stopped_by = anyio.run(serve_http, app)
    except _StopEarly as stop:
        stopped_by = stop.sig
    except KeyboardInterrupt:
        stopped_by = signal.SIGINT
    finally:
        for sig in STOP_SIGNALS:  # a stop is under way: a second signal must not cut the clean-up short
            signal.signal(sig, signal.SIG_IGN)
        app.close()
    if stopped_by is not None:
        log.info("stopped", extra={"signal": signal.Signals(stopped_by).name})
    # Interpreter teardown would garbage-collect the SDK's many thousands of model objects, which takes
    # a second or more on a busy machine; frozen objects are skipped, so the process ends promptly.
    gc.freeze()
    return exit_status(stopped_by)
