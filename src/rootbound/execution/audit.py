"""One JSON line per command, run or refused: to the `rootbound` log, and to `commands.audit_log` when set.

The line says who asked for what and what happened (tool, command, working
directory, allowed/denied and why, exit code, signal, duration, bytes of output),
never the output itself nor the values of the environment the agent passed.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from typing import Any

from rootbound.logs import caller_fields, log, log_fields

__all__ = ["write_audit"]

_lock = threading.Lock()


def write_audit(record: dict[str, Any], audit_log: str | None) -> None:
    record = {"time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime()) + f".{int(time.time() * 1000) % 1000:03d}Z",
              **caller_fields(), **record}  # who asked: connection, client, token name
    level = logging.WARNING if record.get("decision") == "denied" else logging.INFO
    log_fields(level, "command", {k: v for k, v in record.items() if k != "time"})
    if not audit_log:
        return
    line = (json.dumps(record, ensure_ascii=False, default=str) + "\n").encode()
    try:
        with _lock:
            fd = os.open(audit_log, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
            try:
                os.write(fd, line)
            finally:
                os.close(fd)
    except OSError as exc:
        # The audit file failing must not hide what ran: the log line above already has it.
        log.error("cannot write the command audit log", extra={"audit_log": audit_log, "error": str(exc)})
