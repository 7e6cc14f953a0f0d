"""The processes the server starts for its own work never run code from a root or the working directory.

Each test starts the real `rootbound` process in the directory it serves (the default configuration's
shape), with Python modules planted there that would leave a marker outside the root if imported.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import anyio
import pytest
import yaml
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client

from tests.conftest import text_of
from tests.test_transports import ROOTBOUND, clean_env

pytestmark = pytest.mark.anyio

TOKEN = "token-the-helper-must-never-see"

# Every place a Python started in (or told to import from) the working directory would pick code up.
PLANTED = ("rootbound/__init__.py", "rootbound/grep/__init__.py", "rootbound/grep/helper.py",
           "rootbound/sandbox/__init__.py", "rootbound/sandbox/exec.py", "sitecustomize.py", "usercustomize.py",
           "re2.py", "zz-evil.pth")


def plant(root: Path, marks: Path) -> None:
    for rel in PLANTED:
        target = root / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        mark = marks / rel.replace("/", "_")
        code = f"open({str(mark)!r}, 'w').write('imported')"
        target.write_text(f"import os; {code}\n" if rel.endswith(".pth") else f"{code}\n")


def children(pid: int) -> list[int]:
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            found += [int(c) for c in (task / "children").read_text().split()]
        except OSError:  # the thread ended meanwhile
            continue
    return found


def helper_pid(server: int) -> int | None:
    for pid in children(server):
        try:
            if b"rootbound.grep.helper" in Path(f"/proc/{pid}/cmdline").read_bytes():
                return pid
        except OSError:
            continue
    return None


def server_params(ws: Path, tmp_path: Path, sandbox: str | None, as_user: list[str] | None = None
                  ) -> StdioServerParameters:
    args: list[str] = []
    if sandbox is not None:
        cfg = tmp_path / "rootbound.yaml"
        cfg.write_text(yaml.safe_dump({"roots": [{"name": "workspace", "path": str(ws)}],
                                       "commands": {"allowed": ["ls"], "sandbox": sandbox}}))
        args = ["--config", str(cfg)]
    env = {k: v for k, v in clean_env().items() if k != "ROOTBOUND_GREP_HELPER"}
    env["ROOTBOUND_AUTH_TOKEN"] = TOKEN
    pidfile = tmp_path / "server.pid"
    return StdioServerParameters(command="/bin/sh", args=["-c", 'echo $$ > "$0"; exec "$@"', str(pidfile),
                                                          *(as_user or []), ROOTBOUND, *args], env=env, cwd=str(ws))


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="the grep helper is only used with two or more CPUs")
@pytest.mark.parametrize("sandbox", [None, "bwrap", "landlock"])
async def test_no_own_process_imports_code_planted_in_the_served_directory(tmp_path: Path,
                                                                           sandbox: str | None) -> None:
    ws, marks = tmp_path / "ws", tmp_path / "marks"
    ws.mkdir()
    marks.mkdir()
    plant(ws, marks)
    (ws / "many").mkdir()
    for i in range(70):  # more than one batch of 64: the helper gets work
        (ws / "many" / f"f{i}.txt").write_text(f"needle {i}\n")
    helper = None
    with open(tmp_path / "stderr.log", "w") as errlog:
        async with Client(stdio_client(server_params(ws, tmp_path, sandbox), errlog=errlog)) as client:
            server = int((tmp_path / "server.pid").read_text())
            for _ in range(100):  # the first grep starts the helper; later ones use it
                result = await client.call_tool("grep", {"root": "workspace", "pattern": "needle", "path": "many"})
                assert not result.is_error, text_of(result)
                assert result.structured_content is not None
                assert result.structured_content["total_matches"] == 70
                if helper is not None:
                    break
                helper = helper_pid(server)
                await anyio.sleep(0.05)
            result = await client.call_tool("glob", {"root": "workspace", "pattern": "**/*.py"})
            assert not result.is_error, text_of(result)
            if sandbox is not None:
                result = await client.call_tool("execute_command", {"command": "ls", "cwd": str(ws)})
                assert not result.is_error and "sitecustomize.py" in text_of(result), text_of(result)
            assert list(marks.iterdir()) == []
            assert helper is not None, "the grep helper never started"
            environ = Path(f"/proc/{helper}/environ").read_bytes().split(b"\0")
            assert not [v for v in environ if v and not v.startswith((b"LANG=", b"LC_"))], environ
            assert os.readlink(f"/proc/{helper}/cwd") == "/"
    assert list(marks.iterdir()) == []


# As root, run with CAP_SYS_PTRACE dropped from the bounding set (PR_CAPBSET_DROP): the server and a reader
# started this way hold the same capabilities, so only dumpability decides whether the reader may look in.
NO_PTRACE = [sys.executable, "-I", "-c",
             "import ctypes,os,sys;assert ctypes.CDLL(None).prctl(24,19,0,0,0)==0;os.execv(sys.argv[1],sys.argv[1:])"]


def can_look_into(pid: int) -> bool:
    """Can another process of the same user (and capabilities) read where `pid`'s descriptors lead?"""
    reader = [*NO_PTRACE, "/bin/readlink", f"/proc/{pid}/cwd"] if os.geteuid() == 0 else \
        ["/bin/readlink", f"/proc/{pid}/cwd"]
    return subprocess.run(reader, capture_output=True).returncode == 0


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="the grep helper is only used with two or more CPUs")
async def test_grep_helper_is_not_dumpable(tmp_path: Path) -> None:
    """The helper holds the roots' directory handles: no other process of its user may reach them (or its
    memory and environment) through /proc."""
    ws = tmp_path / "ws"
    ws.mkdir()
    for i in range(70):
        (ws / f"f{i}.txt").write_text("needle\n")
    params = server_params(ws, tmp_path, None, as_user=NO_PTRACE if os.geteuid() == 0 else [])
    with open(tmp_path / "stderr.log", "w") as errlog:
        async with Client(stdio_client(params, errlog=errlog)) as client:
            server = int((tmp_path / "server.pid").read_text())
            helper = None
            for _ in range(100):
                result = await client.call_tool("grep", {"root": "workspace", "pattern": "needle"})
                assert not result.is_error, text_of(result)
                if (helper := helper_pid(server)) is not None:
                    break
                await anyio.sleep(0.05)
            assert helper is not None, "the grep helper never started"
            assert can_look_into(server)  # dumpable (no commands allowed): the check itself works
            assert not can_look_into(helper)
