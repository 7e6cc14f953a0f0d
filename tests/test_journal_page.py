"""The /changes page in a real browser (headless Chromium from Debian, driven through chromedriver), served by
uvicorn on loopback for a journal filled through the seam: load, filter, undo one change, check the file on disk
and the page afterwards. Screenshots are kept in the test's temp directory (under pytest's --basetemp)."""

from __future__ import annotations

import http.client
import threading
import time
import urllib.parse
from collections.abc import Iterator
from pathlib import Path

import pytest
import uvicorn

from rootbound.journal.page import changes_app

from ._journal import Driver
from ._webdriver import Browser, available, free_port


class Served:
    """The page's app on 127.0.0.1 in a thread of this process."""

    def __init__(self, d: Driver, allow: bool = True) -> None:
        self.port = free_port()
        app = changes_app(d.journal, {d.root.real_path: (d.root.name, d.fd)}, lambda request: self.allow)
        self.allow = allow
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning",
                                                    lifespan="off"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            assert time.monotonic() < deadline, "uvicorn did not start"
            time.sleep(0.02)

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def request(self, method: str, path: str, body: str | None = None) -> tuple[int, str]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        try:
            conn.request(method, path, body, {"Content-Type": "application/x-www-form-urlencoded"} if body else {})
            reply = conn.getresponse()
            return reply.status, reply.read().decode()
        finally:
            conn.close()

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(10)


@pytest.fixture
def filled(tmp_path: Path) -> Iterator[Driver]:
    d = Driver(tmp_path)
    d.client = "claude-code"
    (d.path / "greeting.txt").write_text("hello\nworld\n")
    d.write("greeting.txt", "hello\nthere\nagain\n", connection="conn-a")
    d.write("src/app.py", "def main():\n    print('hi')\n", connection="conn-a")
    d.journal.note_command(root=d.root, tool="shell", command="pytest -q", cwd=".", exit_code=0,
                           connection="conn-a", client="claude-code")
    d.client = "cursor"
    (d.path / "notes.md").write_text("# Notes\n")
    d.write("notes.md", "# Notes\n\n- check the journal\n", connection="conn-b")
    yield d
    d.close()


def test_the_page_refuses_without_permission_and_a_post_without_its_token(filled: Driver) -> None:
    served = Served(filled, allow=False)
    try:
        assert served.request("GET", "/changes")[0] == 403
        served.allow = True
        status, body = served.request("GET", "/changes")
        assert status == 200 and "greeting.txt" in body and "conn-a" in body
        [entry] = [e for e in filled.store.entries() if e.paths and e.paths[0].path == "greeting.txt"]
        status, body = served.request("POST", "/changes/undo", urllib.parse.urlencode({"id": entry.id}))
        assert status == 403 and "CSRF" in body
        status, _ = served.request("POST", "/changes/undo", urllib.parse.urlencode({"id": entry.id,
                                                                                   "csrf": "guessed"}))
        assert status == 403
        assert (filled.path / "greeting.txt").read_text() == "hello\nthere\nagain\n"
        served.allow = False
        assert served.request("POST", "/changes/undo", "csrf=x&id=y")[0] == 403
    finally:
        served.stop()


def test_in_a_browser_load_filter_and_undo_one_change(filled: Driver, tmp_path: Path) -> None:
    missing = available()
    if missing:
        pytest.skip(f"browser test skipped: {missing}")
    served = Served(filled)
    shots = tmp_path / "screenshots"
    shots.mkdir()
    browser = Browser(tmp_path / "chromium-profile")
    try:
        browser.get(f"{served.base}/changes")
        browser.wait("return document.querySelectorAll('section.connection').length")
        groups = browser.run("return [...document.querySelectorAll('section.connection')]"
                             ".map(s => s.dataset.connection)")
        assert groups == ["conn-b", "conn-a"]  # grouped by connection, newest first
        changes = browser.run("return [...document.querySelectorAll('details.change')].map(d => d.dataset.paths)")
        assert changes == ["notes.md", "src/app.py", "greeting.txt"]
        assert "pytest -q" in browser.text(browser.find("div.command"))
        diff = browser.run("return [...document.querySelectorAll('#c-' + arguments[0] + ' pre.diff span')]"
                           ".map(s => s.className + ' ' + s.textContent)", _id(filled, "greeting.txt"))
        assert "del -world" in diff and "add +there" in diff and "add +again" in diff
        browser.screenshot(shots / "1-loaded.png")

        browser.run("const s = document.querySelector('select[name=client]'); s.value = 'cursor';"
                    "s.dispatchEvent(new Event('change'));")  # the page's script submits the filter
        browser.wait("return location.search.includes('client=cursor')")
        browser.wait("return document.readyState === 'complete'")
        shown = browser.run("return [...document.querySelectorAll('details.change')].map(d => d.dataset.paths)")
        assert shown == ["notes.md"]
        browser.screenshot(shots / "2-filtered-by-client.png")

        browser.get(f"{served.base}/changes")
        browser.wait("return document.querySelectorAll('details.change').length === 3")
        box = browser.find("#path")
        browser.type(box, "app")
        visible = browser.wait("const v = [...document.querySelectorAll('details.change:not(.hidden)')]"
                               ".map(d => d.dataset.paths); return v.length === 1 ? v : null")
        assert visible == ["src/app.py"]
        browser.screenshot(shots / "3-filtered-by-path.png")

        browser.get(f"{served.base}/changes")
        target = _id(filled, "greeting.txt")
        browser.wait("return document.querySelectorAll('details.change').length === 3")
        browser.click(browser.find(f"#c-{target} button.undo"))
        banner = browser.wait("const b = document.getElementById('result'); return b && b.textContent")
        assert f"{target}  restored" in banner and "undone as" in banner
        assert (filled.path / "greeting.txt").read_text() == "hello\nworld\n"  # on disk
        status = browser.text(browser.find(f"#c-{target} .status"))
        assert status.startswith("[undone by ")
        assert not browser.find_all(f"#c-{target} button.undo")  # no second undo of it
        tools = browser.run("return [...document.querySelectorAll('details.change .tool')].map(t => t.textContent)")
        assert tools[0] == "undo"  # the undo is journaled, newest
        browser.screenshot(shots / "4-after-undo.png")
    finally:
        browser.close()
        served.stop()
    assert all((shots / n).stat().st_size > 10_000 for n in ("1-loaded.png", "4-after-undo.png"))


def test_an_undo_from_the_page_is_refused_for_a_file_edited_since(filled: Driver, tmp_path: Path) -> None:
    served = Served(filled)
    try:
        target = _id(filled, "notes.md")
        (filled.path / "notes.md").write_text("edited by hand\n")
        _, body = served.request("GET", "/changes")
        token = body.split('name=csrf value="', 1)[1].split('"', 1)[0]
        conn = http.client.HTTPConnection("127.0.0.1", served.port, timeout=10)
        conn.request("POST", "/changes/undo", urllib.parse.urlencode({"csrf": token, "id": target}),
                     {"Content-Type": "application/x-www-form-urlencoded"})
        reply = conn.getresponse()
        assert reply.status == 303
        location = reply.getheader("Location") or ""
        conn.close()
        status, body = served.request("GET", location.split("#")[0])
        assert status == 200
        assert "banner refused" in body and "changed since, outside the journaled file tools" in body
        assert (filled.path / "notes.md").read_text() == "edited by hand\n"
    finally:
        served.stop()


def _id(d: Driver, path: str) -> str:
    return next(e.id for e in d.store.entries() if e.paths and e.paths[0].path == path and e.tool == "write_file")

