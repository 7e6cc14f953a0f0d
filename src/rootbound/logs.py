"""JSON log lines on stderr (stdout carries the protocol on stdio)."""

from __future__ import annotations

import asyncio
import json
import logging
import sys
import time
from collections.abc import Callable, Mapping
from contextvars import ContextVar
from itertools import islice
from typing import Any

from rootbound.logsink import StderrSink, log_uncaught
from rootbound.scopes import scoped

__all__ = ["VALUE_LIMIT", "attributed", "caller_fields", "configure_logging", "log", "log_fields", "log_tool_call",
           "shorten", "shorten_all"]

log = logging.getLogger("rootbound")

# Characters of one value a log line or an error text keeps: a 10 MB path must not become a 10 MB
# line (or a 608 MiB stderr after a fuzz run). Cut values are marked with their full length.
VALUE_LIMIT = 200

# Attributes every LogRecord has; anything else was passed with `extra=` and goes in the line.
_STANDARD = set(vars(logging.makeLogRecord({}))) | {"message", "asctime", "taskName"}


# Who made the call being served (`connection`, `client`, `token`: see App._identity); set for the call's
# duration, so every line logged meanwhile says whose it is. Context variables follow the call into worker
# threads (anyio.to_thread copies them).
_caller: ContextVar[Mapping[str, str] | None] = ContextVar("rootbound_caller", default=None)


def attributed(fields: Mapping[str, str]) -> scoped[Mapping[str, str] | None]:
    """Within this block, log lines carry `fields`: who is making the call."""
    return scoped(_caller, fields)


def caller_fields() -> Mapping[str, str]:
    """Who is making the call being served (empty outside a call): for records kept beside the log."""
    return _caller.get() or {}


_PLAIN = frozenset({int, float, bool, type(None)})  # kept as they are by `shorten_all`


def _encoder() -> Callable[[Any], str]:
    """`json.JSONEncoder(default=str, ensure_ascii=False).encode`, with its C encoder made once: the Python around
    it made a new one for every line, and cost as much as the encoding on a call's path (~30 µs of ~60 between
    calls, when little of it is in the CPU's caches). No check for cycles: a line's values are flat or cut short."""
    make = getattr(json.encoder, "c_make_encoder", None)  # (typeshed does not declare it)
    if make is None:  # an interpreter without the C accelerator
        return json.JSONEncoder(default=str, ensure_ascii=False).encode
    chunks = make(None, str, json.encoder.encode_basestring, None, ": ", ", ", False, False, True)
    return lambda value: "".join(chunks(value, 0))


_encode = _encoder()


class JsonFormatter(logging.Formatter):
    _second: tuple[int, str] = (-1, "")  # the last second formatted, and its text: one line per call asks again

    def _stamp(self, created: float, msecs: float) -> str:
        second, text = self._second
        if second != int(created):
            second = int(created)
            text = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))
            self._second = (second, text)
        return f"{text}.{int(msecs):03d}Z"

    def format(self, record: logging.LogRecord) -> str:
        line = self.line(record.created, record.msecs, record.levelname, record.name, record.getMessage(),
                         {key: value for key, value in vars(record).items() if key not in _STANDARD}, _caller.get())
        if record.exc_info:
            # A traceback stays whole, but no line of it (an exception's message may quote input) runs long.
            line["exc"] = "\n".join(shorten(x, 2 * VALUE_LIMIT) for x in
                                    self.formatException(record.exc_info).splitlines())
        return _encode(line)

    def line(self, created: float, msecs: float, level: str, logger: str, msg: str, extra: Mapping[str, Any],
             caller: Mapping[str, str] | None) -> dict[str, Any]:
        """The fields of one line: its time, level, logger and message, what came with `extra=` (a tool-call
        line's are all plain values), and who is calling."""
        line: dict[str, Any] = {"time": self._stamp(created, msecs), "level": level, "logger": logger,
                                "msg": shorten(msg, 2 * VALUE_LIMIT)}
        for key, value in extra.items():
            line[shorten(key)] = value if type(value) in _PLAIN else shorten_all(value)
        for key, value in (caller or {}).items():
            line.setdefault(key, shorten(value))
        return line


def shorten(text: str, limit: int = VALUE_LIMIT) -> str:
    """`text` itself if short; else its head, marked with the full length: `'aaaa…' (10485760 bytes)`."""
    if len(text) <= limit:
        return text
    return f"'{text[:limit]}…' ({len(text.encode('utf-8', 'surrogatepass'))} bytes)"


def shorten_all(value: Any, depth: int = 0) -> Any:
    """`value` with every string in it (keys too) shortened, and no more than 50 items of any container."""
    if isinstance(value, str):
        return shorten(value)
    if isinstance(value, (int, float, bool)) or value is None:
        return value
    if depth > 4:
        return shorten(repr(value))
    if isinstance(value, dict):
        items = {shorten(str(k)): shorten_all(v, depth + 1) for k, v in islice(value.items(), 50)}
        if len(value) > 50:
            items["…"] = f"{len(value)} items"
        return items
    if isinstance(value, (list, tuple, set, frozenset)):
        kept = [shorten_all(v, depth + 1) for v in islice(value, 50)]
        return [*kept, f"… ({len(value)} items)"] if len(value) > 50 else kept
    return shorten(str(value))


class _ShutdownCancels(logging.Filter):
    """uvicorn reports each request it cancels when `shutdown_grace` runs out as an error with a traceback;
    that is the documented end of a call still running at shutdown, so it becomes one plain warning."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.name.startswith("uvicorn") and record.exc_info \
                and isinstance(record.exc_info[1], asyncio.CancelledError):
            record.msg, record.args, record.exc_info = "shutdown_grace ran out: request cancelled", (), None
            record.levelno, record.levelname = logging.WARNING, "WARNING"
        return True


class HumanFormatter(logging.Formatter):
    """`rootbound: warning: message`, for the commands a person runs in a terminal (check, call, tools)."""

    def format(self, record: logging.LogRecord) -> str:
        extra = {k: v for k, v in vars(record).items() if k not in _STANDARD}
        details = f" ({', '.join(f'{k}={v}' for k, v in extra.items())})" if extra else ""
        return f"rootbound: {record.levelname.lower()}: {record.getMessage()}{details}"


def configure_logging(level: str = "INFO", human: bool = False) -> None:
    """JSON lines for the server (log collectors read them); plain sentences for a person's commands."""
    # The log line is written on every tool call's path: the record's caller, thread and process are never
    # printed, so they are not looked up (the logging HOWTO's "Optimization"; finding the caller walks the stack).
    logging._srcfile = None
    logging.logThreads = logging.logProcesses = logging.logMultiprocessing = False
    global _json_handler
    sink = _stderr_sink()
    handler: logging.Handler = sink or logging.StreamHandler(sys.stderr)
    handler.setFormatter(HumanFormatter() if human else JsonFormatter())
    handler.addFilter(_ShutdownCancels())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    _json_handler = None if human else sink
    if sink is not None and not human:  # the server: nothing it reports may wait for stderr's reader
        log_uncaught(log)
    # Libraries: warnings only, so a tool-call line is not buried (and nothing below the chosen level).
    root.setLevel(max(logging.WARNING, logging.getLevelName(level.upper())))
    log.setLevel(level.upper())
    logging.getLogger("uvicorn.error").setLevel(logging.WARNING)


# The server's own stderr handler (`configure_logging`), while it is the only one: the tool-call line, written on
# every call's path, goes to it directly. Through `logging` (a LogRecord, the logger's and the handler's
# filters, `format` walking the record's attributes) it cost ~0.1 ms of a call's time on a 2-CPU VM between
# calls (what the machine's caches have forgotten since the last call is paid again on each).
# (Handing lines to a thread of their own was measured too: the thread's wake-up and the GIL's hand-over cost
# more than the formatting it took off the call's path.)
_json_handler: StderrSink | None = None


def _stderr_sink() -> StderrSink | None:
    """A sink on the process's stderr descriptor (lines never wait for its reader: `logsink`); None when
    `sys.stderr` is not the process's stderr (an embedding program replaced it), which then gets the lines."""
    try:
        fd = sys.stderr.fileno()
    except (AttributeError, OSError, ValueError):
        return None
    if fd != 2:
        return None
    sys.stderr.flush()  # (anything printed before goes first)
    return StderrSink(fd)


def log_tool_call(tool: str, root: str | None, path: str | None, outcome: str, duration_ms: float,
                  response_bytes: int, error: str | None = None) -> None:
    """One line per tool call (seed NFR-017); a held fence is a WARN (NFR-019)."""
    fields: dict[str, Any] = {"tool": tool, "root": root, "path": path, "outcome": outcome,
                              "duration_ms": round(duration_ms, 2), "response_bytes": response_bytes}
    if error is not None:
        fields["error"] = error
    log_fields(logging.WARNING if outcome == "denied" else logging.INFO, "tool call", fields)


def log_fields(level: int, msg: str, fields: dict[str, Any]) -> None:
    """`log.log(level, msg, extra=fields)`, the same line, for what is logged on every call's path (the tool-call
    line, a command's audit line): written to the server's handler directly while it is the only one."""
    if not log.isEnabledFor(level):
        return
    handler, handlers = _json_handler, logging.root.handlers
    if handler is None or log.handlers or len(handlers) != 1 or handlers[0] is not handler:
        log.log(level, msg, extra=fields)  # someone else listens too (a test's capture, say)
        return
    formatter = handler.formatter
    assert isinstance(formatter, JsonFormatter)
    now = time.time()
    text = _encode(formatter.line(now, (now - int(now)) * 1000, logging.getLevelName(level), log.name, msg, fields,
                                  _caller.get()))
    handler.write_line(text)  # (never waits: a reader that stopped reading cannot stop the call)
