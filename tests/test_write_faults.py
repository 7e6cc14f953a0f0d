"""Bad input and faults for the writing tools: a server killed mid-overwrite, concurrent writers,
0-byte and 100 MB writes, outside symlinks at every position for every tool, the root as a target."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from rootbound.fs import atomic
from rootbound.fs.content import write_all
from tests.conftest import Harness, MakeServer, text_of

ROOTBOUND = str(Path(sys.executable).with_name("rootbound"))


def snapshot(path: Path) -> dict[str, bytes | str]:
    out: dict[str, bytes | str] = {}
    for dirpath, dirs, files in os.walk(path):
        for name in dirs + files:
            p = Path(dirpath) / name
            rel = str(p.relative_to(path))
            out[rel] = f"-> {os.readlink(p)}" if p.is_symlink() else "dir" if p.is_dir() else p.read_bytes()
    return out


# -- a server killed in the middle of an overwrite -------------------------------------------------


def _send(proc: subprocess.Popen[bytes], message: dict[str, Any]) -> None:
    assert proc.stdin is not None
    proc.stdin.write(json.dumps(message).encode() + b"\n")
    proc.stdin.flush()


def _temp_open(pid: int, directory: str) -> bool:
    """Does the server hold a file open in `directory` that is not the target (an O_TMPFILE inode or a temp name)?"""
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return False
    for fd in fds:
        try:
            where = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if where.startswith(directory + "/") and ("/#" in where or atomic.TEMP_PREFIX in where):
            return True
    return False


def _kill_mid_overwrite(ws: Path, old: bytes, new: str, extra_delay: float) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ROOTBOUND_", "ALLOWED_"))}
    proc = subprocess.Popen([ROOTBOUND, "--root", f"ws={ws}", "--log-level", "ERROR"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
    try:
        _send(proc, {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}})
        assert proc.stdout is not None
        assert json.loads(proc.stdout.readline())["id"] == 1
        _send(proc, {"jsonrpc": "2.0", "method": "notifications/initialized"})
        call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
            "name": "write_file", "arguments": {"root": "ws", "path": "big.txt", "content": new}}}
        threading.Thread(target=_send, args=(proc, call), daemon=True).start()
        deadline = time.monotonic() + 60
        seen = False
        while time.monotonic() < deadline and proc.poll() is None:
            if _temp_open(proc.pid, str(ws)):
                seen = True
                break
        assert seen, "never caught the server while it was writing the new content"
        time.sleep(extra_delay)
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


@pytest.mark.anyio
@pytest.mark.parametrize("extra_delay", [0.0, 0.05])
async def test_sigkill_mid_overwrite_leaves_old_or_new_and_no_temp_files(
        make_server: MakeServer, workspace: Path, extra_delay: float) -> None:
    """A real `rootbound` stdio process is killed (SIGKILL) while it writes a 48 MB overwrite."""
    old = b"old\n" * (256 * 1024)  # 1 MiB
    new = "N" * (48 * 1024 * 1024)
    (workspace / "big.txt").write_bytes(old)
    await anyio.to_thread.run_sync(_kill_mid_overwrite, workspace, old, new, extra_delay)
    data = (workspace / "big.txt").read_bytes()
    assert data in (old, new.encode()), f"torn file: {len(data)} bytes"
    assert os.listdir(workspace) == ["big.txt"]  # no temporary file left behind, named or not
    h = await make_server()  # and what the agent sees after a restart
    listing = await h.ok("list_folder", root="workspace", path="")
    assert [e["name"] for e in listing["entries"]] == ["big.txt"]


# -- concurrency ----------------------------------------------------------------------------------


@pytest.fixture(params=["unnamed", "named"])
def temp_style(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Run over both temp-file strategies: O_TMPFILE (the default) and the named O_EXCL fallback
    used on filesystems without O_TMPFILE."""
    if request.param == "named":
        monkeypatch.setattr(atomic, "_HAVE_PROC_FD", False)
    return str(request.param)


@pytest.mark.anyio
async def test_twenty_concurrent_overwrites_end_with_one_full_content(make_server: MakeServer, workspace: Path,
                                                                      temp_style: str) -> None:
    h = await make_server()
    contents = [f"client {i:02d}\n".encode() * 40_000 for i in range(20)]  # ~440 KB each
    errors: list[str] = []

    async def writer(i: int) -> None:
        async with Client(h.app.server) as client:
            result = await client.call_tool("write_file", {"root": "workspace", "path": "shared.txt",
                                                           "content": contents[i].decode()})
            if result.is_error:
                errors.append(text_of(result))

    async with anyio.create_task_group() as tg:
        for i in range(20):
            tg.start_soon(writer, i)
    assert errors == []
    assert (workspace / "shared.txt").read_bytes() in contents
    assert os.listdir(workspace) == ["shared.txt"]


@pytest.mark.anyio
async def test_two_concurrent_create_only_exactly_one_wins(make_server: MakeServer, workspace: Path,
                                                          temp_style: str) -> None:
    h = await make_server()
    async with Client(h.app.server) as a, Client(h.app.server) as b:
        for round_ in range(25):
            path = f"race-{round_}.txt"
            results: dict[str, Any] = {}

            async def create(name: str, client: Client, path: str = path, results: dict[str, Any] = results
                             ) -> None:
                results[name] = await client.call_tool(
                    "write_file", {"root": "workspace", "path": path, "content": name * 1000, "mode": "create_only"})

            async with anyio.create_task_group() as tg:
                tg.start_soon(create, "A", a)
                tg.start_soon(create, "B", b)
            winners = [n for n, r in results.items() if not r.is_error]
            losers = [r for r in results.values() if r.is_error]
            assert len(winners) == 1 and len(losers) == 1, results
            assert text_of(losers[0]) == f"file already exists: {path}; use overwrite mode to replace"
            assert (workspace / path).read_text() == winners[0] * 1000


def test_create_only_primitive_is_race_free_without_the_server_lock(tmp_path: Path, temp_style: str) -> None:
    """Two threads linking into one name with no lock held: the kernel lets exactly one win."""
    dirfd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for round_ in range(100):
            name, wins, barrier = f"n{round_}", [], threading.Barrier(2)

            def create(tag: bytes, name: str = name, wins: list[bytes] = wins,
                       barrier: threading.Barrier = barrier) -> None:
                def fill(fd: int) -> int:
                    barrier.wait()  # both have written their data; now both try to link it in
                    return write_all(fd, tag)

                try:
                    atomic.write_file(dirfd, name, fill, replace=False, perms=0o644)
                    wins.append(tag)
                except FileExistsError:
                    pass

            threads = [threading.Thread(target=create, args=(t,)) for t in (b"A", b"B")]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            assert len(wins) == 1 and (tmp_path / name).read_bytes() == wins[0]
    finally:
        os.close(dirfd)
    assert not [n for n in os.listdir(tmp_path) if atomic.is_temp_name(n)]


@pytest.mark.anyio
async def test_concurrent_patches_are_all_applied(server: Harness, workspace: Path) -> None:
    (workspace / "f.txt").write_text("".join(f"line {i}\n" for i in range(1, 21)))
    errors: list[str] = []

    async def patch(i: int) -> None:
        result = await server.call("patch_file", root="workspace", path="f.txt",
                                   patch=f"@@ -{i} +{i} @@\n-line {i}\n+LINE {i}\n")
        if result.is_error:
            errors.append(text_of(result))

    async with anyio.create_task_group() as tg:
        for i in range(1, 21, 2):
            tg.start_soon(patch, i)
    assert errors == []
    lines = (workspace / "f.txt").read_text().splitlines()
    assert lines == [f"LINE {i}" if i % 2 else f"line {i}" for i in range(1, 21)]


# -- sizes ----------------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_zero_byte_writes(server: Harness, workspace: Path, temp_style: str) -> None:
    got = await server.ok("write_file", root="workspace", path="empty.txt", content="", mode="create_only")
    assert got["size"] == 0 and got["sha256"] == hashlib.sha256(b"").hexdigest()
    assert (workspace / "empty.txt").read_bytes() == b""
    (workspace / "full.txt").write_text("something")
    await server.ok("write_file", root="workspace", path="full.txt", content="")
    assert (workspace / "full.txt").read_bytes() == b""
    await server.ok("write_file", root="workspace", path="full.txt", content="", mode="append")
    assert (workspace / "full.txt").stat().st_size == 0
    assert sorted(os.listdir(workspace)) == ["empty.txt", "full.txt"]


@pytest.mark.anyio
async def test_hundred_megabyte_write(server: Harness, workspace: Path) -> None:
    content = "0123456789abcdef" * (100 * 1024 * 1024 // 16)
    got = await server.ok("write_file", root="workspace", path="big.bin", content=content)
    assert got["size"] == 100 * 1024 * 1024 == (workspace / "big.bin").stat().st_size
    digest = await server.ok("hash_file", root="workspace", path="big.bin")
    assert digest["hash"] == got["sha256"] == hashlib.sha256(content.encode()).hexdigest()


# -- outside symlinks at every position, for every tool -------------------------------------------

DENIED = "path resolves outside root boundary"


def _escape_tree(ws: Path, outside: Path) -> None:
    (outside / "sub").mkdir()
    (outside / "sub/victim.txt").write_text("victim")
    (ws / "esc_dir").symlink_to(outside)  # absolute link to an outside directory
    (ws / "esc_rel").symlink_to("../outside")  # relative link that climbs out
    (ws / "esc_file").symlink_to(outside / "secret.txt")  # link to an outside file
    (ws / "esc_dangling").symlink_to(outside / "new.txt")  # dangling link to an outside name
    (ws / "inner").mkdir()
    (ws / "inner/up").symlink_to("../../outside/sub")
    (ws / "ok.txt").write_text("ok\n")
    (ws / "okdir").mkdir()


# Paths that lead out of the root through a *non-final* component, or `..`: every tool must refuse them.
THROUGH = ["esc_dir/secret.txt", "esc_rel/new.txt", "inner/up/victim.txt", "esc_dir/sub/deeper/x.txt",
           "../outside/secret.txt", "okdir/../../outside/secret.txt", "esc_dangling/x"]
# Outside links as the *final* component: refused by tools that follow it (write, patch, create, copy).
FINAL = ["esc_file", "esc_dangling", "esc_dir", "esc_rel", "inner/up"]


def _calls(path: str) -> list[tuple[str, dict[str, str]]]:
    ws = "workspace"
    return [
        ("write_file", {"root": ws, "path": path, "content": "pwned"}),
        ("write_file", {"root": ws, "path": path, "content": "pwned", "mode": "append"}),
        ("write_file", {"root": ws, "path": path, "content": "pwned", "mode": "create_only"}),
        ("patch_file", {"root": ws, "path": path, "patch": "@@ -0,0 +1 @@\n+pwned\n"}),
        ("edit_file", {"root": ws, "path": path, "old_string": "", "new_string": "pwned"}),
        ("edit_file", {"root": ws, "path": path, "old_string": "OUTSIDE-SECRET", "new_string": "pwned"}),
        ("create_folder", {"root": ws, "path": path}),
        ("remove_file", {"root": ws, "path": path}),
        ("remove_folder", {"root": ws, "path": path}),
        ("copy", {"source_root": ws, "source_path": "ok.txt", "dest_root": ws, "dest_path": path}),
        ("copy", {"source_root": ws, "source_path": path, "dest_root": ws, "dest_path": "stolen"}),
        ("move", {"source_root": ws, "source_path": "ok.txt", "dest_root": ws, "dest_path": path}),
        ("move", {"source_root": ws, "source_path": path, "dest_root": ws, "dest_path": "stolen"}),
    ]


@pytest.mark.anyio
@pytest.mark.parametrize("path", THROUGH)
async def test_outside_symlink_in_the_middle_is_refused_by_every_tool(
        server: Harness, workspace: Path, outside: Path, resolver: str, path: str) -> None:
    _escape_tree(workspace, outside)
    before_out, before_ws = snapshot(outside), snapshot(workspace)
    for tool, arguments in _calls(path):
        result = await server.client.call_tool(tool, arguments)
        assert result.is_error and text_of(result) == DENIED, (tool, arguments, text_of(result))
    assert snapshot(outside) == before_out
    assert snapshot(workspace) == before_ws


@pytest.mark.anyio
@pytest.mark.parametrize("path", FINAL)
async def test_outside_symlink_as_final_component_never_reaches_outside(
        server: Harness, workspace: Path, outside: Path, resolver: str, path: str) -> None:
    _escape_tree(workspace, outside)
    before_out = snapshot(outside)
    for tool, arguments in _calls(path):
        result = await server.client.call_tool(tool, arguments)
        follows = tool in ("write_file", "patch_file", "edit_file", "create_folder") or (
            tool == "copy" and (arguments["dest_path"] == path or arguments["source_path"] == path)) or (
            tool == "move" and arguments["dest_path"] == path)
        if follows:  # these look through the link: refused
            assert result.is_error and text_of(result) == DENIED, (tool, arguments, text_of(result))
        # The others act on the link itself (remove_file deletes it, move moves it): allowed, never outside.
        assert snapshot(outside) == before_out, (tool, arguments)
        _escape_tree_restore(workspace, outside)
    assert not (workspace / "stolen").exists() or (workspace / "stolen").is_symlink()


def _escape_tree_restore(ws: Path, outside: Path) -> None:
    """Put back links a previous call legitimately removed or moved, so each call sees the same tree."""
    for stray in ("stolen",):
        if os.path.lexists(ws / stray):
            os.unlink(ws / stray)
    links = {"esc_dir": str(outside), "esc_rel": "../outside", "esc_file": str(outside / "secret.txt"),
             "esc_dangling": str(outside / "new.txt"), "inner/up": "../../outside/sub"}
    for name, target in links.items():
        if not os.path.lexists(ws / name):
            (ws / name).symlink_to(target)
    if not (ws / "ok.txt").exists():
        (ws / "ok.txt").write_text("ok\n")


# -- the root itself as a target ------------------------------------------------------------------


@pytest.mark.anyio
@pytest.mark.parametrize("spelling", ["", ".", "/", "okdir/.."])
async def test_root_itself_as_target(server: Harness, workspace: Path, spelling: str) -> None:
    (workspace / "okdir").mkdir()
    (workspace / "ok.txt").write_text("ok\n")
    before = snapshot(workspace)
    ws = "workspace"
    assert "root directory" in await server.err("write_file", root=ws, path=spelling, content="x")
    assert "root directory" in await server.err("patch_file", root=ws, path=spelling, patch="@@ -0,0 +1 @@\n+x\n")
    assert await server.err("remove_file", root=ws, path=spelling) == "cannot remove root directory"
    assert await server.err("remove_folder", root=ws, path=spelling) == "cannot remove root directory"
    assert await server.err("move", source_root=ws, source_path=spelling, dest_root=ws,
                            dest_path="elsewhere") == "cannot move root directory"
    assert "into itself" in await server.err("copy", source_root=ws, source_path=spelling, dest_root=ws,
                                             dest_path="elsewhere")
    assert (await server.ok("create_folder", root=ws, path=spelling))["created"] is False
    assert snapshot(workspace) == before
    # As a destination, the root is an existing folder: things go inside it.
    got = await server.ok("copy", source_root=ws, source_path="okdir/../ok.txt", dest_root=ws, dest_path=spelling)
    assert got["destination"].endswith("ok.txt") and (workspace / "ok.txt").read_text() == "ok\n"
    (workspace / "okdir/inner.txt").write_text("i")
    got = await server.ok("move", source_root=ws, source_path="okdir/inner.txt", dest_root=ws, dest_path=spelling)
    assert got["destination"].endswith("inner.txt") and (workspace / "inner.txt").read_text() == "i"
