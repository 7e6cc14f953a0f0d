"""Soak passes for faults: **crash** (random SIGKILLs of a real server during overwrites, patches and folder moves
on one filesystem and across two; then a restart) and **orphan** (daemons started by commands under Landlock alone
and under bubblewrap, for each ending: exit, timeout, cancellation, server SIGKILL).

    python bench/soak_faults.py [--rounds N] [--seed S] [--passes crash,orphan]

`PASSES` maps each pass's name to a function of the parsed arguments returning its `Score`; `bench/soak.py`
runs them beside its own. A crash attempt fails when, after the restart, a file is neither exactly its old
nor its new content, a move left both or neither of source and destination (or either in part), or any
`.rootbound-*.tmp` name remains; "(recovered)" counts kills that left records for the restart to act on.
An orphan attempt fails when the daemon still runs a second after the end (after the restart, for a server
SIGKILL under Landlock alone, which nothing else can end).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from contextlib import suppress
from pathlib import Path
from typing import Any, ClassVar

import yaml

from _soak import Score
from rootbound.fs import atomic
from rootbound.sandbox import bwrap

MiB = 1 << 20


class Server:
    """A real `rootbound` process over stdio, driven with raw JSON-RPC lines."""

    def __init__(self, config: Path) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("ROOTBOUND_", "ALLOWED_"))}
        self.proc = subprocess.Popen([sys.executable, "-m", "rootbound", "--config", str(config), "--log-level",
                                      "ERROR"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, env=env, cwd=config.parent)
        self.next_id = 0
        self.call("initialize", {"protocolVersion": "2025-11-25", "capabilities": {},
                                 "clientInfo": {"name": "soak", "version": "1"}})
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def send(self, message: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(message).encode() + b"\n")
        self.proc.stdin.flush()

    def start(self, method: str, params: dict[str, Any]) -> int:
        self.next_id += 1
        self.send({"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params})
        return self.next_id

    def answer(self) -> dict[str, Any] | None:
        """The next response (None at end of output: the server died)."""
        assert self.proc.stdout is not None
        while line := self.proc.stdout.readline():
            msg = json.loads(line)
            if "id" in msg:
                return dict(msg)
        return None

    def call(self, method: str, params: dict[str, Any]) -> dict[str, Any] | None:
        self.start(method, params)
        return self.answer()

    def tool(self, name: str, **arguments: Any) -> dict[str, Any] | None:
        return self.call("tools/call", {"name": name, "arguments": arguments})

    def kill(self) -> None:
        with suppress(ProcessLookupError):
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(30)

    def close(self) -> None:
        if self.proc.poll() is None:
            if self.proc.stdin is not None:
                with suppress(OSError):
                    self.proc.stdin.close()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.kill()


def write_config(where: Path, roots: dict[str, Path], commands: dict[str, Any] | None = None) -> Path:
    data: dict[str, Any] = {"roots": [{"name": n, "path": str(p)} for n, p in roots.items()],
                            "state_dir": str(where / "state")}
    if commands:
        data["commands"] = commands
    cfg = where / f"config-{secrets.token_hex(3)}.yaml"
    cfg.write_text(yaml.safe_dump(data))
    return cfg


def snapshot(path: Path) -> dict[str, str]:
    """Every entry below `path`: a digest of each file, the text of each link, "dir" for each folder."""
    out: dict[str, str] = {}
    for dirpath, dirs, files in os.walk(path):
        for name in dirs + files:
            p = Path(dirpath) / name
            rel = str(p.relative_to(path))
            if p.is_symlink():
                out[rel] = "-> " + os.readlink(p)
            elif p.is_dir():
                out[rel] = "dir"
            else:
                out[rel] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def temp_names(*tops: Path) -> list[str]:
    return [os.path.join(d, n) for top in tops for d, ds, fs in os.walk(top) for n in ds + fs
            if atomic.is_temp_name(n)]


# -- crash ----------------------------------------------------------------------------------------


def _second_filesystem(base: Path) -> tuple[Path, Callable[[], None]] | None:
    """A directory on another filesystem than `base`: a mounted tmpfs (as root), else /dev/shm."""
    mount = base / "tmpfs"
    mount.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256m", "tmpfs", str(mount)],
                      capture_output=True).returncode == 0:
        return mount, lambda: subprocess.run(["umount", "-l", str(mount)], check=False)
    if os.access("/dev/shm", os.W_OK) and os.stat("/dev/shm").st_dev != os.stat(base).st_dev:
        shm = Path(tempfile.mkdtemp(dir="/dev/shm", prefix="rootbound-soak-"))
        return shm, lambda: shutil.rmtree(shm, ignore_errors=True)
    return None


def _package(top: Path, files: int) -> None:
    (top / "sub").mkdir(parents=True)
    for i in range(files):
        (top / ("sub" if i % 3 == 0 else "") / f"f{i}.txt").write_bytes(os.urandom(64 * 1024))
    (top / "link").symlink_to("sub/f0.txt")


class CrashCase:
    """One operation to interrupt: `setup` the roots, the `call` to make, and the acceptable outcomes."""

    name = ""

    def __init__(self, src: Path, dst: Path) -> None:
        self.src, self.dst = src, dst

    def setup(self) -> None: ...

    def call(self) -> tuple[str, dict[str, Any]]:
        raise NotImplementedError

    def outcome(self) -> str | None:
        """"old" or "new" when the state is one of the two; None when it is damaged."""
        raise NotImplementedError


class Overwrite(CrashCase):
    name = "overwrite 20 MB"
    old, new = b"old\n" * (256 * 1024), "new\n" * (5 * MiB)

    def setup(self) -> None:
        (self.src / "big.txt").write_bytes(self.old)

    def call(self) -> tuple[str, dict[str, Any]]:
        return "write_file", {"root": "src", "path": "big.txt", "content": self.new}

    def outcome(self) -> str | None:
        data = (self.src / "big.txt").read_bytes()
        return "old" if data == self.old else "new" if data == self.new.encode() else None


class Patch(CrashCase):
    name = "patch 8 MB"
    lines: ClassVar[list[str]] = [f"line {i}\n" for i in range(800_000)]
    patch = "@@ -400000,3 +400000,3 @@\n line 399999\n-line 400000\n+CHANGED\n line 400001\n"

    def setup(self) -> None:
        (self.src / "p.txt").write_text("".join(self.lines))

    def call(self) -> tuple[str, dict[str, Any]]:
        return "patch_file", {"root": "src", "path": "p.txt", "patch": self.patch}

    def outcome(self) -> str | None:
        text = (self.src / "p.txt").read_text()
        old = "".join(self.lines)
        return "old" if text == old else "new" if text == old.replace("line 400000\n", "CHANGED\n", 1) else None


class FolderMove(CrashCase):
    def __init__(self, src: Path, dst: Path, name: str) -> None:
        super().__init__(src, dst)
        self.name = name
        self.before: dict[str, str] = {}

    def setup(self) -> None:
        _package(self.src / "pkg", 300)
        self.before = snapshot(self.src / "pkg")

    def call(self) -> tuple[str, dict[str, Any]]:
        return "move", {"source_root": "src", "source_path": "pkg", "dest_root": "dst", "dest_path": "moved"}

    def outcome(self) -> str | None:
        src, dst = self.src / "pkg", self.dst / "moved"
        if src.exists() and not dst.exists() and snapshot(src) == self.before:
            return "old"
        if dst.exists() and not src.exists() and snapshot(dst) == self.before:
            return "new"
        return None


def _duration(base: Path, make: Callable[[Path, Path], CrashCase], roots: Callable[[Path], tuple[Path, Path]]
              ) -> float:
    """How long the operation takes uninterrupted (the window random kills are drawn from)."""
    work = Path(tempfile.mkdtemp(dir=base))
    src, dst = roots(work)
    case = make(src, dst)
    case.setup()
    server = Server(write_config(work, {"src": src, "dst": dst}))
    try:
        tool, args = case.call()
        start = time.perf_counter()
        answer = server.tool(tool, **args)
        took = time.perf_counter() - start
        assert answer is not None and not answer["result"].get("isError"), str(answer)[:300]
    finally:
        server.close()
        shutil.rmtree(work, ignore_errors=True)
    return took


def _crash_attempt(base: Path, case: CrashCase, delay: float, work: Path) -> str:
    """Kill the server `delay` seconds into the call, restart it; return the outcome or a failure text."""
    case.setup()
    cfg = write_config(work, {"src": case.src, "dst": case.dst})
    server = Server(cfg)
    tool, args = case.call()
    server.start("tools/call", {"name": tool, "arguments": args})
    time.sleep(delay)
    server.kill()
    pending = any(p.stat().st_size for p in (work / "state" / "pending").iterdir())
    again = Server(cfg)  # the restart: recovery runs before the first answer
    try:
        listing = again.tool("list_folder", root="dst", path="")
    finally:
        again.close()
    outcome = case.outcome()
    left = temp_names(case.src, case.dst)
    if outcome is None:
        return "damaged"
    if left:
        return f"temp left: {left[0]}"
    assert listing is not None
    shown = [e["name"] for e in listing["result"]["structuredContent"]["entries"]]
    if any(atomic.is_temp_name(n) for n in shown):
        return "temp listed"
    return f"{outcome} (recovered)" if pending else outcome


def crash_pass(args: argparse.Namespace) -> Score:
    rounds = int(getattr(args, "rounds", 20))
    rng = random.Random(getattr(args, "seed", None))
    score = Score()
    base = Path(tempfile.mkdtemp(prefix="rootbound-soak-crash-"))
    other = _second_filesystem(base)
    try:
        def same_fs(work: Path) -> tuple[Path, Path]:
            (work / "src").mkdir()
            (work / "dst").mkdir()
            return work / "src", work / "dst"

        def cross_fs(work: Path) -> tuple[Path, Path]:
            assert other is not None
            (work / "src").mkdir()
            dst = Path(tempfile.mkdtemp(dir=other[0]))
            return work / "src", dst

        kinds: list[tuple[str, Callable[[Path, Path], CrashCase], Callable[[Path], tuple[Path, Path]]]] = [
            ("overwrite 20 MB", Overwrite, same_fs),
            ("patch 8 MB", Patch, same_fs),
            ("folder move, same filesystem", lambda s, d: FolderMove(s, d, "folder move, same filesystem"), same_fs),
        ]
        if other is not None:
            kinds.append(("folder move, ext4 -> tmpfs",
                          lambda s, d: FolderMove(s, d, "folder move, across filesystems"), cross_fs))
        else:
            score.notes.append("cross-filesystem moves skipped: no second filesystem (tmpfs mount and /dev/shm)")
        for label, make, roots in kinds:
            window = _duration(base, make, roots)
            tally: Counter[str] = Counter()
            for _ in range(rounds):
                work = Path(tempfile.mkdtemp(dir=base))
                src, dst = roots(work)
                result = _crash_attempt(base, make(src, dst), rng.uniform(0, window * 1.1), work)
                score.attempts += 1
                tally[result] += 1
                if result.split(" ")[0] not in ("old", "new"):
                    score.failures += 1
                shutil.rmtree(work, ignore_errors=True)
                shutil.rmtree(dst, ignore_errors=True)
            score.notes.append(f"{label} (call takes {window * 1000:.0f} ms): "
                               + ", ".join(f"{k} {v}" for k, v in sorted(tally.items())))
    finally:
        if other is not None:
            other[1]()
        shutil.rmtree(base, ignore_errors=True)
    return score


# -- orphan ---------------------------------------------------------------------------------------


def _sleepers(tag: str) -> list[int]:
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
            with open(f"/proc/{pid}/stat", "rb") as f:
                state = f.read().rsplit(b")", 1)[1].split()[0]
        except OSError:
            continue
        if argv[:2] == [b"sleep", tag.encode()] and state not in (b"Z", b"X"):
            found.append(int(pid))
    return found


def _wait(predicate: Callable[[], object], seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return bool(predicate())


def _orphan_attempt(work: Path, sandbox: str, ending: str) -> str | None:
    """Run one command that double-forks a daemon and end it `ending`'s way; None if no daemon survives."""
    tag = f"300.{secrets.randbelow(10**8):08d}"
    daemon = f"setsid sh -c 'exec >/dev/null 2>&1 </dev/null; exec sleep {tag}' &"
    cfg = write_config(work, {"ws": work / "ws"}, {"allowed": "*", "sandbox": sandbox})
    server = Server(cfg)
    restarted: Server | None = None
    try:
        if ending == "exit":
            answer = server.tool("shell", command=f"{daemon} sleep 0.2; echo ok", root="ws")
            if answer is None or answer["result"].get("isError"):
                return f"call failed: {str(answer)[:200]}"
        elif ending == "timeout":
            server.tool("shell", command=f"{daemon} sleep 30", root="ws", timeout=1)
        else:
            rid = server.start("tools/call", {"name": "shell", "arguments": {"command": f"{daemon} sleep 30",
                                                                             "root": "ws"}})
            if not _wait(lambda: _sleepers(tag), 15):
                return "the daemon never started"
            if ending == "cancel":
                server.send({"jsonrpc": "2.0", "method": "notifications/cancelled",
                             "params": {"requestId": rid, "reason": "soak"}})
            else:
                server.kill()
                if sandbox == "landlock":  # nothing can end it but the next start
                    restarted = Server(cfg)
        if not _wait(lambda: not _sleepers(tag), 1.0 if ending != "cancel" else 2.5):
            return "daemon survived"
        return None
    finally:
        for pid in _sleepers(tag):  # whatever happened, nothing of this attempt stays
            with suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        for s in (server, restarted):
            if s is not None:
                s.close()


def orphan_pass(args: argparse.Namespace) -> Score:
    rounds = max(1, int(getattr(args, "rounds", 20)) // 4)
    score = Score()
    sandboxes = ["landlock"]
    if bwrap.BWRAP is not None:
        sandboxes.append("bwrap")
    else:
        score.notes.append("bubblewrap not installed: Landlock only")
    base = Path(tempfile.mkdtemp(prefix="rootbound-soak-orphan-"))
    try:
        for sandbox in sandboxes:
            for ending in ("exit", "timeout", "cancel", "server SIGKILL"):
                failed = 0
                for _ in range(rounds):
                    work = Path(tempfile.mkdtemp(dir=base))
                    (work / "ws").mkdir()
                    problem = _orphan_attempt(work, sandbox, ending)
                    score.attempts += 1
                    if problem is not None:
                        failed += 1
                        score.failures += 1
                        if len(score.notes) < 20:
                            score.notes.append(f"{sandbox}/{ending}: {problem}")
                score.notes.append(f"{sandbox}, {ending}: {rounds - failed}/{rounds} cleaned up")
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return score


PASSES: dict[str, Callable[[argparse.Namespace], Score]] = {"crash": crash_pass, "orphan": orphan_pass}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=20, help="kills per crash operation; orphan: a quarter of it "
                        "per sandbox and ending (default 20)")
    parser.add_argument("--seed", type=int, default=None, help="random seed for the kill times")
    parser.add_argument("--passes", default=",".join(PASSES), help=f"comma list of {', '.join(PASSES)}")
    args = parser.parse_args()
    scores = {name: PASSES[name](args) for name in args.passes.split(",") if name}
    print(f"{'pass':<10} {'attempts':>8} {'failures':>8}")
    for name, s in scores.items():
        print(f"{name:<10} {s.attempts:>8} {s.failures:>8}")
        for note in s.notes:
            print(f"  {note}")
    sys.exit(1 if any(s.failures for s in scores.values()) else 0)


if __name__ == "__main__":
    main()
