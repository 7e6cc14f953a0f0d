"""JSON log lines on stderr (stdout carries the protocol on stdio)."""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import Any

__all__ = ["configure_logging", "log", "log_tool_call"]

log = logging.getLogger("rootbound")

# Attributes every LogRecord has; anything else was passed with `extra=` and goes in the line.
_STANDARD = set(vars(logging.makeLogRecord({}))) | {"message", "asctime", "taskName"}


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        line.update({k: v for k, v in vars(record).items() if k not in _STANDARD})
        if record.exc_info:
            line["exc"] = self.formatException(record.exc_info)
        return json.dumps(line, default=str, ensure_ascii=False)


class HumanFormatter(logging.Formatter):
    """`rootbound: warning: message`, for the commands a person runs in a terminal (check, call, tools)."""

    def format(self, record: logging.LogRecord) -> str:
        extra = {k: v for k, v in vars(record).items() if k not in _STANDARD}
        details = f" ({', '.join(f'{k}={v}' for k, v in extra.items())})" if extra else ""
        return f"rootbound: {record.levelname.lower()}: {record.getMessage()}{details}"


def configure_logging(level: str = "INFO", human: bool = False) -> None:
    """JSON lines for the server (log collectors read them); plain sentences for a person's commands."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(HumanFormatter() if human else JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    # Libraries: warnings only, so a tool-call line is not buried (and nothing below the chosen level).
    root.setLevel(max(logging.WARNING, logging.getLevelName(level.upper())))
    log.setLevel(level.upper())
    logging.getLogger("uvicorn.error").setLevel(logging.WARNING)


def log_tool_call(tool: str, root: str | None, path: str | None, outcome: str, duration_ms: float,
                  response_bytes: int, error: str | None = None) -> None:
    """One line per tool call (seed NFR-017); a held fence is a WARN (NFR-019)."""
    level = logging.WARNING if outcome == "denied" else logging.INFO
    fields: dict[str, Any] = {"tool": tool, "root": root, "path": path, "outcome": outcome,
                              "duration_ms": round(duration_ms, 2), "response_bytes": response_bytes}
    if error is not None:
        fields["error"] = error
    log.log(level, "tool call", extra=fields)
