"""Commands cannot read the server's environment, where its secrets live."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from mcp import Client, StdioServerParameters

from rootbound.sandbox import bwrap
from tests.test_commands_support import CommandServers

pytestmark = pytest.mark.anyio

NEEDS_BWRAP = pytest.mark.skipif(not bwrap.probe().ok, reason=f"bubblewrap unusable here: {bwrap.probe().detail}")
SANDBOXES = [pytest.param("landlock"), pytest.param("bwrap", marks=NEEDS_BWRAP)]


async def test_a_sandboxed_command_cannot_read_the_servers_environ(tmp_path: Path) -> None:
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    config = tmp_path / "c.yaml"
    # Landlock alone leaves the server's /proc entry visible (bubblewrap hides it in a PID namespace).
    config.write_text(yaml.safe_dump({"roots": [{"name": "workspace", "path": str(workspace)}],
                                      "commands": {"allowed": ["cat"], "sandbox": "landlock"}}))
    env = {**os.environ, "ROOTBOUND_TEST_SECRET": "s3cret-in-the-server-env"}
    params = StdioServerParameters(command=sys.executable, args=["-m", "rootbound", "--config", str(config)],
                                   env=env)
    async with Client(params, mode="legacy") as client:
        result = await client.call_tool("shell", {"command": "cat /proc/$PPID/environ",
                                                  "working_directory": str(workspace)})
    structured = result.structured_content or {}
    assert "s3cret-in-the-server-env" not in structured.get("stdout", "")
    assert "Permission denied" in structured.get("stderr", "")


@pytest.mark.parametrize("sandbox", SANDBOXES)
async def test_the_servers_environment_is_out_of_reach(servers: CommandServers, sandbox: str,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """The token is in the server's own /proc/PID/environ: not readable by a command (Landlock denies ptrace-class
    access to processes outside the command's domain; bubblewrap's PID namespace hides the server)."""
    monkeypatch.setenv("ROOTBOUND_AUTH_TOKEN", "REVIEW-TOKEN-4242")
    # A process of the server's user started with the token, as `rootbound serve` is (os.environ changes made in
    # this process do not show in its own /proc/PID/environ).
    holder = subprocess.Popen(["sleep", "30"], env={"ROOTBOUND_AUTH_TOKEN": "REVIEW-TOKEN-4242"})
    try:
        h = await servers({"allowed": "*", "sandbox": sandbox})
        script = (f"cat /proc/{holder.pid}/environ /proc/{os.getpid()}/environ /proc/$PPID/environ; "
                  "for p in /proc/[0-9]*; do cat $p/environ; done; echo done")
        result = await h.call("shell", command=script, root="workspace")
        meta = result.structured_content
        assert meta is not None and meta["stdout"].endswith("done\n")
        assert "REVIEW-TOKEN-4242" not in str(meta)
        # Control: the secret really is there for an unconfined reader.
        with open(f"/proc/{holder.pid}/environ", "rb") as f:
            assert b"REVIEW-TOKEN-4242" in f.read()
    finally:
        holder.kill()
        holder.wait()
