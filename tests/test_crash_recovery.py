"""A real `rootbound` process SIGKILLed at chosen points of an overwrite, a folder copy and moves across
filesystems (fault injection: ROOTBOUND_TEST_KILL_AT makes the server kill itself there); the next start
finishes or rolls back what it left, no temporary entry survives it, and none is ever listed."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
import yaml

from rootbound.fs import atomic
from tests.conftest import MakeServer

pytestmark = pytest.mark.anyio

ROOTBOUND = str(Path(sys.executable).with_name("rootbound"))


def tree(path: Path) -> dict[str, str]:
    out: dict[str, str] = {}
    for dirpath, dirs, files in os.walk(path):
        for name in dirs + files:
            p = Path(dirpath) / name
            rel = str(p.relative_to(path))
            out[rel] = f"-> {os.readlink(p)}" if p.is_symlink() else "dir" if p.is_dir() else p.read_text()
    return out


def temps(*dirs: Path) -> list[str]:
    return [str(Path(d) / n) for top in dirs for d, ds, fs in os.walk(top) for n in ds + fs if atomic.is_temp_name(n)]


@pytest.fixture
def other_fs(tmp_path: Path) -> Iterator[Path]:
    """A directory on another filesystem than tmp_path: a small tmpfs mounted for the test (CI runs as root),
    else one in /dev/shm."""
    mount = tmp_path / "tmpfs"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(mount)], capture_output=True)
    if done.returncode == 0:
        yield mount
        subprocess.run(["umount", "-l", str(mount)], check=False)
        return
    if os.access("/dev/shm", os.W_OK) and os.stat("/dev/shm").st_dev != os.stat(tmp_path).st_dev:
        path = Path(tempfile.mkdtemp(dir="/dev/shm", prefix="rootbound-test-"))
        yield path
        shutil.rmtree(path, ignore_errors=True)
        return
    pytest.skip(f"needs a second filesystem: mounting a tmpfs failed ({done.stderr.decode().strip()}) and "
                "/dev/shm is not a separate writable filesystem")


def _send(proc: subprocess.Popen[bytes], message: dict[str, Any]) -> None:
    assert proc.stdin is not None
    proc.stdin.write(json.dumps(message).encode() + b"\n")
    proc.stdin.flush()


def kill_during(config: Path, tool: str, arguments: dict[str, Any], kill_at: str) -> None:
    """Run one call on a real stdio server that SIGKILLs itself at `kill_at`; fail if it answers instead."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ROOTBOUND_", "ALLOWED_"))}
    env["ROOTBOUND_TEST_KILL_AT"] = kill_at
    proc = subprocess.Popen([ROOTBOUND, "--config", str(config), "--log-level", "ERROR"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
    try:
        _send(proc, {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}})
        assert proc.stdout is not None
        assert json.loads(proc.stdout.readline())["id"] == 1
        _send(proc, {"jsonrpc": "2.0", "method": "notifications/initialized"})
        _send(proc, {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                     "params": {"name": tool, "arguments": arguments}})
        answer = proc.stdout.readline()  # EOF when the server dies
        assert proc.wait(60) == -signal.SIGKILL, f"the server was not killed at {kill_at}: {answer[:300]!r}"
        assert not answer
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


def write_config(tmp_path: Path, roots: dict[str, Path]) -> Path:
    cfg = tmp_path / "server.yaml"
    cfg.write_text(yaml.safe_dump({"roots": [{"name": n, "path": str(p)} for n, p in roots.items()],
                                   "state_dir": str(tmp_path / "state")}))
    return cfg


def pending_logs(tmp_path: Path) -> list[str]:
    return os.listdir(tmp_path / "state" / "pending")


def make_package(src: Path) -> dict[str, str]:
    (src / "pkg/sub").mkdir(parents=True)
    for i in range(6):
        (src / f"pkg/f{i}.txt").write_text(f"file {i}\n" * 100)
    (src / "pkg/sub/deep.txt").write_text("deep")
    (src / "pkg/link").symlink_to("sub/deep.txt")
    return tree(src / "pkg")


def move_args(source: str, dest: str) -> dict[str, str]:
    return {"source_root": "src", "source_path": source, "dest_root": "dst", "dest_path": dest}


# -- folder moves across filesystems ---------------------------------------------------------------

# (kill point, expected outcome after the next start)
FOLDER_MOVE_POINTS = [
    ("copied-file:3", "source"),  # half-copied into the temporary folder
    ("copied", "source"),  # fully copied, not yet renamed into place
    ("move-renamed", "destination"),  # in place, but the record does not say so yet: the inode tells
    ("move-placed", "destination"),  # in place and recorded, source not yet removed
]


@pytest.mark.parametrize(("kill_at", "expected"), FOLDER_MOVE_POINTS)
async def test_folder_move_across_filesystems_killed_is_finished_or_rolled_back_on_start(
        make_server: MakeServer, tmp_path: Path, other_fs: Path, kill_at: str, expected: str) -> None:
    src = tmp_path / "src_root"
    before = make_package(src)
    cfg = write_config(tmp_path, {"src": src, "dst": other_fs})
    await anyio.to_thread.run_sync(kill_during, cfg, "move", move_args("pkg", "moved"), kill_at)
    assert pending_logs(tmp_path), "the killed server left no record"

    h = await make_server({"src": src, "dst": other_fs}, state_dir=str(tmp_path / "state"))  # the next start
    if expected == "source":
        assert tree(src / "pkg") == before and not (other_fs / "moved").exists()
    else:
        assert tree(other_fs / "moved") == before and not (src / "pkg").exists()
    assert temps(src, other_fs) == []
    assert pending_logs(tmp_path) == [p for p in pending_logs(tmp_path) if p.startswith(f"{os.getpid()}-")]
    listing = await h.ok("list_folder", root="dst", path="")
    assert [e["name"] for e in listing["entries"]] == (["moved"] if expected == "destination" else [])


async def test_folder_move_killed_while_deleting_the_source_is_finished_on_start(
        make_server: MakeServer, tmp_path: Path, other_fs: Path) -> None:
    """A kill part-way through removing the source: the state is the `move-placed` one with part of the
    source gone, so that is what is set up (rmtree offers no hook to stop it half-way)."""
    src = tmp_path / "src_root"
    before = make_package(src)
    cfg = write_config(tmp_path, {"src": src, "dst": other_fs})
    await anyio.to_thread.run_sync(kill_during, cfg, "move", move_args("pkg", "moved"), "move-placed")
    shutil.rmtree(src / "pkg/sub")
    (src / "pkg/f0.txt").unlink()
    await make_server({"src": src, "dst": other_fs}, state_dir=str(tmp_path / "state"))
    assert tree(other_fs / "moved") == before and not (src / "pkg").exists()


@pytest.mark.parametrize(("kill_at", "expected"), [("linked", "source"), ("move-renamed", "destination"),
                                                   ("move-placed", "destination")])
async def test_file_move_across_filesystems_killed_is_finished_or_rolled_back_on_start(
        make_server: MakeServer, tmp_path: Path, other_fs: Path, kill_at: str, expected: str) -> None:
    src = tmp_path / "src_root"
    src.mkdir()
    (src / "a.bin").write_bytes(b"A" * 100_000)
    (other_fs / "a.bin").write_bytes(b"old destination")  # replaced by the move
    cfg = write_config(tmp_path, {"src": src, "dst": other_fs})
    await anyio.to_thread.run_sync(kill_during, cfg, "move", move_args("a.bin", "a.bin"), kill_at)
    await make_server({"src": src, "dst": other_fs}, state_dir=str(tmp_path / "state"))
    if expected == "source":
        assert (src / "a.bin").read_bytes() == b"A" * 100_000
        assert (other_fs / "a.bin").read_bytes() == b"old destination"
    else:
        assert not (src / "a.bin").exists() and (other_fs / "a.bin").read_bytes() == b"A" * 100_000
    assert temps(src, other_fs) == []


async def test_symlink_move_across_filesystems_killed_after_placing_is_finished(
        make_server: MakeServer, tmp_path: Path, other_fs: Path) -> None:
    src = tmp_path / "src_root"
    src.mkdir()
    (src / "ln").symlink_to("target")
    cfg = write_config(tmp_path, {"src": src, "dst": other_fs})
    await anyio.to_thread.run_sync(kill_during, cfg, "move", move_args("ln", "ln"), "move-renamed")
    await make_server({"src": src, "dst": other_fs}, state_dir=str(tmp_path / "state"))
    assert os.readlink(other_fs / "ln") == "target" and not os.path.lexists(src / "ln")


# -- temporary entries: overwrites and folder copies -----------------------------------------------


@pytest.mark.parametrize("tool", ["write_file", "copy"])
async def test_overwrite_killed_between_link_and_rename_leaves_no_temp_after_start(
        make_server: MakeServer, workspace: Path, tmp_path: Path, tool: str) -> None:
    (workspace / "big.txt").write_bytes(b"old\n" * 1000)
    (workspace / "new.txt").write_bytes(b"new\n" * 5_000_000)  # 20 MB
    cfg = write_config(tmp_path, {"ws": workspace})
    args = ({"root": "ws", "path": "big.txt", "content": "new\n" * 5_000_000} if tool == "write_file" else
            {"source_root": "ws", "source_path": "new.txt", "dest_root": "ws", "dest_path": "big.txt"})
    await anyio.to_thread.run_sync(kill_during, cfg, tool, args, "linked")
    left = temps(workspace)
    assert len(left) == 1 and os.path.getsize(left[0]) == 20_000_000  # the window was hit: a 20 MB temp exists

    h = await make_server({"ws": workspace}, state_dir=str(tmp_path / "state"))
    assert (workspace / "big.txt").read_bytes() == b"old\n" * 1000
    assert sorted(os.listdir(workspace)) == ["big.txt", "new.txt"]
    listing = await h.ok("list_folder", root="ws", path="")
    assert [e["name"] for e in listing["entries"]] == ["big.txt", "new.txt"]


async def test_folder_copy_killed_midway_leaves_no_temp_folder_after_start(
        make_server: MakeServer, tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    before = make_package(ws)
    cfg = write_config(tmp_path, {"ws": ws})
    args = {"source_root": "ws", "source_path": "pkg", "dest_root": "ws", "dest_path": "copy"}
    await anyio.to_thread.run_sync(kill_during, cfg, "copy", args, "copied-file:2")
    assert len(temps(ws)) == 1  # a partial temporary folder
    await make_server({"ws": ws}, state_dir=str(tmp_path / "state"))
    assert temps(ws) == [] and sorted(os.listdir(ws)) == ["pkg"] and tree(ws / "pkg") == before


async def test_temporary_names_are_never_listed_or_searched(server: Any, workspace: Path) -> None:
    (workspace / "a.txt").write_text("needle\n")
    (workspace / ".rootbound-0123456789abcdef.tmp").write_text("needle\n")  # as a write in progress names it
    (workspace / "sub" / ".rootbound-fedcba9876543210.tmp").mkdir(parents=True)
    (workspace / "sub" / ".rootbound-fedcba9876543210.tmp" / "x.txt").write_text("needle\n")
    (workspace / ".rootbound-notes.tmp").write_text("needle\n")  # not one of ours: shown
    listing = await server.ok("list_folder", root="workspace", path="")
    assert [e["name"] for e in listing["entries"]] == [".rootbound-notes.tmp", "a.txt", "sub"]
    assert (await server.ok("list_folder", root="workspace", path="sub"))["entries"] == []
    found = await server.ok("glob", root="workspace", pattern="**/*")
    assert sorted(m["path"] for m in found["matches"]) == [".rootbound-notes.tmp", "a.txt", "sub"]
    hits = await server.ok("grep", root="workspace", pattern="needle")
    assert sorted(m["file"] for m in hits["matches"]) == [".rootbound-notes.tmp", "a.txt"]


# -- what recovery may touch ------------------------------------------------------------------------


def _dead_log(state: Path, records: list[dict[str, Any]]) -> None:
    pending = state / "pending"
    pending.mkdir(parents=True, exist_ok=True)
    (pending / "999999-deadbeef.log").write_text("".join(json.dumps(r) + "\n" for r in records))


def _dir_record(path: Path) -> dict[str, Any]:
    st = os.stat(path)
    return {"dir": str(path), "dev": st.st_dev, "ino": st.st_ino}


async def test_recovery_touches_nothing_outside_the_roots_or_not_made_by_the_server(
        make_server: MakeServer, workspace: Path, outside: Path, tmp_path: Path) -> None:
    """A forged or stale log: a temp name outside every root, a non-temp name, a 'placed' move whose source
    is outside the roots or is no longer the inode that was copied — none of them is removed."""
    (outside / ".rootbound-0123456789abcdef.tmp").write_text("keep")
    (workspace / "precious.txt").write_text("keep")
    (workspace / "replaced").mkdir()
    st = os.stat(outside / "secret.txt")
    _dead_log(tmp_path / "state", [
        {"op": "temp", "id": 1, **_dir_record(outside), "name": ".rootbound-0123456789abcdef.tmp"},
        {"op": "temp", "id": 2, **_dir_record(workspace), "name": "precious.txt"},
        {"op": "move", "id": 3, "phase": "placed", "dst": {**_dir_record(workspace), "name": "x"},
         "src": {**_dir_record(outside), "name": "secret.txt", "entry": [st.st_dev, st.st_ino]}},
        {"op": "move", "id": 4, "phase": "placed", "dst": {**_dir_record(workspace), "name": "x"},
         "src": {**_dir_record(workspace), "name": "replaced", "entry": [st.st_dev, st.st_ino + 1]}},
    ])
    await make_server(state_dir=str(tmp_path / "state"))
    assert (outside / ".rootbound-0123456789abcdef.tmp").read_text() == "keep"
    assert (outside / "secret.txt").exists() and (workspace / "precious.txt").exists()
    assert (workspace / "replaced").is_dir()
    assert not (tmp_path / "state" / "pending" / "999999-deadbeef.log").exists()


async def test_a_running_servers_temporary_entries_are_left_alone(
        make_server: MakeServer, workspace: Path, tmp_path: Path) -> None:
    """Records are per process and locked while it lives: a server starting beside a running one (sharing the
    state directory) does not remove that one's temporary names; once it is dead, the next start does."""
    state = tmp_path / "state"
    holder = subprocess.Popen([sys.executable, "-c", (
        "import os, sys; from rootbound.fs import recovery; "
        f"recovery.start({str(state)!r}, [({str(workspace)!r}, os.open({str(workspace)!r}, os.O_RDONLY))]); "
        f"d = os.open({str(workspace)!r}, os.O_RDONLY); "
        "cm = recovery.temp_entry(d, '.rootbound-00000000000000aa.tmp'); cm.__enter__(); "
        f"open({str(workspace / '.rootbound-00000000000000aa.tmp')!r}, 'w').write('in progress'); "
        "print('ready', flush=True); sys.stdin.read()")], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == b"ready\n"
        await make_server(state_dir=str(state))
        assert (workspace / ".rootbound-00000000000000aa.tmp").exists()  # its server is alive
    finally:
        holder.kill()
        holder.wait(10)
    await make_server({"workspace": workspace, "again": tmp_path / "again"}, state_dir=str(state))
    assert not (workspace / ".rootbound-00000000000000aa.tmp").exists()


async def test_state_dir_inside_a_root_is_refused(tmp_path: Path, workspace: Path) -> None:
    from rootbound.config import ConfigError, load_config

    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump({"roots": [{"name": "ws", "path": str(workspace)}],
                                   "state_dir": str(workspace / "state")}))
    with pytest.raises(ConfigError, match=r"state_dir .* lies inside root 'ws'"):
        load_config(str(cfg), env={})
