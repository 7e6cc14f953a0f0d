"""rootbound.leftovers: what a sweep of the shared temp folder does with names other users can craft."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from rootbound import leftovers
from tests import live

AS_ROOT = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (CI runs the tests as root)")


def _crafted(temp: Path, prefix: str) -> list[Path]:
    """Entries any local user can make in a shared temp folder: a server's name in our PID namespace (whose
    number every process of the namespace can read) with a PID no process can have."""
    namespace = os.stat("/proc/self/ns/pid").st_ino
    made = [temp / f"{prefix}{namespace}-{2 ** 31}-x", temp / f"{prefix}{namespace}-{'9' * 40}-y"]
    made[0].write_text("")
    made[1].mkdir()  # (a directory of our own with such a name is not a server's either)
    return made


def test_a_crafted_name_does_not_stop_the_sweep(tmp_path: Path) -> None:
    """A PID too big for kill() is not a live server: the sweep skips the name (it is not even ours) and goes on
    to remove what a killed server left."""
    crafted = _crafted(tmp_path, "rootbound-cmd-")
    namespace = os.stat("/proc/self/ns/pid").st_ino
    done = os.fork()
    if done == 0:
        os._exit(0)
    os.waitpid(done, 0)
    stale = tmp_path / f"rootbound-cmd-{namespace}-{done}-{'e' * 16}"
    stale.mkdir()
    leftovers.sweep(str(tmp_path), "rootbound-cmd-")  # raised OverflowError
    assert not stale.exists() and all(p.exists() for p in crafted)


@AS_ROOT
def test_another_users_crafted_name_in_the_temp_folder_does_not_stop_the_server(tmp_path: Path) -> None:
    """Another local user puts a file named like a spill directory, with a PID kill() cannot take, in the shared
    temp folder: the next server with commands must still start (it crashed at its first sweep: OverflowError
    out of SpillStore, before anything was served)."""
    temp = tmp_path / "tmp"
    temp.mkdir(mode=0o1777)
    temp.chmod(0o1777)
    for path in _crafted(temp, "rootbound-output-"):
        os.chown(path, 65534, 65534)  # nobody's
    (tmp_path / "workspace").mkdir()
    config = live.write_config(tmp_path, commands={"allowed": ["true"], "sandbox": "landlock"})
    with live.raw_stdio(["--config", str(config)], tmp_path / "server.log", live.clean_env(TMPDIR=str(temp))) as s:
        s.initialize()
        s.send(live.call("execute_command", {"command": "true"}, 1))
        assert "result" in s.answer(1), s.stderr()
