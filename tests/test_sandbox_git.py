"""git's redirection points are frozen for commands under bubblewrap, whatever `protected_paths` says: each way a
sandboxed command could make the user's next plain `git status` (or commit) run its code is tried, and then git
is run on the host, outside any sandbox, as the user would: it must execute nothing the command wrote."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from rootbound.sandbox import bwrap
from tests.conftest import Harness
from tests.test_commands_support import CommandServers

pytestmark = [pytest.mark.anyio, pytest.mark.skipif(not bwrap.probe().ok, reason=f"bubblewrap unusable here: "
                                                    f"{bwrap.probe().detail} (.ci/run installs it)")]

GIT = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "protocol.file.allow=always"]


def git(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """git on the host, as the user runs it (no sandbox); HOME empty so that only the repository's config counts,
    and never a repository above the test's directory (CI runs inside a clone: its .git would be found)."""
    env = {"PATH": os.environ["PATH"], "HOME": str(cwd.parent / "home"), "GIT_CONFIG_NOSYSTEM": "1",
           "GIT_CEILING_DIRECTORIES": str(cwd.parent)}
    return subprocess.run([*GIT, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=60)


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    path = tmp_path / "workspace"
    path.mkdir()
    (tmp_path / "home").mkdir()
    return path


@pytest.fixture
def repo(ws: Path) -> Path:
    git(ws, "init", "-q")
    (ws / "a.txt").write_text("a\n")
    git(ws, "add", "a.txt")
    git(ws, "commit", "-qm", "a")
    return ws


@pytest.fixture
def marker(tmp_path: Path) -> Path:
    """What the planted payload would create, outside the root: it must never appear."""
    return tmp_path / "PAYLOAD-RAN"


def payload(marker: Path) -> str:
    """A git config section that runs a program on the next `git status` (printf-ready)."""
    return "[core]\\n\\tfsmonitor = \"touch " + str(marker) + "; false\"\\n"


async def attack(servers: CommandServers, script: str) -> Harness:
    h = await servers({"allowed": "*", "sandbox": "bwrap"})
    await h.call("shell", command=script, root="workspace")
    return h


def host_git_runs_nothing(ws: Path, marker: Path) -> None:
    git(ws, "status")
    git(ws, "commit", "-qam", "user's commit")
    assert not marker.exists(), "git on the host ran what the command planted"


async def test_commondir(servers: CommandServers, repo: Path, marker: Path) -> None:
    await attack(servers, f"mkdir -p .git/evil/objects .git/evil/refs && printf '{payload(marker)}' > .git/evil/config"
                          " && echo evil > .git/commondir")
    host_git_runs_nothing(repo, marker)
    assert not (repo / ".git" / "commondir").exists()


async def test_config_worktree(servers: CommandServers, repo: Path, marker: Path) -> None:
    git(repo, "config", "extensions.worktreeConfig", "true")  # a repository that uses per-worktree config
    await attack(servers, f"printf '{payload(marker)}' > .git/config.worktree")
    host_git_runs_nothing(repo, marker)
    assert not (repo / ".git" / "config.worktree").exists()


async def test_hooks(servers: CommandServers, repo: Path, marker: Path) -> None:
    await attack(servers, f"mkdir -p .git/hooks; printf '#!/bin/sh\\ntouch {marker}\\n' > .git/hooks/pre-commit; "
                          "chmod +x .git/hooks/pre-commit; rm -rf .git/hooks; mv .git/hooks .git/h")
    assert not (repo / ".git" / "hooks" / "pre-commit").exists()
    host_git_runs_nothing(repo, marker)


async def test_info(servers: CommandServers, repo: Path, marker: Path) -> None:
    before = {p.name: p.read_text() for p in (repo / ".git" / "info").iterdir()}
    (repo / "evil.sh").write_text("x\n")
    await attack(servers, "echo evil.sh >> .git/info/exclude; echo '* filter=x' > .git/info/attributes; "
                          "rm -rf .git/info; mv .git/info .git/i")
    assert {p.name: p.read_text() for p in (repo / ".git" / "info").iterdir()} == before
    assert "evil.sh" in git(repo, "status", "--porcelain").stdout  # not hidden from the user
    host_git_runs_nothing(repo, marker)


async def test_submodule_config(servers: CommandServers, repo: Path, tmp_path: Path, marker: Path) -> None:
    origin = tmp_path / "origin"
    origin.mkdir()
    git(origin, "init", "-q")
    (origin / "s.txt").write_text("s\n")
    git(origin, "add", "s.txt")
    git(origin, "commit", "-qm", "s")
    assert git(repo, "submodule", "add", "-q", str(origin), "x").returncode == 0
    git(repo, "commit", "-qm", "submodule")
    config = (repo / ".git" / "modules" / "x" / "config").read_text()
    await attack(servers, f"printf '{payload(marker)}' >> .git/modules/x/config; "
                          f"mkdir -p .git/modules/y && printf '{payload(marker)}' > .git/modules/y/config")
    host_git_runs_nothing(repo, marker)
    git(repo, "submodule", "update")
    assert not marker.exists()
    assert (repo / ".git" / "modules" / "x" / "config").read_text() == config


async def test_missing_modules_made_by_a_command_are_removed(servers: CommandServers, repo: Path,
                                                             marker: Path) -> None:
    h = await attack(servers, "true")
    got = await h.ok("shell", command=f"mkdir -p .git/modules/x && printf '{payload(marker)}' > .git/modules/x/config"
                                      " && mkdir -p .git/worktrees/w && echo evil > .git/commondir", root="workspace")
    assert got["removed"] == ["workspace:.git/commondir", "workspace:.git/modules", "workspace:.git/worktrees"]
    assert sorted(os.listdir(repo / ".git")) == sorted(n for n in os.listdir(repo / ".git")
                                                       if n not in ("modules", "worktrees", "commondir"))
    host_git_runs_nothing(repo, marker)


async def test_git_file_pointing_elsewhere(servers: CommandServers, ws: Path, marker: Path) -> None:
    """No repository in the root: a `.git` file `gitdir: evil` and the repository it names."""
    (ws / "a.txt").write_text("a\n")
    h = await servers({"allowed": "*", "sandbox": "bwrap"})
    got = await h.ok("shell", command="echo 'gitdir: evil' > .git && mkdir -p evil/objects evil/refs && "
                                      f"echo 'ref: refs/heads/main' > evil/HEAD && printf '{payload(marker)}' > "
                                      "evil/config && git status --short", root="workspace")
    assert got["removed"] == ["workspace:.git"]
    assert not (ws / ".git").exists()
    assert git(ws, "status").returncode != 0  # not a repository: git reads nothing the command wrote
    assert not marker.exists()


async def test_a_repository_made_by_a_command_is_removed(servers: CommandServers, ws: Path, marker: Path) -> None:
    h = await servers({"allowed": "*", "sandbox": "bwrap"})
    got = await h.ok("shell", command=f"git init -q && printf '{payload(marker)}' >> .git/config; ln -s x .gitx; "
                                      "mv .gitx .git", root="workspace")
    assert got["removed"] == ["workspace:.git"]
    assert sorted(os.listdir(ws)) == []
    assert not marker.exists()


async def test_renaming_git_away_and_recreating_it(servers: CommandServers, repo: Path, marker: Path) -> None:
    h = await attack(servers, "true")
    error = await h.err("shell", command="mv .git .git-old && mkdir -p .git/hooks && "
                                         f"printf '{payload(marker)}' > .git/config", root="workspace")
    assert "busy" in error.lower()
    await h.call("shell", command="rm -rf .git; mkdir -p .git; git init -q; "
                                  f"printf '{payload(marker)}' > .git/config", root="workspace")
    assert "fsmonitor" not in (repo / ".git" / "config").read_text() and not (repo / ".git-old").exists()
    host_git_runs_nothing(repo, marker)


async def test_a_worktree_git_file_cannot_be_redirected(servers: CommandServers, repo: Path, tmp_path: Path,
                                                        marker: Path) -> None:
    linked = tmp_path / "linked"
    git(repo, "worktree", "add", "-q", str(linked))
    h = await servers({"allowed": "*", "sandbox": "bwrap"}, roots={"workspace": linked})
    text = (linked / ".git").read_text()
    await h.call("shell", command=f"mkdir -p evil/objects evil/refs && printf '{payload(marker)}' > evil/config && "
                                  "echo 'ref: refs/heads/main' > evil/HEAD && echo 'gitdir: evil' > .git; "
                                  "rm -f .git; mv .git g", root="workspace")
    assert (linked / ".git").read_text() == text
    host_git_runs_nothing(linked, marker)
