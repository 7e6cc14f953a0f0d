"""A small YAML emitter for flat command results: multi-line text as readable block scalars (seed 001).

    exit_code: 0
    stdout: |
      line one
      line two
    stderr: ""

Text goes into a literal block (`|`, `|-`, `|+` for its trailing newlines) when
every character can stand in one unchanged; anything else (control characters,
carriage returns, line separators YAML 1.1 would fold) is written double-quoted
with escapes, so any YAML parser reads back exactly the original string.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["dump"]

Scalar = str | int | float | bool | None


def _printable(c: str) -> bool:
    o = ord(c)
    if o < 0x20:
        return c == "\t"
    if o < 0x7F:
        return True
    # DEL, C1 controls (NEL among them), LS/PS (line breaks to YAML 1.1), BOM, surrogates, non-characters.
    if o < 0xA0 or 0xD800 <= o <= 0xDFFF:
        return False
    return c not in "\u2028\u2029\ufeff\ufffe\uffff"


def _quoted(text: str) -> str:
    out = ['"']
    for c in text:
        if c == '"':
            out.append('\\"')
        elif c == "\\":
            out.append("\\\\")
        elif c == "\n":
            out.append("\\n")
        elif c == "\t":
            out.append("\\t")
        elif _printable(c):
            out.append(c)
        elif ord(c) <= 0xFF:
            out.append(f"\\x{ord(c):02x}")
        elif ord(c) <= 0xFFFF:
            out.append(f"\\u{ord(c):04x}")
        else:
            out.append(f"\\U{ord(c):08x}")
    out.append('"')
    return "".join(out)


def _block(text: str) -> str | None:
    """The literal block form of `text`, or None when it cannot be one."""
    body = text.rstrip("\n")
    if "\n" not in text or not body or not all(c == "\n" or _printable(c) for c in text):
        return None
    trailing = len(text) - len(body)
    chomp = "-" if trailing == 0 else "" if trailing == 1 else "+"
    lines = body.split("\n")
    first = next(line for line in lines if line)
    # Without an indicator, a first content line that starts with a space would set a deeper indentation.
    indent = "2" if first[:1] in (" ", "\t") else ""
    rendered = "\n".join(f"  {line}" if line else "" for line in lines)
    extra = "\n" * (trailing - 1) if trailing > 1 else ""
    return f"|{indent}{chomp}\n{rendered}{extra}"


def _scalar(value: Scalar) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    return _block(value) or _quoted(value)


def dump(items: Iterable[tuple[str, Scalar]]) -> str:
    """`key: value` lines for simple keys (letters, digits, _), in the given order."""
    return "\n".join(f"{key}: {_scalar(value)}" for key, value in items) + "\n"
