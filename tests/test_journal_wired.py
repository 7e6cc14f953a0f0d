"""The journal wired into the server (issue 17 phase 2): every change a file tool makes is recorded before it
happens, through the real protocol, and `rootbound history` / `undo` on the command line see and revert it."""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
import yaml
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client

from .conftest import CommandServers, MakeServer, text_of, tree

pytestmark = pytest.mark.anyio

REPO = Path(__file__).resolve().parent.parent


def rootbound(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "rootbound", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=REPO)


def cli_config(tmp_path: Path, roots: dict[str, Path], **extra: Any) -> Path:
    """The config file the command line reads: the same roots and journal as the server's."""
    path = tmp_path / "cli.yaml"
    path.write_text(yaml.safe_dump({"roots": [{"name": n, "path": str(p)} for n, p in roots.items()],
                                    "journal": {"dir": str(tmp_path / "journal")}, **extra}))
    return path


def history(config: Path, *args: str) -> list[str]:
    out = rootbound("history", "--config", str(config), *args)
    assert out.returncode == 0, out.stderr
    return out.stdout.splitlines()


async def test_every_file_tool_is_journaled_and_undone_from_the_command_line(make_server: MakeServer,
                                                                             tmp_path: Path) -> None:
    ws = tmp_path / "workspace"
    ws.mkdir()
    (ws / "a.txt").write_text("one\n")
    (ws / "b.txt").write_text("bee\n")
    (ws / "d").mkdir()
    (ws / "d" / "x.txt").write_text("x\n")
    before = tree(ws)
    s = await make_server({"workspace": ws}, journal={"dir": str(tmp_path / "journal")})
    await s.ok("write_file", root="workspace", path="a.txt", content="two\n")
    await s.ok("write_file", root="workspace", path="a.txt", content="three\n", mode="append")
    await s.ok("edit_file", root="workspace", path="a.txt", old_string="two", new_string="TWO")
    await s.ok("patch_file", root="workspace", path="b.txt", patch="@@ -1 +1 @@\n-bee\n+BEE\n")
    await s.ok("write_file", root="workspace", path="new.txt", content="fresh\n", mode="create_only")
    await s.ok("create_folder", root="workspace", path="made")
    await s.ok("copy", source_root="workspace", source_path="a.txt", dest_root="workspace", dest_path="c.txt")
    await s.ok("copy", source_root="workspace", source_path="d", dest_root="workspace", dest_path="d2")
    await s.ok("move", source_root="workspace", source_path="b.txt", dest_root="workspace", dest_path="b2.txt")
    await s.ok("remove_file", root="workspace", path="c.txt")
    await s.ok("remove_folder", root="workspace", path="d")
    assert tree(ws) != before

    config = cli_config(tmp_path, {"workspace": ws})
    lines = history(config)
    tools = [next(w for w in line.split() if w in _TOOLS) for line in lines]
    assert tools == ["remove_folder", "remove_file", "move", "copy", "copy", "create_folder", "write_file",
                     "patch_file", "edit_file", "write_file", "write_file"]

    undone = rootbound("undo", "--config", str(config), "--since", "1h")
    assert undone.returncode == 0, undone.stdout + undone.stderr
    assert tree(ws) == before  # every change reverted, newest first


_TOOLS = {"write_file", "edit_file", "patch_file", "remove_file", "remove_folder", "create_folder", "copy", "move"}


async def test_journal_off_records_nothing(make_server: MakeServer, tmp_path: Path) -> None:
    ws = tmp_path / "workspace"
    s = await make_server({"workspace": ws}, journal="off")
    assert s.app.journal is None
    await s.ok("write_file", root="workspace", path="a.txt", content="x")
    assert not (tmp_path / "journal").exists()


def test_a_root_in_the_journal_directory_is_refused_at_start(tmp_path: Path) -> None:
    state = tmp_path / "state"
    inner = state / "rootbound" / "journal" / "some-root"
    inner.mkdir(parents=True)
    for root in (inner, state / "rootbound" / "journal"):
        out = subprocess.run([sys.executable, "-m", "rootbound", "check", "--root", f"j={root}"], capture_output=True,
                             text=True, timeout=60, cwd=REPO, env={**os.environ, "XDG_STATE_HOME": str(state)})
        assert out.returncode == 1, out.stdout
        assert "root 'j'" in out.stderr and "lies in the change journal's directory" in out.stderr
        assert "set journal.dir outside every root" in out.stderr
    # (a root holding journal.dir or state_dir is refused by the configuration already: test_journal_cli.py)


async def test_the_journal_directory_is_refused_as_a_client_root(make_server: MakeServer, tmp_path: Path) -> None:
    from .conftest import RootsClient

    journal = tmp_path / "journal"
    outside = tmp_path / "desk"
    outside.mkdir()
    (journal / "x").mkdir(parents=True)
    h = await make_server(mode="legacy", client_roots="replace", journal={"dir": str(journal)},
                          roots_client=RootsClient((f"file://{journal}", "j"), (f"file://{journal}/x", "jx"),
                                                   (f"file://{tmp_path}", "all"), (f"file://{outside}", "desk")))
    got = await h.ok("list_roots")
    assert [r["name"] for r in got["roots"]] == ["desk"]


async def test_a_journal_failure_refuses_the_change(make_server: MakeServer, tmp_path: Path) -> None:
    ws = tmp_path / "workspace"
    ws.mkdir()
    (ws / "a.txt").write_text("keep me\n")
    s = await make_server({"workspace": ws}, journal={"dir": str(tmp_path / "journal")})
    await s.ok("write_file", root="workspace", path="a.txt", content="changed once\n")
    # Pull the journal's folder away under the running server: its blobs cannot be stored any more.
    for folder in (tmp_path / "journal").iterdir():
        if folder.is_dir() and folder.name != "writers":
            shutil.rmtree(folder)
            folder.write_text("in the way")
    text = await s.err("write_file", root="workspace", path="a.txt", content="changed twice\n")
    assert "journal could not record this change, so it was not made" in text
    assert (ws / "a.txt").read_text() == "changed once\n"
    assert "journal" in (await s.err("remove_file", root="workspace", path="a.txt"))
    assert (ws / "a.txt").exists()


async def test_a_command_shows_in_the_history_between_two_changes(servers: CommandServers, tmp_path: Path) -> None:
    ws = tmp_path / "workspace"
    h = await servers({"allowed": ["touch"]}, roots={"workspace": ws}, journal={"dir": str(tmp_path / "journal")})
    await h.ok("write_file", root="workspace", path="a.txt", content="1\n")
    await h.ok("execute_command", command="touch made-by-command", root="workspace")
    await h.ok("write_file", root="workspace", path="a.txt", content="2\n")
    lines = history(cli_config(tmp_path, {"workspace": ws}))
    assert len(lines) == 3
    assert "write_file" in lines[0] and "write_file" in lines[2]
    assert "$ touch made-by-command" in lines[1] and "not journaled" in lines[1]


async def test_a_command_answers_while_another_process_holds_the_journal(servers: CommandServers,
                                                                         tmp_path: Path) -> None:
    """A command's note is written off the answer's path: a journal that another process holds locked (an undo
    from the command line, say) does not hold up the command's result, as SQLite's 30 s busy wait once did. The
    note still lands, in its place in the timeline."""
    ws = tmp_path / "workspace"
    h = await servers({"allowed": ["echo"]}, roots={"workspace": ws}, journal={"dir": str(tmp_path / "journal")})
    await h.ok("write_file", root="workspace", path="a.txt", content="1\n")
    (db_path,) = (tmp_path / "journal").glob("*/journal.db")
    other = sqlite3.connect(db_path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")  # the write lock, held as a long transaction holds it
    try:
        with anyio.fail_after(10):  # the busy wait is 30 s
            result = await h.call("execute_command", command="echo hi", root="workspace")
            # A reader of the journal in this process (history, undo, the /changes page) writes waiting notes
            # first: it tries for a moment, then reads without them, rather than waiting out the busy timeout.
            assert h.app.journal is not None
            await anyio.to_thread.run_sync(h.app.journal.store(str(ws.resolve())).listing)
        assert not result.is_error and "hi" in text_of(result), text_of(result)
    finally:
        other.execute("COMMIT")
        other.close()
    await h.ok("write_file", root="workspace", path="a.txt", content="2\n")
    lines = history(cli_config(tmp_path, {"workspace": ws}))
    assert len(lines) == 3, lines
    assert "$ echo hi" in lines[1]


# -- the agent's tools: history and undo, each connection its own changes only ------------------------------------

ROOTBOUND = str(Path(sys.executable).with_name("rootbound"))


def stdio(config: Path, errlog: Any) -> Client:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ROOTBOUND_", "ALLOWED_"))}
    return Client(stdio_client(StdioServerParameters(command=ROOTBOUND, args=["--config", str(config)], env=env),
                               errlog=errlog), mode="legacy")


async def test_history_and_undo_reach_only_the_connections_own_changes(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "a.txt").write_text("original a\n")
    (ws / "b.txt").write_text("original b\n")
    config = cli_config(tmp_path, {"ws": ws})
    data = yaml.safe_load(config.read_text())
    data["roots"][0]["allowed_tools"] = ["*", "history", "undo"]
    config.write_text(yaml.safe_dump(data))
    with open(tmp_path / "err.log", "w") as err:
        async with stdio(config, err) as one, stdio(config, err) as two:
            assert {"history", "undo"} <= {t.name for t in (await one.list_tools()).tools}
            wrote = await one.call_tool("write_file", {"root": "ws", "path": "a.txt", "content": "by one\n"})
            assert not wrote.is_error
            assert not (await two.call_tool("write_file", {"root": "ws", "path": "b.txt", "content": "by two\n"})
                        ).is_error
            mine = (await one.call_tool("history", {"root": "ws"})).structured_content
            theirs = (await two.call_tool("history", {"root": "ws"})).structured_content
            assert mine is not None and theirs is not None, text_of(await one.call_tool("history", {"root": "ws"}))
            assert len(mine["changes"]) == 1 and "a.txt" in mine["changes"][0]
            assert len(theirs["changes"]) == 1 and "b.txt" in theirs["changes"][0]
            one_id, two_id = mine["changes"][0].split()[0], theirs["changes"][0].split()[0]

            refused = await two.call_tool("undo", {"root": "ws", "ids": [one_id]})
            assert refused.is_error and "is not your change" in text_of(refused)
            assert (ws / "a.txt").read_text() == "by one\n"

            undone = await one.call_tool("undo", {"root": "ws", "ids": [one_id]})
            assert not undone.is_error, text_of(undone)
            assert undone.structured_content is not None and undone.structured_content["undone"] == [one_id]
            assert (ws / "a.txt").read_text() == "original a\n"
            assert (ws / "b.txt").read_text() == "by two\n"  # the other connection's change stands
            assert (await two.call_tool("undo", {"root": "ws", "ids": [two_id], "dry_run": True})).structured_content


async def test_history_and_undo_are_off_unless_allowed(make_server: MakeServer) -> None:
    s = await make_server()
    names = {t.name for t in (await s.client.list_tools()).tools}
    assert "history" not in names and "undo" not in names


# -- GET /changes over real HTTP, behind the token, Host and Origin checks of /mcp ------------------------------


async def test_the_changes_page_is_behind_the_token_host_and_origin_checks(tmp_path: Path) -> None:
    import httpx2

    from .test_http import TOKEN, http_server, mcp_client

    with http_server(tmp_path, auth_token=TOKEN, journal={"dir": str(tmp_path / "journal")}) as base:
        async with mcp_client(base, TOKEN) as c:
            wrote = await c.call_tool("write_file", {"root": "workspace", "path": "seen.txt", "content": "hi\n"})
            assert not wrote.is_error
        page = f"{base}/changes"
        assert httpx2.get(page).status_code == 403  # no token
        assert httpx2.get(page, params={"token": "wrong"}).status_code == 403
        assert httpx2.get(page, headers={"Authorization": "Bearer wrong"}).status_code == 403
        with_header = httpx2.get(page, headers={"Authorization": f"Bearer {TOKEN}"})
        assert with_header.status_code == 200 and "seen.txt" in with_header.text

        signed = httpx2.get(page, params={"token": TOKEN, "path": "seen"})
        assert signed.status_code == 303 and signed.headers["location"] == "/changes?path=seen"  # token dropped
        cookie = signed.headers["set-cookie"]
        assert "HttpOnly" in cookie and "SameSite=strict" in cookie and TOKEN not in cookie
        session = signed.cookies["rootbound_changes"]
        shown = httpx2.get(page, cookies={"rootbound_changes": session})
        assert shown.status_code == 200 and "seen.txt" in shown.text and TOKEN not in shown.text
        assert httpx2.get(page, cookies={"rootbound_changes": "made-up"}).status_code == 403

        # The same Host and Origin fences as /mcp, even with a good cookie.
        good = {"rootbound_changes": session}
        assert httpx2.get(page, cookies=good, headers={"Host": "evil.example"}).status_code == 403
        assert httpx2.get(page, cookies=good, headers={"Origin": "http://evil.example"}).status_code == 403
        posted = httpx2.post(f"{page}/undo", cookies=good, headers={"Origin": "http://evil.example"},
                             data={"csrf": "x", "id": "y"})
        assert posted.status_code == 403
    assert (tmp_path / "workspace" / "seen.txt").read_text() == "hi\n"


# -- a server killed at random moments while it overwrites a 1 MB file: the journal and the file always agree ------


def _consistent(store: Any, root_fd: int, initial: str) -> list[Any]:
    """The file's state agrees with the journal: nothing pending, and the newest applied entry left what is there.
    Returns the entries."""
    from rootbound.journal.model import APPLIED, PENDING
    from rootbound.journal.recovery import current_digest

    entries = store.entries()
    assert not [e.id for e in entries if e.status == PENDING], "an entry was left pending after a restart"
    now = current_digest(root_fd, "big.bin")
    applied = [e for e in entries if e.status == APPLIED]
    expected = applied[0].paths[0].after if applied else initial
    assert now == expected, f"the file is {now}, the journal says {expected}"
    return entries


def test_a_server_killed_during_1mb_overwrites_leaves_journal_and_file_consistent(tmp_path: Path) -> None:
    import hashlib
    import json
    import multiprocessing
    import random
    import signal
    import time

    from rootbound.journal.change import Journal
    from rootbound.journal.settings import resolve

    ws = tmp_path / "ws"
    ws.mkdir()
    first = b"initial\n" * (1 << 17)
    (ws / "big.bin").write_bytes(first)
    config = cli_config(tmp_path, {"ws": ws})
    settings = resolve(str(tmp_path / "journal"), None, [str(ws)])
    assert settings is not None
    journal = Journal(settings)
    store = journal.store(str(ws.resolve()))
    root_fd = os.open(ws, os.O_RDONLY | os.O_DIRECTORY)
    ctx = multiprocessing.get_context("forkserver")
    # And what a server loads by its first call (the tool modules, the grep helper): the write must not wait for
    # imports here, or nearly every kill would land before it.
    ctx.set_forkserver_preload(["rootbound.cli", "rootbound.server", "rootbound.grep.helper", "tests._killed_server",
                                *(f"rootbound.tools.{m}" for m in ("reading", "writing", "editing", "transfer",
                                                                   "search", "history", "commands"))])
    from ._killed_server import serve

    init = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "killer", "version": "0"}}}
    rng = random.Random(17)
    seen: dict[str, int] = {}  # what each kill left: no entry (killed before ready), not applied, applied
    known: set[str] = set()
    started = time.monotonic()
    try:
        for i in range(101):  # the 101st start settles the 100th kill
            fin, fout = tmp_path / f"in-{i}", tmp_path / f"out-{i}"
            os.mkfifo(fin)
            os.mkfifo(fout)
            proc = ctx.Process(target=serve, args=(str(fin), str(fout), ["serve", "--config", str(config)]))
            proc.start()
            with open(fin, "wb", buffering=0) as to_server, open(fout, "rb") as from_server:
                to_server.write(json.dumps(init).encode() + b"\n")
                assert b'"id":0' in from_server.readline()  # up: start-up recovery has run
                entries = _consistent(store, root_fd, "file:" + hashlib.sha256(first).hexdigest())
                if i:
                    new = [e.status for e in entries if e.id not in known]
                    assert len(new) <= 1
                    outcome = new[0] if new else "no entry"
                    seen[outcome] = seen.get(outcome, 0) + 1
                known |= {e.id for e in entries}
                if i == 100:
                    proc.kill()
                    break
                body = (f"{i:05d}".encode() + b"y" * 1018 + b"\n") * 1024
                call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
                    "name": "write_file", "arguments": {"root": "ws", "path": "big.bin", "content": body.decode()}}}
                to_server.write(b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n'
                                + json.dumps(call).encode() + b"\n")
                time.sleep(rng.uniform(0, 0.08))  # a random moment: before, during or after the change
                os.kill(proc.pid, signal.SIGKILL)
            proc.join(10)
    finally:
        os.close(root_fd)
        journal.close()
    print("what the kills left:", seen)
    # Kills landed at different moments: some writes were made and journaled, some were never made at all.
    assert sum(seen.values()) == 100 and seen.get("applied", 0) >= 5, seen
    assert seen.get("no entry", 0) + seen.get("not_applied", 0) >= 5, seen
    assert time.monotonic() - started < 120
