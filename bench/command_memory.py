"""Server memory per command output: peak RSS growth of a real `rootbound` stdio process while one, then eight
concurrent commands each print 10 MiB, and the RSS left afterwards.

Peak RSS is the kernel's VmHWM, reset (`/proc/PID/clear_refs` = 5) after a warm-up call; growth is measured
against the RSS just before the calls, and so is what is left once one more (small) call has been answered.
"kept" is what the server retains per output (head and tail, at most
`max_output_size` per stream); the rest streams to the spill file.

    python bench/command_memory.py [--size MiB] [--max-output MiB] [--src DIR]

`--src` runs another checkout's server (e.g. an unpacked `git archive main`) for a before/after comparison.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

MiB = 1 << 20


def _rss(pid: int, field: str) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no {field} for {pid}")


class Server:
    """A real rootbound process over stdio, driven with raw JSON-RPC (a client in this process would blur
    nothing: the server's memory is measured from /proc)."""

    def __init__(self, workdir: Path, max_output: int, src: str | None = None) -> None:
        cfg = workdir / "config.yaml"
        (workdir / "ws").mkdir(exist_ok=True)
        config: dict[str, Any] = {"roots": [{"name": "ws", "path": str(workdir / "ws")}],
                                  "commands": {"allowed": "*", "sandbox": "off", "max_output_size": max_output}}
        if src is None:  # another checkout may predate the keys
            config["state_dir"] = str(workdir / "state")
            # The whole output in the result, as before the inline cap: what is measured is max_output_size's bound.
            config["commands"]["inline_output_limit"] = 2 * max_output
        cfg.write_text(yaml.safe_dump(config))
        env = {k: v for k, v in os.environ.items() if not k.startswith(("ROOTBOUND_", "ALLOWED_"))}
        if src:
            env["PYTHONPATH"] = src
        self.proc = subprocess.Popen([sys.executable, "-m", "rootbound", "--config", str(cfg), "--log-level",
                                      "ERROR"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, env=env)
        self.next_id = 0
        self.request("initialize", {"protocolVersion": "2025-11-25", "capabilities": {},
                                    "clientInfo": {"name": "bench", "version": "1"}})
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def send(self, message: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(message).encode() + b"\n")
        self.proc.stdin.flush()

    def start(self, method: str, params: dict[str, Any]) -> int:
        self.next_id += 1
        self.send({"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params})
        return self.next_id

    def answers(self, count: int) -> list[dict[str, Any]]:
        assert self.proc.stdout is not None
        out = []
        while len(out) < count:
            msg = json.loads(self.proc.stdout.readline())
            if "id" in msg:
                out.append(msg)
        return out

    def request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        self.start(method, params)
        return self.answers(1)[0]

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)


def printing(size: int) -> dict[str, Any]:
    return {"name": "shell", "arguments": {"command": f"head -c {size} /dev/zero | tr '\\0' a", "root": "ws"}}


def measure(concurrent: int, size: int = 10 * MiB, max_output: int = 10 * MiB, src: str | None = None
            ) -> dict[str, int]:
    """Peak RSS growth and RSS left after `concurrent` commands printing `size` bytes each."""
    with tempfile.TemporaryDirectory() as tmp:
        server = Server(Path(tmp), max_output, src)
        try:
            pid = server.proc.pid
            for _ in range(2):  # warm-up (imports, threads) with a small output, so big buffers are not reused
                server.request("tools/call", printing(1000))
            before = _rss(pid, "VmRSS")
            with open(f"/proc/{pid}/clear_refs", "w") as f:
                f.write("5")  # reset VmHWM to the current RSS
            for _ in range(concurrent):
                server.start("tools/call", printing(size))
            for answer in server.answers(concurrent):
                assert "result" in answer and not answer["result"].get("isError"), str(answer)[:300]
            peak = _rss(pid, "VmHWM")
            server.request("tools/call", printing(1000))  # the last big answer is let go once the next is sent
            after = _rss(pid, "VmRSS")
        finally:
            server.close()
    kept = min(size, max_output)
    return {"concurrent": concurrent, "kept": kept * concurrent, "peak_growth": peak - before,
            "left": after - before}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=float, default=10, help="MiB each command prints (default 10)")
    parser.add_argument("--max-output", type=float, default=10, help="commands.max_output_size in MiB (default 10)")
    parser.add_argument("--src", help="run the server from this source tree (PYTHONPATH)")
    args = parser.parse_args()
    print(f"{'commands':>8} {'kept MiB':>9} {'peak growth MiB':>16} {'x kept':>7} {'left after MiB':>15}")
    for n in (1, 8):
        r = measure(n, int(args.size * MiB), int(args.max_output * MiB), args.src)
        print(f"{n:>8} {r['kept'] / MiB:>9.1f} {r['peak_growth'] / MiB:>16.1f} {r['peak_growth'] / r['kept']:>7.2f} "
              f"{r['left'] / MiB:>15.1f}")


if __name__ == "__main__":
    main()
