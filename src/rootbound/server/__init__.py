"""The MCP server: the App (`app.py`) and the transports that serve it (`stdio.py`, `http.py`).

`app` (roots, tools, dispatch, per-connection state, what is built once and closed),
`client_roots` + `roots_request` (a client's own roots), `stdio` + `inbound` (the stdio
transport), `http` + `disconnects`, `session_ids`, `listening` (Streamable HTTP under
uvicorn; `rootbound.hosts` reads the Host/Origin allowlists), `signals` and `lifecycle`
(the process from start to exit status). A request flows one way: transport → App →
`tools.base.call_tool` → handler → `Root` (or the command runner) → the OS.
"""

from rootbound.server.app import App, open_roots
from rootbound.server.lifecycle import run

__all__ = ["App", "open_roots", "run"]
