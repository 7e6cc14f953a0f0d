"""Soak: load, fuzz (and, when bench/soak_faults.py is there, crash and orphan) passes against the real
server, ending in a scoreboard of attempts and failures per pass (issue 12's "Done means").

    python bench/soak.py                       # every pass at the default (moderate) scale
    python bench/soak.py --passes fuzz --scale 10
    python bench/soak.py --passes load-http --sessions 50 --calls 400

Passes:
  load-http   many sessions (handshake and 2026-07-28) making mixed tool calls at once over HTTP; every
              call must succeed with the expected content
  load-stdio  sequential calls over one stdio server, sampling its RSS and open fds (a leak fails)
  fuzz-stdio  malformed JSON-RPC and mutated arguments over stdio: every line owed an answer must get one
  fuzz-http   the same bodies POSTed over HTTP: every one must get a response below 500
Both fuzz passes also fail on a crash ("internal error in …") or a traceback in the server's log.
bench/soak_faults.py, if present, adds its PASSES (e.g. crash, orphan).
"""

from __future__ import annotations

import argparse
import importlib
import json
import math
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from _soak import Pass, RawStdio, Score, http_server, process_stats, workspace

MODERN = "2026-07-28"
META = {"io.modelcontextprotocol/protocolVersion": MODERN, "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "soak", "version": "0"}}
ANSWER_TIMEOUT = 15.0  # seconds a request owed an answer may take before it counts as unanswered


# -- load ----------------------------------------------------------------------------------------------------


def _mixed_call(rng: random.Random, session: int, n: int) -> tuple[str, dict[str, Any], Callable[[Any], bool]]:
    """One call of the mix: (tool, arguments, check of its structured result)."""
    i = rng.randrange(20)
    mine = f"s{session}"
    choices: list[tuple[str, dict[str, Any], Callable[[Any], bool]]] = [
        ("list_roots", {}, lambda r: any(x["name"] == "ws" for x in r["roots"])),
        ("list_folder", {"root": "ws", "path": "."}, lambda r: len(r["entries"]) >= 20),
        ("read_file", {"root": "ws", "path": f"f{i}.txt"}, lambda r: r["content"].startswith(f"file {i}\n")),
        ("stat_file", {"root": "ws", "path": f"f{i}.txt"}, lambda r: r["size"] > 0),
        ("hash_file", {"root": "ws", "path": f"f{i}.txt"}, lambda r: len(r["hash"]) == 64),
        ("grep", {"root": "ws", "pattern": f"^file {i}$"}, lambda r: r["total_matches"] >= 1),
        ("glob", {"root": "ws", "pattern": "*.txt"}, lambda r: r["total_matches"] >= 20),
        ("write_file", {"root": "ws", "path": f"{mine}/w{n}.txt", "content": f"{session}-{n}\n"}, lambda r: True),
        ("create_folder", {"root": "ws", "path": f"{mine}/d{n}"}, lambda r: True),
        ("copy", {"source_root": "ws", "source_path": f"f{i}.txt", "dest_root": "ws",
                  "dest_path": f"{mine}/c{n}.txt"}, lambda r: True),
    ]
    if n % 25 == 0:  # a sandboxed command now and then: each costs a bubblewrap start
        choices.append(("execute_command", {"command": f"echo {session}-{n}", "root": "ws"},
                        lambda r: r["stdout"] == f"{session}-{n}\n"))
        return choices[-1]
    return rng.choice(choices)


def load_http(args: argparse.Namespace) -> Score:
    score = Score()
    latencies: list[float] = []
    rng = random.Random(args.seed)
    with workspace() as ws, tempfile.TemporaryDirectory() as tmp, \
            http_server(["--root", f"ws={ws}", "--allow-commands", "echo", "--log-level", "WARNING"],
                        Path(tmp) / "stderr.log") as (base, proc):
        for s in range(args.sessions):
            (ws / f"s{s}").mkdir()

        async def session(s: int) -> None:
            mode = "legacy" if s % 2 else "auto"
            try:
                async with httpx2.AsyncClient(timeout=60) as http, \
                        Client(streamable_http_client(f"{base}/mcp", http_client=http), mode=mode) as client:
                    for n in range(args.calls):
                        tool, arguments, ok = _mixed_call(rng, s, n)
                        score.attempts += 1
                        start = time.perf_counter()
                        try:
                            result = await client.call_tool(tool, arguments)
                        except Exception as exc:
                            score.fail(f"{tool} in session {s}: {type(exc).__name__}: {exc}")
                            continue
                        latencies.append(time.perf_counter() - start)
                        data = result.structured_content
                        if result.is_error or data is None or not ok(data):
                            score.fail(f"{tool} {arguments}: {result.content[0].text[:200]}")  # type: ignore[union-attr]
            except Exception as exc:
                score.fail(f"session {s} ({mode}): {type(exc).__name__}: {exc}")

        start = time.perf_counter()

        async def all_sessions() -> None:
            async with anyio.create_task_group() as tg:
                for s in range(args.sessions):
                    tg.start_soon(session, s)

        anyio.run(all_sessions)
        wall = time.perf_counter() - start
        rss, fds = process_stats(proc.pid)
        _note_exceptions(score, Path(tmp) / "stderr.log")
    if latencies:
        latencies.sort()
        score.note(f"{len(latencies)} calls from {args.sessions} sessions in {wall:.1f} s "
                   f"({len(latencies) / wall:.0f}/s); latency p50 {_ms(statistics.median(latencies))}, "
                   f"p99 {_ms(latencies[int(0.99 * (len(latencies) - 1))])}; server RSS {rss:.0f} MiB, {fds} fds")
    return score


def load_stdio(args: argparse.Namespace) -> Score:
    score = Score()
    rng = random.Random(args.seed)
    samples: list[tuple[float, int]] = []
    every = max(1, args.stdio_calls // 20)
    with workspace() as ws, tempfile.TemporaryDirectory() as tmp:
        (ws / "s0").mkdir()
        server = RawStdio(["--root", f"ws={ws}", "--log-level", "WARNING"], Path(tmp) / "stderr.log")
        try:
            server.initialize()
            start = time.perf_counter()
            for n in range(args.stdio_calls):
                if n % every == 0:
                    samples.append(process_stats(server.proc.pid))
                tool, arguments, ok = _mixed_call(rng, 0, n)
                if tool == "execute_command":  # this server runs no commands
                    continue
                score.attempts += 1
                reply = server.request({"jsonrpc": "2.0", "id": n, "method": "tools/call",
                                        "params": {"name": tool, "arguments": arguments}})
                result = (reply or {}).get("result")
                if result is None or result.get("isError") or not ok(result.get("structuredContent")):
                    score.fail(f"{tool} {arguments}: {json.dumps(reply)[:200]}")
            wall = time.perf_counter() - start
            samples.append(process_stats(server.proc.pid))
        finally:
            server.close()
        _note_exceptions(score, Path(tmp) / "stderr.log")
    settled = samples[len(samples) // 4:]  # after warm-up (caches, thread pool)
    rss = [r for r, _ in settled]
    fds = [f for _, f in settled]
    score.note(f"{score.attempts} sequential calls in {wall:.1f} s ({score.attempts / wall:.0f}/s); "
               f"RSS {min(rss):.0f}-{max(rss):.0f} MiB, fds {min(fds)}-{max(fds)} over {len(samples)} samples")
    if fds[-1] - fds[0] > 3:
        score.fail(f"open fds grew from {fds[0]} to {fds[-1]}")
    if rss[-1] - rss[0] > 50:
        score.fail(f"RSS grew from {rss[0]:.0f} to {rss[-1]:.0f} MiB")
    return score


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f} ms"


# -- fuzz ----------------------------------------------------------------------------------------------------

_TOOLS: list[tuple[str, dict[str, Any]]] = [
    ("read_file", {"root": "ws", "path": "f1.txt"}),
    ("list_folder", {"root": "ws", "path": "."}),
    ("write_file", {"root": "ws", "path": "fuzz/out.txt", "content": "x"}),
    ("stat_file", {"root": "ws", "path": "f2.txt"}),
    ("hash_file", {"root": "ws", "path": "f3.txt", "algorithm": "sha256"}),
    ("grep", {"root": "ws", "pattern": "line"}),
    ("glob", {"root": "ws", "pattern": "*.txt"}),
    ("patch_file", {"root": "ws", "path": "f4.txt", "patch": "@@ -1 +1 @@\n-file 4\n+file four\n"}),
    ("copy", {"source_root": "ws", "source_path": "f5.txt", "dest_root": "ws", "dest_path": "fuzz/c.txt"}),
    ("create_folder", {"root": "ws", "path": "fuzz/d"}),
    ("list_roots", {}),
]
_JUNK: list[Any] = [None, True, 0, -1, 2**64, 1.5, float("inf"), "", "../../etc/passwd", "/etc/passwd", "a\x00b",
                    "\ud800", "ü" * 50, "x" * 300_000, [], ["a"], {}, {"a": {"b": [1]}}]


def _junk(rng: random.Random) -> Any:
    return rng.choice(_JUNK)


def _mutated_arguments(rng: random.Random) -> tuple[str, dict[str, Any]]:
    tool, arguments = rng.choice(_TOOLS)
    arguments = dict(arguments)
    match rng.randrange(5):
        case 0 if arguments:
            del arguments[rng.choice(list(arguments))]
        case 1:
            arguments[rng.choice(["extra", "ROOT", "pathh", "x" * 500])] = _junk(rng)
        case 2 if arguments:
            arguments[rng.choice(list(arguments))] = _junk(rng)
        case 3:
            tool = rng.choice(["nope", "", "read_file\x00", "x" * 10_000, "READ_FILE"])
        case _:
            arguments = {k: _junk(rng) for k in arguments}
    return tool, arguments


def _deep(levels: int) -> str:
    return "[" * levels + "]" * levels


def _fuzz_line(rng: random.Random, n: int) -> bytes:
    """One line a careless or hostile client might send; ids are unique per line where there is one."""
    valid = {"jsonrpc": "2.0", "id": n, "method": "tools/call",
             "params": {"name": "read_file", "arguments": {"root": "ws", "path": "f1.txt"}}}
    text = json.dumps(valid)
    kind = rng.randrange(14)
    if kind == 0:
        return text.replace('"f1.txt"', '"\\ud800"').encode()
    if kind == 1:
        return text.replace('"f1.txt"', _deep(rng.choice([199, 250, 1000, 5000]))).encode()
    if kind == 2:
        return json.dumps({**valid, "params": [1, 2]}).encode()
    if kind == 3:
        return json.dumps({**valid, "id": rng.choice([{"a": n}, n + 0.5, True, None, [n]])}).encode()
    if kind == 4:
        return json.dumps({**valid, "jsonrpc": rng.choice(["1.0", "2", 2.0, None])}).encode()
    if kind == 5:
        return text.encode()[: rng.randrange(1, len(text))]  # truncated
    if kind == 6:
        raw = bytearray(text.encode())
        for _ in range(rng.randrange(1, 4)):
            raw[rng.randrange(len(raw))] = rng.randrange(256)
        return bytes(raw).replace(b"\n", b" ")
    if kind == 7:
        return json.dumps([valid, {**valid, "id": f"b{n}"}]).encode()
    if kind == 8:
        return json.dumps({**valid, "method": rng.choice(["", "nope", 7, "tools/" + "x" * 1000, None])}).encode()
    if kind == 9:
        return json.dumps(rng.choice([1, "x", None, [], True])).encode()
    tool, arguments = _mutated_arguments(rng)
    return json.dumps({**valid, "params": {"name": tool, "arguments": arguments}}).encode()


def _owed(line: bytes) -> set[Any]:
    """The ids of the answers JSON-RPC says this line is owed (None: an error with a null id)."""
    try:
        value = json.loads(line)
    except (ValueError, RecursionError):
        return {None}
    if isinstance(value, list):
        return {_id(m["id"]) for m in value if isinstance(m, dict) and "id" in m} or {None}
    if not isinstance(value, dict):
        return {None}
    if "method" not in value and ("result" in value or "error" in value):
        return set()  # a response: never answered
    if "id" in value:
        return {_id(value["id"])}
    is_notification = value.get("jsonrpc") == "2.0" and isinstance(value.get("method"), str) \
        and isinstance(value.get("params", {}), dict)
    return set() if is_notification else {None}


def _id(value: Any) -> Any:
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        return None
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return None if isinstance(value, str) and len(value) > 1024 else value


def _name(line: bytes) -> str:
    """The tool name for the Mcp-Name header, when the body has a sensible one."""
    try:
        name = json.loads(line)["params"]["name"]
    except (ValueError, RecursionError, KeyError, TypeError):
        return "read_file"
    return name if isinstance(name, str) and name.isascii() and name.isprintable() and len(name) < 100 \
        else "read_file"


def _exceptions(log: Path) -> dict[str, int]:
    """The last line of each traceback in the server's JSON log, with how often it occurred."""
    found: dict[str, int] = {}
    for line in log.read_text(errors="replace").splitlines():
        try:
            exc = json.loads(line).get("exc")
        except ValueError:
            exc = line if "Traceback" in line else None
        if exc:
            frames = [x.strip() for x in exc.splitlines() if x.strip().startswith("File ")]
            where = frames[-1].split("/")[-1] if frames else ""  # the innermost frame: file, line, function
            last = f"{exc.strip().splitlines()[-1][:200]} (at {where[:120]})"
            found[last] = found.get(last, 0) + 1
    return found


def _note_exceptions(score: Score, log: Path) -> None:
    for last, count in _exceptions(log).items():
        score.note(f"server log: {count}× {last}")


def _check_log(score: Score, log: Path) -> None:
    text = log.read_text(errors="replace")
    for last, count in _exceptions(log).items():
        for _ in range(count):
            score.fail(f"a traceback in the server log: {last}")
    lines = text.splitlines() or [""]
    score.note(f"server log: {len(text.encode()) / 1024:.0f} KiB in {len(lines)} lines, "
               f"longest {max(map(len, lines))} bytes")


def fuzz_stdio(args: argparse.Namespace) -> Score:
    score = Score()
    rng = random.Random(args.seed)
    unanswered = crashes = 0
    with workspace() as ws, tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "stderr.log"
        server = RawStdio(["--root", f"ws={ws}"], log)
        try:
            server.initialize()
            for n in range(args.fuzz):
                line = _fuzz_line(rng, n)
                owed = _owed(line)
                score.attempts += 1
                server.send(line)
                sentinel = f"sentinel-{n}"
                server.send({"jsonrpc": "2.0", "id": sentinel, "method": "ping"})
                deadline = time.monotonic() + ANSWER_TIMEOUT
                seen_sentinel = False
                while (owed or not seen_sentinel) and (left := deadline - time.monotonic()) > 0:
                    reply = server.recv(left)
                    if reply is None:
                        break
                    if "method" in reply:
                        continue
                    rid = reply.get("id")
                    seen_sentinel = seen_sentinel or rid == sentinel
                    owed.discard(rid)
                    text = json.dumps(reply.get("result", {}).get("content", ""))
                    if "internal error in" in text:
                        crashes += 1
                        score.fail(f"crash on {line[:150]!r}")
                if owed:
                    unanswered += 1
                    score.fail(f"no answer for id {sorted(map(repr, owed))} to {line[:150]!r}")
                if server.proc.poll() is not None:
                    score.fail(f"the server died (status {server.proc.returncode}) after {line[:150]!r}")
                    break
        finally:
            server.close()
        _check_log(score, log)
    score.note(f"{unanswered} unanswered, {crashes} crashes")
    return score


def fuzz_http(args: argparse.Namespace) -> Score:
    score = Score()
    rng = random.Random(args.seed + 1)
    statuses: dict[int, int] = {}
    with workspace() as ws, tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "stderr.log"
        with http_server(["--root", f"ws={ws}"], log) as (base, _):
            opened = httpx2.post(f"{base}/mcp", headers={"Accept": "application/json, text/event-stream"},
                                 json={"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
                                     "protocolVersion": "2025-11-25", "capabilities": {},
                                     "clientInfo": {"name": "soak", "version": "0"}}}, timeout=30)
            session = opened.headers["mcp-session-id"]

            async def one(http: httpx2.AsyncClient, limit: anyio.Semaphore, n: int) -> None:
                line = _fuzz_line(rng, n)
                headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
                if n % 2:
                    headers |= {"MCP-Protocol-Version": MODERN, "Mcp-Method": "tools/call", "Mcp-Name": _name(line)}
                    line = line.replace(b'"params": {', b'"params": {"_meta": ' + json.dumps(META).encode() + b", ", 1)
                else:
                    headers |= {"mcp-session-id": session, "MCP-Protocol-Version": "2025-11-25"}
                score.attempts += 1
                async with limit:
                    try:
                        response = await http.post(f"{base}/mcp", content=line, headers=headers)
                    except Exception as exc:
                        score.fail(f"no response ({type(exc).__name__}) to {line[:150]!r}")
                        return
                statuses[response.status_code] = statuses.get(response.status_code, 0) + 1
                if response.status_code >= 500:
                    score.fail(f"{response.status_code} for {line[:150]!r}")
                elif "internal error in" in response.text:
                    score.fail(f"crash on {line[:150]!r}")

            async def all_bodies() -> None:
                limit = anyio.Semaphore(8)
                async with httpx2.AsyncClient(timeout=ANSWER_TIMEOUT * 2) as http, anyio.create_task_group() as tg:
                    for n in range(args.fuzz_http):
                        tg.start_soon(one, http, limit, n)

            anyio.run(all_bodies)
        _check_log(score, log)
    score.note("HTTP statuses: " + ", ".join(f"{k}×{v}" for k, v in sorted(statuses.items())))
    return score


# -- the scoreboard ------------------------------------------------------------------------------------------

PASSES: dict[str, Pass] = {"load-http": load_http, "load-stdio": load_stdio, "fuzz-stdio": fuzz_stdio,
                           "fuzz-http": fuzz_http}
GROUPS = {"load": ["load-http", "load-stdio"], "fuzz": ["fuzz-stdio", "fuzz-http"]}


def _all_passes() -> dict[str, Pass]:
    """Ours, then those of bench/soak_faults.py (crash, orphan) if it is there."""
    passes = dict(PASSES)
    try:
        faults = importlib.import_module("soak_faults")
    except ModuleNotFoundError as exc:
        if exc.name != "soak_faults":
            raise
    else:
        passes.update(faults.PASSES)
    return passes


def print_scoreboard(scores: dict[str, Score], seconds: dict[str, float]) -> None:
    width = max(len(name) for name in scores)
    print(f"\n{'pass':{width}}  {'attempts':>9}  {'failures':>9}  {'seconds':>8}")
    for name, score in scores.items():
        print(f"{name:{width}}  {score.attempts:9d}  {score.failures:9d}  {seconds[name]:8.1f}")
        for note in score.notes:
            print(f"{'':{width}}    {note}")
    total = sum(s.failures for s in scores.values())
    print(f"\n{sum(s.attempts for s in scores.values())} attempts, {total} failures")


def main(argv: list[str] | None = None) -> int:
    passes = _all_passes()
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--passes", default="all",
                        help=f"comma-separated: all, {', '.join(GROUPS)}, or pass names ({', '.join(passes)})")
    parser.add_argument("--scale", type=float, default=1.0,
                        help="multiplies the call and line counts below (default 1; 10 is issue 12's run)")
    parser.add_argument("--sessions", type=int, default=20, help="load-http: concurrent sessions (20)")
    parser.add_argument("--calls", type=int, default=50, help="load-http: calls per session (50)")
    parser.add_argument("--stdio-calls", type=int, default=2000, help="load-stdio: sequential calls (2000)")
    parser.add_argument("--fuzz", type=int, default=1000, help="fuzz-stdio: lines (1000)")
    parser.add_argument("--fuzz-http", type=int, default=500, help="fuzz-http: bodies (500)")
    parser.add_argument("--seed", type=int, default=12, help="random seed (12)")
    args = parser.parse_args(argv)
    for size in ("calls", "stdio_calls", "fuzz", "fuzz_http"):
        setattr(args, size, max(1, round(getattr(args, size) * args.scale)))
    wanted: list[str] = []
    for name in args.passes.split(","):
        names = list(passes) if name == "all" else GROUPS.get(name, [name])
        unknown = [n for n in names if n not in passes]
        if unknown:
            parser.error(f"unknown pass {', '.join(unknown)}; known: {', '.join(passes)}")
        wanted += [n for n in names if n not in wanted]
    scores: dict[str, Score] = {}
    seconds: dict[str, float] = {}
    for name in wanted:
        print(f"== {name}", file=sys.stderr, flush=True)
        start = time.perf_counter()
        try:
            scores[name] = passes[name](args)
        except Exception as exc:  # a pass that cannot run is a failure of its own, not the end of the soak
            scores[name] = Score(failures=1, notes=[f"the pass itself failed: {type(exc).__name__}: {exc}"])
        seconds[name] = time.perf_counter() - start
    print_scoreboard(scores, seconds)
    return 1 if any(s.failures for s in scores.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
