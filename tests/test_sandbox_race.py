"""bubblewrap resolves nothing it mounts by path after rootbound checked it: a host-side thread keeps swapping a
guarded directory (`.git`) for a symlink to `../../../../tmp` (the host's /tmp, at exactly the root's depth, so
it lands on /tmp inside the sandbox too) while 1,000 commands run, several at once, each trying to read a marker
in the host's /tmp and write beside it. Each command must either run confined or be refused; none may escape.
"""

from __future__ import annotations

import ctypes
import os
import secrets
import subprocess
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from rootbound.sandbox import bwrap
from tests.test_commands_support import CommandServers
from tests.test_security import _AT_FDCWD, _RENAME_EXCHANGE, _exchanger

pytestmark = [pytest.mark.anyio, pytest.mark.skipif(not bwrap.probe().ok, reason=f"bubblewrap unusable here: "
                                                    f"{bwrap.probe().detail} (.ci/run installs it)")]

COMMANDS = 1000
AT_ONCE = 8
EVERY = 0.002  # seconds between two swaps (the attack that found the hole swapped every 4 ms)


class Swapper:
    """A host thread that atomically exchanges two directory entries every `EVERY` seconds until stopped."""

    def __init__(self, a: Path, b: Path) -> None:
        self.swaps = 0
        self.error: str | None = None
        self._paths = (os.fsencode(a), os.fsencode(b))
        self._exchange = _exchanger()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        a, b = self._paths
        while not self._stop.wait(EVERY):
            if self._exchange(_AT_FDCWD, a, _AT_FDCWD, b, _RENAME_EXCHANGE) != 0:
                self.error = f"{os.strerror(ctypes.get_errno())} after {self.swaps} swaps"
                return
            self.swaps += 1

    def __enter__(self) -> Swapper:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


@pytest.fixture
def host_marker() -> Iterator[Path]:
    """A secret in the host's /tmp, which no command may ever see (its private /tmp is empty)."""
    path = Path("/tmp") / f"rootbound-race-{secrets.token_hex(6)}"
    path.write_text("HOST-SECRET\n")
    yield path
    for leftover in path.parent.glob(f"{path.name}*"):
        leftover.unlink()


async def test_swapping_a_guarded_directory_never_binds_the_host_tmp(servers: CommandServers, tmp_path: Path,
                                                                     host_marker: Path) -> None:
    ws = tmp_path / "workspace"
    ws.mkdir()
    subprocess.run(["git", "init", "-q", str(ws)], check=True)
    (ws / "swap").symlink_to("../" * (len(ws.parts) - 1) + "tmp")
    assert os.path.samefile(ws / "swap", "/tmp")
    h = await servers({"allowed": "*", "sandbox": "bwrap", "max_concurrent": AT_ONCE})
    script = (f"cat {host_marker} .git/{host_marker.name} 2>/dev/null; "
              f"echo w > {host_marker}-w$$ 2>/dev/null; echo w > .git/{host_marker.name}-w$$ 2>/dev/null; echo ran")
    outcomes: Counter[str] = Counter()
    escapes: list[str] = []

    async def worker(count: int) -> None:
        for _ in range(count):
            result = await h.call("shell", command=script, root="workspace")
            got = result.structured_content or {}
            text = f"{got.get('stdout')}{got.get('stderr')}" if got else str(result.content)
            if "HOST-SECRET" in text:
                escapes.append(text)
            if got.get("stdout") == "ran\n":
                outcomes["ran"] += 1
            elif "is a symbolic link" in text:
                outcomes["refused before the start (symlink at a guarded place)"] += 1
            elif "rootbound sandbox: a root or a protected path changed" in text:
                outcomes["refused by the launcher inside (a bind did not land where meant)"] += 1
            elif got.get("stderr", "").startswith("bwrap: "):  # its own checks (e.g. "Race condition binding dirfd")
                outcomes["refused by bubblewrap (a path changed while it mounted)"] += 1
            else:
                outcomes[f"failed otherwise: {text[:160]}"] += 1

    with Swapper(ws / ".git", ws / "swap") as swapper, anyio.fail_after(240):
        async with anyio.create_task_group() as tg:
            for _ in range(AT_ONCE):
                tg.start_soon(worker, COMMANDS // AT_ONCE)
    written = sorted(p.name for p in host_marker.parent.glob(f"{host_marker.name}-w*"))
    print(f"\n{COMMANDS} commands, {swapper.swaps} swaps: {dict(outcomes)}; escapes: {len(escapes)}; "
          f"files written beside the host marker: {len(written)}")
    assert not escapes and not written
    assert swapper.error is None, f"the swapping stopped: {swapper.error}"
    assert sum(outcomes.values()) == COMMANDS
    assert outcomes["ran"] > 0, outcomes
    assert sum(n for k, n in outcomes.items() if k.startswith("refused")) > 0, outcomes  # the race really ran
    assert [k for k in outcomes if k.startswith("failed otherwise")] == [], outcomes
