"""Commands cannot read the server's environment, where its secrets live."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import yaml
from mcp import Client, StdioServerParameters

pytestmark = pytest.mark.anyio


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
