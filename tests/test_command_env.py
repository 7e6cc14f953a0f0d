"""The env/environment parameters and script assignments cannot make an allowed program run another one
(issue 11, item 12): git's configuration and helper variables, pagers, editors, runtimes' option and path
variables are refused while the allowlist is restricted, unless the operator allows them."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from rootbound.execution.environment import EXEC_VARS
from tests.conftest import Harness
from tests.test_commands_support import CommandServers

pytestmark = pytest.mark.anyio

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
