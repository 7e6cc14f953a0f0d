"""A rootbound server process on stdio, forked from a fork server that has imported rootbound already.

Starting `python -m rootbound` takes seconds on a loaded machine (the MCP SDK's imports): a hundred kill-and-restart
rounds would take minutes. A fork server (multiprocessing's, preloaded with rootbound) starts the same server code
in a fresh process in milliseconds; its stdin and stdout are the FIFOs the test opens, as a client's pipes.
"""

from __future__ import annotations

import os
import sys


def serve(stdin_fifo: str, stdout_fifo: str, argv: list[str]) -> None:
    from rootbound import cli

    fd = os.open(stdin_fifo, os.O_RDONLY)
    os.dup2(fd, 0)
    os.close(fd)
    fd = os.open(stdout_fifo, os.O_WRONLY)
    os.dup2(fd, 1)
    os.close(fd)
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 2)
    sys.exit(cli.main(argv))
