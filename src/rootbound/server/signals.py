"""The signals that stop the server, and the exit status a stop leaves."""

from __future__ import annotations

import signal

__all__ = ["STOP_SIGNALS", "exit_status"]

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def exit_status(stopped_by: int | None) -> int:
    """0 after end of input, SIGTERM or SIGHUP (a requested stop that completed); 130 after Ctrl-C, as
    shells expect of an interrupted program."""
    return 128 + signal.SIGINT if stopped_by == signal.SIGINT else 0
