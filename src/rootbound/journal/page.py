"""`GET /changes`: the journal as a page, for people who would rather look than type.

    routes = changes_routes(journal, roots, may=lambda request: ...)   # -> list of Starlette routes
    app = changes_app(journal, roots, may=...)                          # or a Starlette app of its own

Plain server-rendered HTML with a little vanilla JavaScript (live filtering while typing, filters
applied on change), no build step, nothing fetched from elsewhere: it works offline. Newest first,
grouped by connection; each change shows its diff, highlighted, and an Undo button; each connection an
"Undo all" button. Undo is a POST (`/changes/undo`) carrying a CSRF token that only the page holds, and
follows the same rules as `rootbound undo` (a file edited since is refused and named; there is no force
here: use the CLI for that). After an undo the browser is sent back to the page (303), which shows
what was restored and what was refused.

Who may see the page and press its buttons is the caller's to decide: `may(request)` (phase 2 mounts
these routes behind the same token, Host and Origin checks as /mcp, and never on stdio). Rendering and
undo run in a worker thread.
"""

from __future__ import annotations

import hmac
import html
import secrets
import time
import urllib.parse
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Final

import anyio
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Route

from rootbound.journal import locks, query
from rootbound.journal.change import Journal
from rootbound.journal.diffs import Diff
from rootbound.journal.model import COMMAND
from rootbound.journal.undo import undo

__all__ = ["PAGE_LIMIT", "changes_app", "changes_routes"]

PAGE_LIMIT: Final = 200  # changes shown at once (filters narrow it down)
_RESULTS_KEPT: Final = 32
_MAX_FORM: Final = 64 * 1024


@dataclass(frozen=True)
class _Root:
    name: str
    fd: int


_CSS = """
:root { color-scheme: light dark; --add: #e6ffec; --del: #ffebe9; --hunk: #ddf4ff; --muted: #656d76;
        --line: #d0d7de; --bg: #ffffff; --card: #f6f8fa; --fg: #1f2328; --accent: #0969da; --warn: #9a6700; }
@media (prefers-color-scheme: dark) {
  :root { --add: #12361f; --del: #4a1a1a; --hunk: #0c2d4a; --muted: #9198a1; --line: #3d444d; --bg: #0d1117;
          --card: #151b23; --fg: #e6edf3; --accent: #4493f8; --warn: #d29922; } }
* { box-sizing: border-box; }
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; margin: 0; background: var(--bg);
       color: var(--fg); }
header { padding: 14px 24px; border-bottom: 1px solid var(--line); display: flex; gap: 24px; align-items: center;
         flex-wrap: wrap; }
header h1 { font-size: 18px; margin: 0; }
header form { display: flex; gap: 8px; flex-wrap: wrap; align-items: center; }
input, select, button { font: inherit; padding: 4px 8px; border: 1px solid var(--line); border-radius: 6px;
                        background: var(--bg); color: var(--fg); }
button { cursor: pointer; }
button.undo { border-color: var(--accent); color: var(--accent); }
button.undo:hover { background: var(--accent); color: white; }
main { padding: 16px 24px; max-width: 1200px; }
.banner { border: 1px solid var(--line); border-left: 4px solid var(--accent); padding: 8px 12px; margin-bottom: 16px;
          background: var(--card); border-radius: 6px; white-space: pre-wrap; font-family: ui-monospace, monospace;
          font-size: 12.5px; }
.banner.refused { border-left-color: var(--warn); }
section.connection { border: 1px solid var(--line); border-radius: 8px; margin-bottom: 18px; overflow: hidden; }
section.connection > h2 { font-size: 14px; margin: 0; padding: 8px 12px; background: var(--card);
                          display: flex; gap: 12px; align-items: center; border-bottom: 1px solid var(--line); }
section.connection > h2 .who { font-weight: 600; }
section.connection > h2 .meta { color: var(--muted); font-weight: normal; }
section.connection > h2 form { margin-left: auto; }
details.change { border-top: 1px solid var(--line); }
details.change:first-of-type { border-top: none; }
details.change > summary { padding: 6px 12px; display: flex; gap: 12px; align-items: center; cursor: pointer;
                           list-style: none; }
details.change > summary::-webkit-details-marker { display: none; }
summary .id { font-family: ui-monospace, monospace; color: var(--muted); }
summary .tool { font-weight: 600; min-width: 90px; }
summary .path { font-family: ui-monospace, monospace; }
summary .stats .a { color: #1a7f37; } summary .stats .r { color: #cf222e; }
summary .status { color: var(--warn); }
summary .age { color: var(--muted); margin-left: auto; white-space: nowrap; }
summary form { margin: 0; }
.body { padding: 0 12px 10px; }
.note { color: var(--muted); padding: 4px 0; }
pre.diff { margin: 4px 0 8px; border: 1px solid var(--line); border-radius: 6px; overflow-x: auto;
           font: 12.5px/1.4 ui-monospace, SFMono-Regular, Menlo, monospace; }
pre.diff span { display: block; padding: 0 8px; white-space: pre; }
pre.diff .add { background: var(--add); } pre.diff .del { background: var(--del); }
pre.diff .hunk { background: var(--hunk); color: var(--muted); } pre.diff .meta { font-weight: 600; }
.command { padding: 6px 12px; border-top: 1px solid var(--line); color: var(--muted);
           font-family: ui-monospace, monospace; }
.empty { color: var(--muted); padding: 24px 0; }
.hidden { display: none !important; }
"""

_JS = """
document.querySelectorAll('header select').forEach(s => s.addEventListener('change', () => s.form.submit()));
const pathInput = document.getElementById('path');
pathInput && pathInput.addEventListener('input', () => {
  const q = pathInput.value.trim().toLowerCase();
  document.querySelectorAll('details.change').forEach(d => {
    d.classList.toggle('hidden', q !== '' && !d.dataset.paths.toLowerCase().includes(q.replace(/\\*/g, '')));
  });
  document.querySelectorAll('section.connection').forEach(s => {
    s.classList.toggle('hidden', s.querySelectorAll('details.change:not(.hidden)').length === 0 && q !== '');
  });
});
"""


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def _diff_html(d: Diff) -> str:
    parts = []
    if d.note:
        parts.append(f'<div class="note">{_e(d.path)}: {_e(d.note)}</div>')
    if d.lines:
        spans = []
        for line in d.lines:
            cls = ("meta" if line.startswith(("+++", "---")) else "add" if line.startswith("+") else
                   "del" if line.startswith("-") else "hunk" if line.startswith("@@") else "ctx")
            spans.append(f'<span class="{cls}">{_e(line) or " "}</span>')
        parts.append(f'<pre class="diff">{"".join(spans)}</pre>')
    return "".join(parts)


class _Page:
    def __init__(self, journal: Journal, roots: Mapping[str, _Root], may: Callable[[Request], bool],
                 prefix: str) -> None:
        self.journal = journal
        self.roots = roots
        self.may = may
        self.prefix = prefix
        self.token = secrets.token_urlsafe(32)
        self.results: OrderedDict[str, tuple[bool, list[str]]] = OrderedDict()

    @property
    def fds(self) -> dict[str, int]:
        return {path: r.fd for path, r in self.roots.items()}

    # -- GET /changes ----------------------------------------------------------------------------

    async def show(self, request: Request) -> Response:
        if not self.may(request):
            return PlainTextResponse("forbidden", status_code=403)
        params = request.query_params
        body = await anyio.to_thread.run_sync(self._render, params.get("root", ""), params.get("path", ""),
                                              params.get("client", ""), params.get("result", ""))
        return HTMLResponse(body, headers={"Cache-Control": "no-store", "X-Frame-Options": "DENY",
                                           "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; "
                                           "script-src 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'"})

    def _render(self, root: str, path: str, client: str, result: str) -> str:
        stores = [self.journal.store(p) for p in self.roots]
        root_paths = {p for p, r in self.roots.items() if r.name == root} if root else None
        found = query.select(stores, root_paths=root_paths, path_glob=_glob(path) if path else None,
                             client=client or None, limit=PAGE_LIMIT)
        query.fill_stats(found, self.fds)
        clients = sorted({r[0] for s in stores for r in s.query("SELECT DISTINCT client FROM entries") if r[0]})
        now = time.time()
        out = ["<!doctype html><html lang=en><head><meta charset=utf-8><meta name=viewport "
               "content='width=device-width,initial-scale=1'><title>rootbound — changes</title>"
               f"<style>{_CSS}</style></head><body><header><h1>rootbound · changes</h1>",
               f'<form method=get action="{_e(self.prefix)}">',
               '<select name=root aria-label=root><option value="">all roots</option>',
               *(f'<option{" selected" if r.name == root else ""}>{_e(r.name)}</option>'
                 for r in sorted(self.roots.values(), key=lambda r: r.name)),
               '</select><select name=client aria-label=client><option value="">all clients</option>',
               *(f'<option{" selected" if c == client else ""}>{_e(c)}</option>' for c in clients),
               f'</select><input id=path name=path placeholder="path, e.g. src/*.py" value="{_e(path)}" '
               'aria-label=path><button type=submit>Filter</button></form></header><main>']
        if result in self.results:
            refused, lines = self.results[result]
            out.append(f'<div class="banner{" refused" if refused else ""}" id=result>{_e(chr(10).join(lines))}</div>')
        if not found:
            out.append('<p class=empty>No changes recorded' + (" that match these filters." if
                                                                (root or path or client) else ".") + "</p>")
        for connection, group in _by_connection(found):
            out.append(self._group(connection, group, now, {"root": root, "path": path, "client": client}))
        if len(found) >= PAGE_LIMIT:
            out.append(f"<p class=empty>Showing the newest {PAGE_LIMIT}; filter to see older changes.</p>")
        out.append(f"</main><script>{_JS}</script></body></html>")
        return "".join(out)

    def _group(self, connection: str | None, group: list[query.Found], now: float, filters: dict[str, str]) -> str:
        clients = sorted({f.entry.client or "-" for f in group})
        changes = [f for f in group if f.entry.kind != COMMAND]
        undoable = [f for f in changes if f.entry.undoable]
        head = (f'<section class=connection data-connection="{_e(connection or "")}"><h2>'
                f'<span class=who>{_e(", ".join(clients))}</span>'
                f'<span class=meta>connection {_e(connection or "-")} · {len(changes)} change'
                f'{"s" * (len(changes) != 1)} · latest {_e(query.age(now - group[0].entry.time))}</span>')
        if connection and undoable:
            head += self._form({"connection": connection, **filters}, "Undo all",
                               f"undo {len(undoable)} changes of this connection")
        parts = [head + "</h2>"]
        for f in group:
            parts.append(self._change(f, now, filters))
        parts.append("</section>")
        return "".join(parts)

    def _change(self, f: query.Found, now: float, filters: dict[str, str]) -> str:
        e = f.entry
        if e.kind == COMMAND:
            return (f'<div class=command data-paths="">{_e(e.id)} · ran <b>$ {_e(e.note.get("command", ""))}</b> '
                    f'in {_e(e.root)}:{_e(e.note.get("cwd", "."))} (exit {_e(e.note.get("exit_code"))}) · '
                    f'{_e(query.age(now - e.time))} — its changes are not journaled</div>')
        stats = ""
        if e.added is not None and e.added >= 0 and e.removed is not None:
            stats = f'<span class=stats><span class=a>+{e.added}</span> <span class=r>-{e.removed}</span></span>'
        status = query.describe(e, stats=False)
        button = self._form({"id": e.id, **filters}, "Undo", f"undo {e.id}") if e.undoable else ""
        diffs = "".join(_diff_html(d) for d in query.entry_diffs(f, self.fds))
        paths = " ".join(p.path for p in e.paths)
        return (f'<details class=change id="c-{_e(e.id)}" data-id="{_e(e.id)}" data-root="{_e(e.root)}" '
                f'data-client="{_e(e.client or "")}" data-paths="{_e(paths)}"{" open" if e.undoable else ""}>'
                f'<summary><span class=id>{_e(e.id)}</span><span class=tool>{_e(e.tool)}</span>'
                f'<span class=path>{_e(query.paths_text(e))}</span>{stats}'
                f'<span class=status>{_e(status)}</span><span class=age>{_e(query.age(now - e.time))}</span>'
                f'{button}</summary><div class=body>{diffs}</div></details>')

    def _form(self, fields: dict[str, str], label: str, title: str) -> str:
        hidden = "".join(f'<input type=hidden name="{_e(k)}" value="{_e(v)}">' for k, v in fields.items() if v)
        return (f'<form method=post action="{_e(self.prefix)}/undo"><input type=hidden name=csrf '
                f'value="{_e(self.token)}">{hidden}<button class=undo type=submit title="{_e(title)}">'
                f"{_e(label)}</button></form>")

    # -- POST /changes/undo ----------------------------------------------------------------------

    async def undo(self, request: Request) -> Response:
        if not self.may(request):
            return PlainTextResponse("forbidden", status_code=403)
        raw = await request.body()
        if len(raw) > _MAX_FORM:
            return PlainTextResponse("form too large", status_code=413)
        form = urllib.parse.parse_qs(raw.decode("utf-8", "replace"))
        token = (form.get("csrf") or [""])[0]
        if not hmac.compare_digest(token.encode(), self.token.encode()):
            return PlainTextResponse("invalid or missing CSRF token: reload the page and try again", status_code=403)
        ids = form.get("id", [])
        connection = form["connection"][0] if form.get("connection") else None
        if not ids and not connection:
            return PlainTextResponse("say what to undo: id or connection", status_code=400)
        try:
            refused, lines = await anyio.to_thread.run_sync(self._undo, ids, connection)
        except locks.Busy as exc:
            refused, lines = True, [f"{exc}; nothing was changed, try again"]
        key = secrets.token_hex(8)
        self.results[key] = (refused, lines)
        while len(self.results) > _RESULTS_KEPT:
            self.results.popitem(last=False)
        back = {k: form[k][0] for k in ("root", "path", "client") if form.get(k)}
        back["result"] = key
        return RedirectResponse(f"{self.prefix}?{urllib.parse.urlencode(back)}#result", status_code=303)

    def _undo(self, ids: list[str], connection: str | None) -> tuple[bool, list[str]]:
        stores = [self.journal.store(p) for p in self.roots]
        chosen = query.select(stores, ids=ids, commands=False) if ids else []
        if connection:
            chosen += query.select(stores, connection=connection, commands=False)
        if not chosen:
            return True, ["nothing to undo: no such change"]
        report = undo(self.journal, list({f.entry.id: f for f in chosen}.values()), self.fds,
                      connection="page", client="rootbound changes page")
        return bool(report.refused), report.lines()


def _glob(text: str) -> str:
    """What a person types in the path box: a glob, or a plain fragment (matched anywhere)."""
    return text if any(c in text for c in "*?[") else f"*{text}*"


def _by_connection(found: list[query.Found]) -> list[tuple[str | None, list[query.Found]]]:
    groups: OrderedDict[str | None, list[query.Found]] = OrderedDict()
    for f in found:  # newest first: a group's place is its newest change's
        groups.setdefault(f.entry.connection, []).append(f)
    return list(groups.items())


def changes_routes(journal: Journal, roots: Mapping[str, tuple[str, int]], may: Callable[[Request], bool], *,
                   prefix: str = "/changes") -> list[BaseRoute]:
    """The page's routes. `roots`: root real path -> (root name, open directory handle)."""
    page = _Page(journal, {p: _Root(name, fd) for p, (name, fd) in roots.items()}, may, prefix)
    return [Route(prefix, page.show, methods=["GET"]), Route(f"{prefix}/undo", page.undo, methods=["POST"])]


def changes_app(journal: Journal, roots: Mapping[str, tuple[str, int]], may: Callable[[Request], bool], *,
                prefix: str = "/changes") -> Starlette:
    return Starlette(routes=changes_routes(journal, roots, may, prefix=prefix))
