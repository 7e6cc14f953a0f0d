"""`GET /changes` mounted beside /mcp: the journal's page (journal/page.py) behind the same Host, Origin and
bearer-token checks as /mcp. Never on stdio: only http.py mounts it.

A browser cannot send a bearer header when a person opens a link, so the token is accepted once in the query
(`/changes?token=...`): it is checked, exchanged for a random session value in an HttpOnly, SameSite=Strict cookie
(the token itself is never stored in the browser), and the browser is sent to the same address without it, so
the token does not stay in the address bar or the history. A request with `Authorization: Bearer` works too.
"""

from __future__ import annotations

import hmac
import secrets
import urllib.parse
from typing import Final

from mcp.server.transport_security import TransportSecurityMiddleware, TransportSecuritySettings
from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response
from starlette.routing import Route

from rootbound.config import TokenConfig
from rootbound.journal.page import changes_routes
from rootbound.logs import log
from rootbound.server.app import App

__all__ = ["COOKIE", "routes"]

COOKIE: Final = "rootbound_changes"
_SESSIONS_KEPT: Final = 256  # browsers signed in at once; the oldest is forgotten first


class _Gate:
    """Who may see the page and press its buttons: the checks /mcp makes."""

    def __init__(self, security: TransportSecuritySettings, tokens: list[TokenConfig]) -> None:
        self._security = TransportSecurityMiddleware(security)
        self._tokens = [(t.token.encode(), t.name) for t in tokens]
        self._sessions: dict[str, str] = {}  # cookie value -> token name

    def _token_name(self, given: str) -> str | None:
        found = None
        for secret, name in self._tokens:  # every one compared, in constant time
            if hmac.compare_digest(given.encode(), secret):
                found = name
        return found

    def _place_ok(self, request: Request) -> bool:
        return (self._security._validate_host(request.headers.get("host"))
                and self._security._validate_origin(request.headers.get("origin")))

    def may(self, request: Request) -> bool:
        if not self._place_ok(request):
            return False
        if not self._tokens:
            return True  # as /mcp: no token configured, no token asked
        scheme, _, bearer = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() == "bearer" and self._token_name(bearer.strip()) is not None:
            return True
        session = request.cookies.get(COOKIE, "")
        return any(hmac.compare_digest(session.encode(), known.encode()) for known in self._sessions)

    def sign_in(self, request: Request) -> Response | None:
        """`?token=`: a cookie for a good token, and the same address without it; None when no token is given."""
        given = request.query_params.get("token")
        if given is None:
            return None
        name = self._token_name(given) if self._tokens else None
        if name is None or not self._place_ok(request):
            log.warning("changes page: a wrong token was given")
            return PlainTextResponse("forbidden", status_code=403)
        session = secrets.token_urlsafe(32)
        self._sessions[session] = name
        while len(self._sessions) > _SESSIONS_KEPT:
            del self._sessions[next(iter(self._sessions))]
        rest = urllib.parse.urlencode([(k, v) for k, v in request.query_params.multi_items() if k != "token"])
        response = RedirectResponse(request.url.path + (f"?{rest}" if rest else ""), status_code=303)
        response.set_cookie(COOKIE, session, httponly=True, samesite="strict", path=request.url.path,
                            secure=request.url.scheme == "https")
        return response


def routes(app: App, security: TransportSecuritySettings) -> list[Route]:
    """The page's routes for this App (none when its journal is off)."""
    if app.journal is None:
        return []
    gate = _Gate(security, app.config.tokens)
    page = changes_routes(app.journal, {r.real_path: (r.name, r.handle()) for r in app.roots.values()}, gate.may)
    show = page[0]
    assert isinstance(show, Route)
    endpoint = show.endpoint

    async def entry(request: Request) -> Response:
        signed_in = gate.sign_in(request)
        if signed_in is not None:
            return signed_in
        response = await endpoint(request)
        assert isinstance(response, Response)
        return response

    rest = [r for r in page[1:] if isinstance(r, Route)]
    return [Route(show.path, entry, methods=["GET"]), *rest]
