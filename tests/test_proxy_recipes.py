"""The TLS-proxy recipes in docs/deployment.md: they agree with the rootbound config beside them, Caddy
accepts its snippet, and the nginx recipe serves /health and a streaming MCP call for real.

The last two run only where `caddy` / `nginx` are installed (Debian: `apt-get install nginx caddy`);
the agreement checks always run.
"""

from __future__ import annotations

import re
import shutil
import socket
import ssl
import subprocess
import time
from pathlib import Path

import anyio
import httpx2
import pytest
import yaml
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.server.transport_security import TransportSecurityMiddleware, TransportSecuritySettings

from rootbound.config import Config
from rootbound.hosts import host_patterns
from tests.test_http import TOKEN, free_port, http_server

REPO = Path(__file__).resolve().parent.parent
DOC = (REPO / "docs" / "deployment.md").read_text()
UNITS = {"": 1, "s": 1, "m": 60, "h": 3600}


def recipe(kind: str) -> str:
    found = re.findall(rf"^```\w+ proxy={kind}\n(.*?)^```", DOC, re.S | re.M)
    assert len(found) == 1, f"docs/deployment.md must hold one ```... proxy={kind} snippet"
    return str(found[0])


def rootbound_config() -> Config:
    return Config.model_validate(yaml.safe_load(recipe("rootbound")))


def nginx_directives(text: str) -> dict[str, list[str]]:
    text = re.sub(r"#[^\n]*", "", text)
    found: dict[str, list[str]] = {}
    for name, value in re.findall(r"([a-z_0-9]+)[ \t]+([^;{}]*?)\s*;", text):
        found.setdefault(name, []).append(value)
    return found


def seconds(value: str) -> int:
    number, unit = re.fullmatch(r"(\d+)([smh]?)", value).groups()  # type: ignore[union-attr]
    return int(number) * UNITS[unit]


def accepts_host(config: Config, host: str) -> bool:
    """What the SDK's Host check, fed rootbound's patterns, says about `host`."""
    settings = TransportSecuritySettings(allowed_hosts=host_patterns(["127.0.0.1", "localhost", "[::1]",
                                                                      *config.allowed_hosts]))
    return TransportSecurityMiddleware(settings)._validate_host(host)


def test_nginx_recipe_agrees_with_the_rootbound_config() -> None:
    config = rootbound_config()
    d = nginx_directives(recipe("nginx"))
    assert d["proxy_pass"] == [f"http://{config.host}:{config.port}"]
    assert d["proxy_http_version"] == ["1.1"]
    assert d["proxy_buffering"] == ["off"], "SSE responses must not be buffered"
    assert d["proxy_cache"] == ["off"]
    headers = dict(v.split(None, 1) for v in d["proxy_set_header"])
    assert headers["Host"] in ("$host", "$http_host")
    # Authorization, Origin and the Mcp-* headers must reach rootbound as the client sent them.
    assert not {"Authorization", "Origin", "Mcp-Session-Id", "Mcp-Protocol-Version"} & set(headers)
    assert "underscores_in_headers" not in d and "proxy_pass_request_headers" not in d
    # nginx's $host is the name without a port; $http_host is what the client sent (maybe `name:443`).
    for name in d["server_name"][0].split():
        for host in (name, f"{name}:443"):
            assert accepts_host(config, host), f"rootbound would answer 421 to Host: {host}"
    assert seconds(d["proxy_read_timeout"][0]) > config.commands.max_timeout
    assert seconds(d["proxy_send_timeout"][0]) > config.commands.max_timeout
    size = d["client_max_body_size"][0]
    assert int(size[:-1]) * {"k": 1024, "m": 1024**2}[size[-1]] == config.max_request_body_size


def test_caddy_recipe_agrees_with_the_rootbound_config() -> None:
    config = rootbound_config()
    text = recipe("caddy")
    site = text.split("{", 1)[0].strip()
    # Caddy passes the client's Host through unchanged: `name`, or `name:443` from some clients.
    for host in (site, f"{site}:443"):
        assert accepts_host(config, host), f"rootbound would answer 421 to Host: {host}"
    assert re.search(rf"reverse_proxy {re.escape(config.host)}:{config.port}\b", text)
    assert re.search(r"flush_interval -1\b", text), "SSE responses must be flushed at once"
    assert seconds(re.search(r"read_timeout (\S+)", text).group(1)) > config.commands.max_timeout  # type: ignore[union-attr]
    assert re.search(r"max_size (\d+)MiB", text).group(1) == str(config.max_request_body_size >> 20)  # type: ignore[union-attr]
    assert "header_up" not in text  # Host, Origin and Authorization pass unchanged


@pytest.mark.skipif(shutil.which("caddy") is None, reason="caddy is not installed")
def test_caddy_accepts_the_recipe(tmp_path: Path) -> None:
    (tmp_path / "Caddyfile").write_text(recipe("caddy"))
    got = subprocess.run(["caddy", "adapt", "--config", str(tmp_path / "Caddyfile"), "--adapter", "caddyfile"],
                         capture_output=True, text=True, timeout=60)
    assert got.returncode == 0, got.stderr


def _certificate(tmp_path: Path) -> tuple[Path, Path]:
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-keyout", str(key),
                    "-out", str(cert), "-subj", "/CN=mcp.example.com",
                    "-addext", "subjectAltName=DNS:mcp.example.com,IP:127.0.0.1"],
                   check=True, capture_output=True, timeout=60)
    return cert, key


@pytest.mark.anyio
@pytest.mark.skipif(shutil.which("nginx") is None or shutil.which("openssl") is None,
                    reason="nginx and openssl are not installed")
async def test_nginx_recipe_for_real(tmp_path: Path) -> None:
    """TLS at nginx, rootbound behind it: /health, then a command's output streams through before it ends."""
    config = yaml.safe_load(recipe("rootbound"))
    for key in ("port", "roots"):  # http_server picks a free port and a temp root
        config.pop(key)
    config["commands"] = {**config.get("commands", {}), "allowed": ["echo", "sleep"]}
    cert, key = _certificate(tmp_path)
    tls_port = free_port()
    with http_server(tmp_path, auth_token=TOKEN, **config) as base:
        backend_port = base.rsplit(":", 1)[1]
        server = (recipe("nginx").replace("listen 443 ssl;", f"listen 127.0.0.1:{tls_port} ssl;")
                  .replace("/etc/ssl/certs/mcp.example.com.pem", str(cert))
                  .replace("/etc/ssl/private/mcp.example.com.key", str(key))
                  .replace("127.0.0.1:8091", f"127.0.0.1:{backend_port}"))
        conf = tmp_path / "nginx.conf"
        conf.write_text(f"daemon off;\nuser root;\npid {tmp_path}/nginx.pid;\nerror_log {tmp_path}/error.log;\n"
                        f"events {{}}\nhttp {{\naccess_log {tmp_path}/access.log;\n"
                        + "".join(f"{t}_temp_path {tmp_path}/{t};\n"
                                  for t in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))
                        + server + "}\n")
        nginx = subprocess.Popen(["nginx", "-c", str(conf), "-p", str(tmp_path)], stderr=subprocess.PIPE)
        try:
            deadline = time.monotonic() + 15
            while True:
                with socket.socket() as s:
                    if s.connect_ex(("127.0.0.1", tls_port)) == 0:
                        break
                assert nginx.poll() is None, nginx.stderr.read() if nginx.stderr else ""
                assert time.monotonic() < deadline, "nginx did not start"
                time.sleep(0.05)
            tls = ssl.create_default_context(cafile=str(cert))
            url = f"https://127.0.0.1:{tls_port}"
            # The client names the public host; nginx forwards `Host: mcp.example.com` (no port).
            headers = {"Host": "mcp.example.com", "Authorization": f"Bearer {TOKEN}"}
            health = httpx2.get(f"{url}/health", verify=tls, headers=headers)
            assert (health.status_code, health.text) == (200, "ok")
            progress: list[float] = []

            async def on_progress(done: float, total: float | None, message: str | None) -> None:
                progress.append(time.monotonic())

            async with httpx2.AsyncClient(verify=tls, headers=headers, timeout=30) as http, \
                    Client(streamable_http_client(f"{url}/mcp", http_client=http), mode="legacy") as client:
                with anyio.fail_after(30):
                    result = await client.call_tool(
                        "shell", {"command": "echo start && sleep 2 && echo end", "root": "workspace"},
                        progress_callback=on_progress)
                ended = time.monotonic()
            assert not result.is_error, result.content
            assert result.structured_content and result.structured_content["stdout"] == "start\nend\n"
            # Unbuffered: the first line arrived while the command was still sleeping.
            assert progress and ended - progress[0] > 1.5, (progress, ended)
        finally:
            nginx.terminate()
            nginx.wait(timeout=10)
