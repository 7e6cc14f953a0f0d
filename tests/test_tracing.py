"""OpenTelemetry: the SDK's span per message is kept when the operator traces (a tracer provider installed before
the server starts, as `opentelemetry-instrument rootbound` does), and dropped otherwise (a no-op that cost ~0.1 ms of
CPU per message)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

SCRIPT = textwrap.dedent("""
    import sys
    import anyio
    from opentelemetry import trace
    from mcp import Client
    from rootbound.config import load_config
    from rootbound.server import App

    names = []

    class Tracer(trace.NoOpTracer):
        def start_as_current_span(self, name, *args, **kwargs):
            names.append(name)
            return super().start_as_current_span(name, *args, **kwargs)

    class Provider(trace.NoOpTracerProvider):
        def get_tracer(self, *args, **kwargs):
            return Tracer()

    if sys.argv[2] == "traced":
        trace.set_tracer_provider(Provider())

    async def main():
        app = App(load_config(sys.argv[1], env={}))
        if sys.argv[2] == "late":
            trace.set_tracer_provider(Provider())
        try:
            async with Client(app.server) as client:
                result = await client.call_tool("stat_file", {"path": "a.txt"})
                assert not result.is_error, result
        finally:
            app.close()
        print(sorted(set(names)))

    anyio.run(main)
""")


def _spans(tmp_path: Path, mode: str) -> str:
    (tmp_path / "ws").mkdir(exist_ok=True)
    (tmp_path / "ws" / "a.txt").write_text("a")
    config = tmp_path / "config.json"
    config.write_text('{"roots": [{"name": "ws", "path": "%s"}]}' % (tmp_path / "ws"))
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(config), mode], capture_output=True, text=True,
                          timeout=120, env={"XDG_STATE_HOME": str(tmp_path / "state"), "PATH": "/usr/bin:/bin",
                                                 "PYTHONPATH": os.pathsep.join(sys.path)})
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_an_operator_who_traces_gets_a_span_per_tool_call(tmp_path: Path) -> None:
    assert "tools/call stat_file" in _spans(tmp_path, "traced")


def test_without_a_tracer_at_start_no_span_is_made(tmp_path: Path) -> None:
    """The choice is made at start: a provider installed later (by nobody rootbound runs) finds no spans made."""
    assert _spans(tmp_path, "late") == "[]"
