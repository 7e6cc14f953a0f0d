"""The env/environment parameters and script assignments cannot make an allowed program run another one
(issue 11, item 12): git's configuration and helper variables, pagers, editors, runtimes' option and path
variables are refused while the allowlist is restricted, unless the operator allows them."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from rootbound.execution.environment import EXEC_VARS
from rootbound.sandbox import bwrap
from tests.conftest import Harness
from tests.test_commands_support import CommandServers

pytestmark = pytest.mark.anyio

NEEDS_BWRAP = pytest.mark.skipif(not bwrap.probe().ok, reason=f"bubblewrap unusable here: {bwrap.probe().detail}")
SANDBOXES = [pytest.param("landlock"), pytest.param("bwrap", marks=NEEDS_BWRAP)]

PAYLOAD = "touch MARKER; false"
# Each makes `git` run PAYLOAD in the repository: a config entry git runs (core.fsmonitor, on status),
# or git's ssh helper (ls-remote over ssh).
ATTACKS = [
    ("git status", {"GIT_CONFIG_PARAMETERS": f"'core.fsmonitor'='{PAYLOAD}'"}),
    ("git status", {"GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": "core.fsmonitor", "GIT_CONFIG_VALUE_0": PAYLOAD}),
    ("git ls-remote ssh://example.invalid/repo", {"GIT_SSH_COMMAND": PAYLOAD}),
]


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    ws = tmp_path / "workspace"
    ws.mkdir()
    subprocess.run(["git", "init", "-q", str(ws)], check=True)
    (ws / "a.txt").write_text("a\n")
    return ws


async def git_server(servers: CommandServers, **commands: object) -> Harness:
    return await servers({"allowed": ["git", "printenv"], **commands})


@pytest.mark.parametrize("command,env", ATTACKS)
async def test_env_cannot_make_git_run_a_program(servers: CommandServers, repo: Path, command: str,
                                                 env: dict[str, str]) -> None:
    h = await git_server(servers)
    error = await h.err("execute_command", command=command, root="workspace", env=env)
    assert "is refused while the command allowlist is restricted" in error
    assert "commands.allowed_exec_vars" in error
    assert not (repo / "MARKER").exists()


@pytest.mark.parametrize("command,env", ATTACKS)
async def test_shell_environment_cannot_make_git_run_a_program(servers: CommandServers, repo: Path, command: str,
                                                               env: dict[str, str]) -> None:
    h = await git_server(servers)
    error = await h.err("shell", command=command, root="workspace", environment=env)
    assert "commands.allowed_exec_vars" in error
    assert not (repo / "MARKER").exists()


@pytest.mark.parametrize("script", [
    f"GIT_CONFIG_PARAMETERS=\"'core.fsmonitor'='{PAYLOAD}'\" git status",
    f"GIT_CONFIG_COUNT=1 GIT_CONFIG_KEY_0=core.fsmonitor GIT_CONFIG_VALUE_0='{PAYLOAD}' git status",
    f"export GIT_SSH_COMMAND='{PAYLOAD}'; git ls-remote ssh://example.invalid/repo",
    "NODE_OPTIONS='--require ./x.js' git status",
])
async def test_a_script_cannot_assign_them_either(servers: CommandServers, repo: Path, script: str) -> None:
    h = await git_server(servers)
    error = await h.err("shell", command=script, root="workspace")
    assert "commands.allowed_exec_vars" in error, error
    assert not (repo / "MARKER").exists()


@pytest.mark.parametrize("name", sorted({p.replace("*", "X") for p in EXEC_VARS}))
async def test_every_listed_variable_is_refused_and_the_message_names_the_key(servers: CommandServers,
                                                                              tmp_path: Path, name: str) -> None:
    h = await servers({"allowed": ["printenv"]})
    error = await h.err("execute_command", command="printenv", env={name: "x"})
    assert error == (f"environment variable {name} is refused while the command allowlist is restricted: it makes an "
                     "allowed program run another program or load code; the operator can allow it with "
                     "commands.allowed_exec_vars")


async def test_the_operator_can_allow_some(servers: CommandServers, repo: Path) -> None:
    h = await git_server(servers, allowed_exec_vars=["GIT_PAGER", "PYTHON*"])
    got = await h.ok("execute_command", command="printenv GIT_PAGER PYTHONPATH", root="workspace",
                     env={"GIT_PAGER": "cat", "PYTHONPATH": "src"})
    assert got["stdout"] == "cat\nsrc\n"
    got = await h.ok("shell", command="GIT_PAGER=cat printenv GIT_PAGER", root="workspace")
    assert got["stdout"] == "cat\n"
    assert "commands.allowed_exec_vars" in await h.err("execute_command", command="printenv", env={"PAGER": "less"})


async def test_with_every_program_allowed_they_are_not_refused(servers: CommandServers, repo: Path) -> None:
    # Any program may run directly then, so refusing them would fence nothing (docs/security.md).
    h = await servers({"allowed": "*"})
    got = await h.ok("execute_command", command="printenv GIT_PAGER", root="workspace", env={"GIT_PAGER": "cat"})
    assert got["stdout"] == "cat\n"


@pytest.mark.parametrize("name", ["PATH", "BASH_ENV", "ENV", "LD_PRELOAD", "LD_LIBRARY_PATH"])
async def test_environment_cannot_redirect_an_allowed_name(servers: CommandServers, tmp_path: Path,
                                                           name: str) -> None:
    ws = tmp_path / "workspace"
    ws.mkdir()
    marker = tmp_path / "M"
    (ws / "ls").write_text(f"#!/bin/sh\ntouch {marker}\n")
    (ws / "ls").chmod(0o755)
    h = await servers({"allowed": ["ls", "sh"], "sandbox": "off"})
    for tool, key in (("execute_command", "env"), ("shell", "environment")):
        result = await h.call(tool, command="ls", root="workspace", **{key: {name: str(ws)}})
        assert result.is_error
    assert not marker.exists()


@pytest.mark.parametrize("sandbox", SANDBOXES)
async def test_git_configuration_from_the_environment_is_confined(servers: CommandServers, tmp_path: Path,
                                                                  outside: Path, sandbox: str) -> None:
    """GIT_CONFIG_COUNT/KEY/VALUE is `git -c` through `env`: refused unless the operator allows it
    (above); when allowed, the sandbox holds."""
    ws = tmp_path / "workspace"
    ws.mkdir()
    subprocess.run(["git", "init", "-q", str(ws)], check=True)
    h = await servers({"allowed": ["git"], "sandbox": sandbox, "read_paths": [str(outside)],
                       "allowed_exec_vars": ["GIT_CONFIG_*"]})
    env = {"GIT_CONFIG_COUNT": "2", "GIT_CONFIG_KEY_0": "core.fsmonitor",
           "GIT_CONFIG_VALUE_0": f"touch {outside}/marker; false", "GIT_CONFIG_KEY_1": "alias.x",
           "GIT_CONFIG_VALUE_1": f"!touch {outside}/marker2 {ws}/inside-marker"}
    await h.ok("execute_command", command="git status", root="workspace", env=env)
    await h.ok("execute_command", command="git x", root="workspace", env=env)
    assert sorted(os.listdir(outside)) == ["secret.txt"]
    assert (ws / "inside-marker").exists()  # control: the injected command did run, confined
