"""One line from a stdio client: the JSON-RPC message it carries, or the error reply it is owed.

Valid lines are parsed by the SDK's own adapter, exactly as its stdio reader does. A line that
adapter refuses (or reads as a notification although it carries an `id`) is answered the way
JSON-RPC 2.0 prescribes: -32700 when the text cannot be parsed, -32600 when it parses but is not a
valid request, with the request's `id` when one can be recovered and `null` otherwise. Replies to
our own requests (messages with `result` or `error`) are never answered.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

import mcp_types as types
from mcp.shared.message import SessionMessage
from pydantic import ValidationError

from rootbound.logs import shorten

__all__ = ["INVALID_REQUEST", "PARSE_ERROR", "Refusal", "read_line"]

PARSE_ERROR = -32700
INVALID_REQUEST = -32600

Id = str | int | float | None


@dataclass(frozen=True)
class Refusal:
    """A line that is not a valid message: the error reply it is owed (`None` for a malformed response)."""

    code: int
    message: str
    ids: tuple[Id, ...]  # one reply per id; empty: nothing to answer
    size: int

    def replies(self) -> list[bytes]:
        # ASCII escapes: an id may hold a lone surrogate, which has no UTF-8 form.
        return [json.dumps({"jsonrpc": "2.0", "id": i, "error": {"code": self.code, "message": self.message}}
                           ).encode() + b"\n" for i in self.ids]


def read_line(line: bytes) -> SessionMessage | Refusal | None:
    """Parse one newline-free line; `None` for a blank line."""
    if not line.strip():
        return None
    try:
        message = types.jsonrpc_message_adapter.validate_json(line, by_name=False)
    except ValidationError as exc:
        return _refuse(line, exc)
    if isinstance(message, types.JSONRPCNotification) and b'"id"' in line:
        # The notification model ignores unknown keys, so a request whose id is an object, a float, a
        # boolean or null reads as a notification and would never be answered (JSON-RPC 2.0 §4.1:
        # the presence of "id" makes it a request).
        decoded = _loads(line)
        if isinstance(decoded, dict) and "id" in decoded:
            return Refusal(INVALID_REQUEST, 'Invalid Request: "id" must be a string or an integer',
                           (_echo(decoded["id"]),), len(line))
    return SessionMessage(message)


def _refuse(line: bytes, exc: ValidationError) -> Refusal:
    decoded = _loads(line)
    if any(e["type"] == "json_invalid" for e in exc.errors()):
        # Not JSON to us (broken syntax, invalid UTF-8, a lone surrogate, nesting past the parser's limit);
        # Python's more lenient parser may still find the id the client is waiting on.
        detail = next(e["msg"] for e in exc.errors() if e["type"] == "json_invalid")
        ids: tuple[Id, ...] = (_echo(decoded.get("id")),) if isinstance(decoded, dict) else (None,)
        return Refusal(PARSE_ERROR, f"Parse error: {shorten(detail)}", ids, len(line))
    if isinstance(decoded, list):
        ids = tuple(_echo(m["id"]) for m in decoded if isinstance(m, dict) and "id" in m) or (None,)
        return Refusal(INVALID_REQUEST, "Invalid Request: batches are not supported; send one message per line",
                       ids, len(line))
    if not isinstance(decoded, dict):
        return Refusal(INVALID_REQUEST, "Invalid Request: a message must be a JSON object", (None,), len(line))
    if "method" not in decoded and ("result" in decoded or "error" in decoded):
        return Refusal(INVALID_REQUEST, "malformed response", (), len(line))  # never answer a response
    return Refusal(INVALID_REQUEST, f"Invalid Request: {_what_is_wrong(decoded)}", (_echo(decoded.get("id")),),
                   len(line))


def _what_is_wrong(message: dict[str, Any]) -> str:
    if message.get("jsonrpc") != "2.0":
        return '"jsonrpc" must be "2.0"'
    if "id" in message and _echo(message["id"]) is None:
        return '"id" must be a string or an integer'
    if not isinstance(message.get("method"), str):
        return '"method" must be a string'
    if "params" in message and not isinstance(message["params"], dict):
        return '"params" must be an object'
    return "not a valid JSON-RPC 2.0 request"


def _loads(line: bytes) -> Any:
    try:
        return json.loads(line)
    except (ValueError, RecursionError):
        return None


def _echo(value: Any) -> Id:
    """The id to answer with: a string or number as sent; anything else (object, list, bool) is null."""
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        return None
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, str) and len(value) > 1024:
        return None  # a reply must stay small; no honest client uses such an id
    return value
