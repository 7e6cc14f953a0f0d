"""`rootbound history | show | undo` on journals filled through the seam, run as a person runs them."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml

from rootbound.config import ConfigError, load_config
from rootbound.journal.settings import resolve

from ._journal import Driver

REPO = Path(__file__).resolve().parent.parent


def rootbound(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "rootbound", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=REPO)


@pytest.fixture
def setup(tmp_path: Path) -> tuple[Driver, Path]:
    """A root `ws` with a config file naming it and its journal directory."""
    journal_dir = tmp_path / "journal"
    d = Driver(tmp_path, journal_dir=journal_dir)
    config = tmp_path / "rootbound.yaml"
    config.write_text(yaml.safe_dump({"roots": [{"name": "ws", "path": str(d.path)}],
                                      "journal": {"dir": str(journal_dir)}}))
    yield d, config
    d.close()


def test_history_lists_changes_and_commands_newest_first(setup: tuple[Driver, Path]) -> None:
    d, config = setup
    (d.path / "notes.md").write_text("a\nb\n")
    first = d.write("notes.md", "a\nB\nc\n")
    d.journal.note_command(root=d.root, tool="shell", command="make test", cwd=".", exit_code=0,
                           connection="conn-1", client="test-client")
    second = d.write("src/app.py", "print(1)\n", connection="conn-2")
    out = rootbound("history", "--config", str(config))
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert len(lines) == 3
    assert lines[0].startswith(second) and "ws:src/app.py" in lines[0] and lines[0].endswith("+1 -0")
    assert "$ make test" in lines[1] and "not journaled" in lines[1]
    assert lines[2].startswith(first) and "test-client" in lines[2] and lines[2].endswith("+2 -1")
    only = rootbound("history", "--config", str(config), "--path", "*.py").stdout.splitlines()
    assert [line.split()[0] for line in only] == [second]
    conn = rootbound("history", "--config", str(config), "--connection", "conn-2").stdout.splitlines()
    assert [line.split()[0] for line in conn] == [second]
    assert rootbound("history", "--config", str(config), "--since", "1h").stdout.count("\n") == 3
    bad = rootbound("history", "--config", str(config), "--since", "yesterday")
    assert bad.returncode == 2 and "--since 'yesterday'" in bad.stderr


def test_history_of_a_root_given_by_path_or_by_name(setup: tuple[Driver, Path], tmp_path: Path) -> None:
    d, config = setup
    entry = d.write("a.txt", "x")
    by_name = rootbound("history", "--config", str(config), "--root", "ws")
    assert by_name.returncode == 0 and by_name.stdout.startswith(entry)
    other = tmp_path / "other"
    other.mkdir()
    none = rootbound("history", "--config", str(config), "--root", str(other))
    assert none.returncode == 0 and none.stdout == "" and "no changes recorded" in none.stderr


def test_show_prints_a_unified_diff_coloured_on_request(setup: tuple[Driver, Path]) -> None:
    d, config = setup
    (d.path / "a.txt").write_text("one\ntwo\n")
    entry = d.write("a.txt", "one\n2\n")
    out = rootbound("show", entry[:6], "--config", str(config))
    assert out.returncode == 0, out.stderr
    assert "--- a/a.txt\n+++ b/a.txt\n@@ -1,2 +1,2 @@\n one\n-two\n+2" in out.stdout
    assert "\x1b[" not in out.stdout
    coloured = rootbound("show", entry, "--config", str(config), "--color", "always").stdout
    assert "\x1b[31m-two\x1b[0m" in coloured and "\x1b[32m+2\x1b[0m" in coloured
    missing = rootbound("show", "zzzzzzzz", "--config", str(config))
    assert missing.returncode == 1 and "no change 'zzzzzzzz'" in missing.stderr


def test_undo_restores_refuses_an_edited_file_and_forces(setup: tuple[Driver, Path]) -> None:
    d, config = setup
    (d.path / "a.txt").write_text("original\n")
    (d.path / "b.txt").write_text("b original\n")
    ea = d.write("a.txt", "agent\n")
    eb = d.write("b.txt", "agent b\n")
    (d.path / "b.txt").write_text("edited by hand\n")
    dry = rootbound("undo", ea, eb, "--dry-run", "--config", str(config))
    assert dry.returncode == 1 and "would restore" in dry.stdout and "dry run: nothing was changed" in dry.stdout
    assert (d.path / "a.txt").read_text() == "agent\n"
    out = rootbound("undo", ea, eb, "--config", str(config))
    assert out.returncode == 1  # one file refused
    assert f"{ea}  restored" in out.stdout
    assert f"{eb}  refused       ws:b.txt  (changed since, outside the journaled file tools" in out.stdout
    assert (d.path / "a.txt").read_text() == "original\n" and (d.path / "b.txt").read_text() == "edited by hand\n"
    forced = rootbound("undo", eb, "--force", "--config", str(config))
    assert forced.returncode == 0 and (d.path / "b.txt").read_text() == "b original\n"
    history = rootbound("history", "--config", str(config)).stdout
    assert "undo" in history and "[undone by" in history and "rootbound undo (" in history


def test_undo_by_connection_only_touches_that_connections_changes(setup: tuple[Driver, Path]) -> None:
    d, config = setup
    d.write("mine.txt", "1", connection="agent-a")
    d.write("theirs.txt", "2", connection="agent-b")
    out = rootbound("undo", "--connection", "agent-a", "--config", str(config))
    assert out.returncode == 0, out.stdout + out.stderr
    assert not (d.path / "mine.txt").exists() and (d.path / "theirs.txt").read_text() == "2"
    nothing = rootbound("undo", "--config", str(config))
    assert nothing.returncode == 2 and "say what to undo" in nothing.stderr


def test_undo_waits_for_a_change_the_server_is_making(setup: tuple[Driver, Path]) -> None:
    d, config = setup
    (d.path / "a.txt").write_text("v0")
    entry = d.write("a.txt", "v1")
    change = d.journal.begin(tool="write_file", root=d.root)  # a change in progress in "the server"
    releaser = threading.Timer(1.0, change.abandon)
    started = time.monotonic()
    releaser.start()
    out = rootbound("undo", entry, "--config", str(config))
    assert out.returncode == 0, out.stdout + out.stderr
    assert time.monotonic() - started >= 1.0
    assert (d.path / "a.txt").read_text() == "v0"


def test_journal_off(tmp_path: Path) -> None:
    (tmp_path / "ws").mkdir()
    config = tmp_path / "c.yaml"
    config.write_text(f"roots: [{{name: ws, path: {tmp_path / 'ws'}}}]\njournal: off\n")
    assert load_config(str(config)).journal.enabled is False
    out = rootbound("history", "--config", str(config))
    assert out.returncode == 1 and "journal is off" in out.stderr


def test_journal_dir_is_never_inside_a_root_nor_a_root_inside_it(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    root.mkdir()
    with pytest.raises(ConfigError, match=r"journal.dir .* lies inside root 'ws'"):
        load_config(None, [str(root)], {"journal": {"dir": str(root / ".journal")}}, env={})
    with pytest.raises(ConfigError, match=r"lies inside journal\.dir"):
        load_config(None, [str(root)], {"journal": {"dir": str(tmp_path)}}, env={})
    bad = rootbound("check", "--root", str(root), "--config", str(_config(tmp_path, root / "j")))
    assert bad.returncode == 1 and "journal.dir" in bad.stderr


def _config(tmp_path: Path, journal_dir: Path) -> Path:
    path = tmp_path / "j.yaml"
    path.write_text(f"roots: []\njournal: {{dir: {journal_dir}}}\n")
    return path


def test_the_default_journal_is_kept_out_of_a_root_that_holds_the_state_directory(tmp_path: Path) -> None:
    state = os.environ["XDG_STATE_HOME"]
    settings = resolve(None, None, [state])  # a root that contains the default state directory
    assert settings is not None and not settings.dir.startswith(os.path.realpath(state) + "/")
    assert settings.dir.startswith("/var/tmp/rootbound-state-")


def test_every_journal_key_is_documented() -> None:
    from rootbound.config import JournalConfig

    page = (REPO / "docs" / "configuration.md").read_text()
    missing = [k for k in JournalConfig.model_fields if f"`journal.{k}`" not in page]
    assert missing == [] and "`journal: off`" in page
