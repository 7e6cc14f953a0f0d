"""A minimal W3C WebDriver client over http.client, for Debian's chromedriver driving headless Chromium.

No dependency: WebDriver is JSON over HTTP, and the few commands the page test needs fit here."""

from __future__ import annotations

import base64
import contextlib
import http.client
import json
import os
import shutil
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

CHROMIUM = "/usr/bin/chromium"
ELEMENT = "element-6066-11e4-a52e-4f735466cecf"
# As the machine notes say: without the background-networking flags Chromium tries hosts it cannot reach.
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage", "--window-size=1280,900"]


def available() -> str | None:
    """Why the browser test cannot run here, or None."""
    if not os.access(CHROMIUM, os.X_OK):
        return f"{CHROMIUM} is not installed (apt-get install chromium chromium-driver; .ci/run does)"
    if shutil.which("chromedriver") is None:
        return "chromedriver is not installed (apt-get install chromium-driver; .ci/run does)"
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class WebDriverError(Exception):
    pass


class Browser:
    """chromedriver on a loopback port, one session of headless Chromium with its own profile."""

    def __init__(self, profile: Path) -> None:
        self.port = free_port()
        self.proc = subprocess.Popen([shutil.which("chromedriver") or "chromedriver", f"--port={self.port}"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while True:
            try:
                if self._call("GET", "/status").get("ready"):
                    break
            except (OSError, WebDriverError):
                pass
            if time.monotonic() > deadline:
                self.proc.kill()
                raise WebDriverError("chromedriver did not start")
            time.sleep(0.1)
        caps = {"capabilities": {"alwaysMatch": {"browserName": "chrome", "goog:chromeOptions": {
            "binary": CHROMIUM, "args": [*FLAGS, f"--user-data-dir={profile}"]}}}}
        self.session = self._call("POST", "/session", caps)["sessionId"]

    def _call(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        try:
            conn.request(method, path, json.dumps(body) if body is not None else None,
                         {"Content-Type": "application/json"})
            reply = json.loads(conn.getresponse().read() or b"{}")
        finally:
            conn.close()
        value = reply.get("value")
        if isinstance(value, dict) and "error" in value:
            raise WebDriverError(f"{value['error']}: {value.get('message', '')[:300]}")
        return value

    def _s(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        return self._call(method, f"/session/{self.session}{path}", body)

    def get(self, url: str) -> None:
        self._s("POST", "/url", {"url": url})

    @property
    def url(self) -> str:
        return str(self._s("GET", "/url"))

    def find(self, css: str) -> str:
        return str(self._s("POST", "/element", {"using": "css selector", "value": css})[ELEMENT])

    def find_all(self, css: str) -> list[str]:
        return [e[ELEMENT] for e in self._s("POST", "/elements", {"using": "css selector", "value": css})]

    def click(self, element: str) -> None:
        self._s("POST", f"/element/{element}/click", {})

    def type(self, element: str, text: str) -> None:
        self._s("POST", f"/element/{element}/value", {"text": text})

    def text(self, element: str) -> str:
        return str(self._s("GET", f"/element/{element}/text"))

    def run(self, script: str, *args: Any) -> Any:
        return self._s("POST", "/execute/sync", {"script": script, "args": list(args)})

    def screenshot(self, path: Path) -> Path:
        path.write_bytes(base64.b64decode(self._s("GET", "/screenshot")))
        return path

    def wait(self, script: str, timeout: float = 10.0) -> Any:
        """Until `script` returns something truthy."""
        deadline = time.monotonic() + timeout
        while True:
            got = self.run(script)
            if got or time.monotonic() > deadline:
                return got
            time.sleep(0.05)

    def close(self) -> None:
        with contextlib.suppress(OSError, WebDriverError):
            self._call("DELETE", f"/session/{self.session}")
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
