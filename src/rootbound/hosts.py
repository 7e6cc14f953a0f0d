"""The HTTP Host and Origin allowlists: what an operator writes, turned into the SDK's patterns.

The SDK (`mcp.server.transport_security`) accepts a Host header that equals an entry, or that
starts with `name:` when the entry is `name:*`. Behind a TLS proxy clients send `Host: name` (the
default port is left out), so `name:*` alone would refuse every normal HTTPS client, and a bare
`name` would refuse `name:443`. Here every entry matches with and without a port:

* `name` or `name:*`: `Host: name` and `Host: name:<any port>`;
* `name:443`: `Host: name` and `Host: name:443` only.

IPv6 literals are written `[2001:db8::1]` (optionally with `:port` or `:*`); a bare literal is
bracketed. Names are compared lower-case: entries are lowered here, the request's Host header by
`server.http.LowercaseHost` (the SDK compares strings exactly; host names are case-insensitive). Origins
(`scheme://host[:port|:*]`) get the same treatment, except that a port-less origin is accepted for
`:port` only when it is the scheme's default port: browsers never send `:443` for https, but `:8443`
is another site.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable

__all__ = ["check_host", "check_origin", "host_patterns", "origin_patterns", "url_host"]

_NAME = re.compile(r"[a-z0-9_-]+(\.[a-z0-9_-]+)*")  # DNS names, IPv4, and container names (with _)
_DEFAULT_PORTS = {"http": "80", "https": "443"}


def _split(entry: str) -> tuple[str, str | None]:
    """`name[:port|:*]` -> (host as it appears in a Host header, port or "*" or None). ValueError if malformed."""
    text = entry.strip().lower()
    if "://" in text or "/" in text:
        raise ValueError(f"{entry!r} is not a host name: write it without scheme or path, e.g. "
                         "\"mcp.example.com\" (origins such as https://... go in allowed_origins)")
    if text.startswith("["):
        host, sep, rest = text.partition("]")
        host += sep
        port = rest[1:] if rest.startswith(":") else None
        if rest and port is None:
            raise ValueError(f"{entry!r}: expected [IPv6] or [IPv6]:port")
        _ipv6(host[1:-1], entry)
    elif text.count(":") > 1:  # a bare IPv6 literal: Host headers always bracket it
        _ipv6(text, entry)
        host, port = f"[{text}]", None
    else:
        host, _, port_text = text.partition(":")
        port = port_text if ":" in text else None
        if not _NAME.fullmatch(host):  # (not `$`, which also matches before a last newline)
            raise ValueError(f"{entry!r} is not a valid host name (letters, digits, '-', '_' and '.'; e.g. "
                             "\"mcp.example.com\" or \"mcp.example.com:443\")")
    if port is not None and port != "*" and not (re.fullmatch("[0-9]{1,5}", port) and 0 < int(port) < 65536):
        raise ValueError(f"{entry!r}: the port must be a number from 1 to 65535, or *")
    return host, port


def _ipv6(text: str, entry: str) -> None:
    try:
        ipaddress.IPv6Address(text)
    except ValueError:
        raise ValueError(f"{entry!r} is not a valid IPv6 literal (write it as [2001:db8::1] or "
                         "[2001:db8::1]:443)") from None


def check_host(entry: str) -> str:
    """The entry if it is a valid `allowed_hosts` value; ValueError naming the fix otherwise."""
    _split(entry)
    return entry


def host_patterns(entries: Iterable[str]) -> list[str]:
    """SDK `allowed_hosts` patterns accepting each entry with and without a port."""
    out: list[str] = []
    for entry in entries:
        host, port = _split(entry)
        for pattern in (host, f"{host}:{port or '*'}"):
            if pattern not in out:
                out.append(pattern)
    return out


def _split_origin(entry: str) -> tuple[str, str, str | None]:
    scheme, sep, rest = entry.strip().lower().partition("://")
    if not sep or not scheme or not re.fullmatch(r"[a-z][a-z0-9+.-]*", scheme):
        raise ValueError(f"{entry!r} is not an origin: write scheme://host[:port], e.g. "
                         "\"https://app.example.com\" (host names alone go in allowed_hosts)")
    host, port = _split(rest.rstrip("/"))
    return scheme, host, port


def check_origin(entry: str) -> str:
    """The entry if it is a valid `allowed_origins` value; ValueError naming the fix otherwise."""
    _split_origin(entry)
    return entry


def origin_patterns(entries: Iterable[str]) -> list[str]:
    """SDK `allowed_origins` patterns: `:*` also accepts the port-less origin, the default port too."""
    out: list[str] = []
    for entry in entries:
        scheme, host, port = _split_origin(entry)
        base = f"{scheme}://{host}"
        patterns = [base] if port is None else [f"{base}:{port}"]
        if port == "*" or port == _DEFAULT_PORTS.get(scheme):
            patterns.append(base)
        out.extend(p for p in patterns if p not in out)
    return out


def url_host(host: str) -> str:
    """A bind address as it appears in a Host header or URL (IPv6 literals bracketed)."""
    return f"[{host}]" if ":" in host and not host.startswith("[") else host
