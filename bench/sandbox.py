"""Per-command cost of the OS sandbox: `echo hi` through execute_command with `commands.sandbox` off, landlock and
bwrap, in the same run (target: Landlock adds < 2 ms median); then the two ways to apply Landlock without
`preexec_fn`, measured on a bare spawn: a fresh restricted thread (what rootbound uses) against an exec launcher
(the Python program bubblewrap needs anyway, `rootbound.sandbox.exec`), with and without the seccomp filter; and
what the filter adds to each system call a command makes; last, what each part of one command's bubblewrap costs
(its real command line run whole and with one namespace, mount or the launcher left out, taking turns).

    python bench/sandbox.py [N]
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import threading
import timeit
from collections.abc import Callable
from contextlib import AsyncExitStack

import anyio
import yaml
from mcp import Client

from _util import checked, measure, print_table, verdict
from rootbound.config import load_config
from rootbound.execution.launch import Launch
from rootbound.fs import Root
from rootbound.sandbox import bwrap, helper, landlock, limits, seccomp
from rootbound.sandbox.launchers import _restrict
from rootbound.sandbox.layout import DEVICES, SYSTEM_PATHS
from rootbound.sandbox.select import launcher_for
from rootbound.sandbox.spawn import _in_thread
from rootbound.server import App

N = int(sys.argv[1]) if len(sys.argv) > 1 else 100


def _rules(root: str) -> list[landlock.Rule]:
    paths = [p for p in SYSTEM_PATHS if os.path.exists(p)]
    return ([landlock.Rule(landlock.FS_READ, path=p) for p in (*paths, "/proc")]
            + [landlock.Rule(landlock.FS_DEVICE, path=p) for p in DEVICES]
            + [landlock.Rule(landlock.FS_WRITE, path=root)])


async def tool_calls(tmp: str) -> dict[str, float]:
    modes = ["off", "landlock"] + (["bwrap"] if bwrap.probe().ok else [])
    async with AsyncExitStack() as stack:
        clients: dict[str, Client] = {}
        for mode in modes:
            cfg = os.path.join(tmp, f"{mode}.yaml")
            with open(cfg, "w") as f:
                yaml.safe_dump({"roots": [{"name": "workspace", "path": tmp}],
                                "commands": {"allowed": ["echo"], "sandbox": mode}}, f)
            app = App(load_config(cfg, env={}))
            stack.callback(app.close)
            clients[mode] = await stack.enter_async_context(Client(app.server))

        def case(client: Client):  # type: ignore[no-untyped-def]
            async def call() -> None:
                got = checked(await client.call_tool("execute_command", {"command": "echo hi", "root": "workspace"}))
                assert got["stdout"] == "hi\n", got
            return call

        def bare() -> None:  # the floor the targets are set against: a bare subprocess, no MCP
            subprocess.run(["echo", "hi"], capture_output=True, cwd=tmp, check=True)

        cases = {"bare subprocess": bare, **{f"sandbox: {m}": case(c) for m, c in clients.items()}}
        samples = await measure(cases, N, warmup=5)  # type: ignore[arg-type]
    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    medians = print_table(f"execute_command 'echo hi' (median of {N}, in-memory MCP client)", samples,
                          "bare subprocess")
    extra = (medians["sandbox: landlock"] - medians["sandbox: off"]) * 1000
    verdict("Landlock overhead < 2 ms median", extra < 2, f"{extra:+.2f} ms")
    if "sandbox: bwrap" in medians:
        over = (medians["sandbox: bwrap"] - medians["bare subprocess"]) * 1000
        print(f"  bubblewrap overhead: {(medians['sandbox: bwrap'] - medians['sandbox: off']) * 1000:+.2f} ms over off "
              f"(bwrap's namespaces and mounts, plus the compiled launcher inside that applies Landlock)")
        verdict("bubblewrap at most 10 ms over a bare subprocess", over <= 10, f"{over:+.2f} ms")
    over = (medians["sandbox: landlock"] - medians["bare subprocess"]) * 1000
    verdict("Landlock alone at most 3 ms over a bare subprocess", over <= 3, f"{over:+.2f} ms")
    return medians


async def bare_spawns(tmp: str) -> None:
    rules = _rules(tmp)
    level = landlock.support()
    launcher = [*bwrap.launcher_argv(), "--abi", str(level.abi), "--net", "0", "--seccomp", "sockets"]
    for p in (*SYSTEM_PATHS, "/proc"):
        if os.path.exists(p):
            launcher += ["--read", p]
    launcher += ["--write", tmp, "--", "/bin/echo", "echo", "hi"]
    prlimit = limits.prlimit_argv(load_config(None, [tmp], env={}).commands.limits)

    def plain() -> None:
        subprocess.run(["/bin/echo", "hi"], stdout=subprocess.DEVNULL, check=True)

    def thread(network: bool = False, metadata: bool = False, argv: tuple[str, ...] = ()) -> Callable[[], None]:
        def body() -> subprocess.Popen[bytes]:
            _restrict(rules=rules, network=network, user=None, level=level, metadata=metadata)
            return subprocess.Popen([*argv, "/bin/echo", "hi"], stdout=subprocess.DEVNULL)

        def spawn() -> None:
            _in_thread(body).wait()
        return spawn

    def exec_launcher() -> None:
        subprocess.run(launcher, stdout=subprocess.DEVNULL, check=True)

    compiled = helper.helper_bytes()
    helper_file = os.path.join(tmp, "exec-helper")
    if compiled is not None:
        with open(helper_file, "wb") as f:
            f.write(compiled)
        os.chmod(helper_file, 0o755)
    c_launcher = [helper_file, *launcher[launcher.index("--abi"):]]
    c_launcher[c_launcher.index("--seccomp"):c_launcher.index("--seccomp") + 2] = []  # (bubblewrap installs it)

    def compiled_launcher() -> None:
        subprocess.run(c_launcher, stdout=subprocess.DEVNULL, check=True)

    memfd = helper.executable()
    limit_options = [o for res, value in limits.pairs(load_config(None, [tmp], env={}).commands.limits)
                     for o in ("--limit", f"{res}:{value}")]

    rule_options = ["--abi", str(level.abi), "--net", "0"]
    for rule in rules:
        kind = {landlock.FS_READ: "read", landlock.FS_WRITE: "write", landlock.FS_DEVICE: "device"}[rule.access]
        rule_options += [f"--{kind}", str(rule.path)]

    def memfd_launcher() -> None:  # what Landlock alone does now: no thread; rules, seccomp and limits in C
        assert memfd is not None
        filter_fd = helper.stage(seccomp.program(sockets=True, metadata=False))
        try:
            path = f"/proc/self/fd/{memfd}"
            subprocess.run([path, *rule_options, "--filter", str(filter_fd), *limit_options, "--",
                            "/bin/echo", "echo", "hi"], executable=path, pass_fds=(memfd, filter_fd),
                           stdout=subprocess.DEVNULL, check=True)
        finally:
            os.close(filter_fd)

    cases = {"plain Popen": plain, "restricted thread + Popen (no seccomp)": thread(network=True),
             "restricted thread + Popen (seccomp: sockets)": thread(),
             "restricted thread + Popen (seccomp: sockets, metadata)": thread(metadata=True),
             "restricted thread + prlimit": thread(argv=tuple(prlimit)), "exec launcher (python -I -S)": exec_launcher,
             **({"exec launcher (compiled, no seccomp)": compiled_launcher} if compiled is not None else {}),
             **({"compiled launcher from memfd (rules, seccomp: sockets, limits)": memfd_launcher}
                if memfd is not None else {})}
    samples = await measure(cases, N, warmup=3)  # type: ignore[arg-type]
    print_table("spawning /bin/echo with Landlock applied (no preexec_fn)", samples, "plain Popen")


def syscall_cost() -> None:
    """What the seccomp filter adds to every system call a command makes: 2*10^6 getppid() in a child, without and
    with the filter. CPU time, best of N/10 runs (wall time on a shared machine is mostly other people's work)."""
    loop = ("import os, time; t = time.process_time(); [os.getppid() for _ in range(2 * 10**6)]; "
            "print(time.process_time() - t)")

    def child(sockets: bool, metadata: bool) -> float:
        def body() -> subprocess.Popen[bytes]:
            if sockets or metadata:
                seccomp.restrict_thread(sockets=sockets, metadata=metadata)
            return subprocess.Popen([sys.executable, "-I", "-S", "-c", loop], stdout=subprocess.PIPE)
        return float(_in_thread(body).communicate()[0]) / 2e6

    cases = {"no filter": (False, False), "seccomp: sockets": (True, False),
             "seccomp: sockets, metadata": (True, True)}
    best = dict.fromkeys(cases, float("inf"))
    for _ in range(max(5, N // 10)):
        for label, options in cases.items():
            best[label] = min(best[label], child(*options))
    print("\ngetppid() in a command, CPU time per call (Python loop included), best run")
    for label, seconds in best.items():
        print(f"  {label:28} {seconds * 1e9:6.0f} ns  ({(seconds - best['no filter']) * 1e9:+.0f} ns)")

    def install() -> None:
        thread = threading.Thread(target=seccomp.restrict_thread, kwargs={"sockets": True, "metadata": True})
        thread.start()
        thread.join()

    install_times = timeit.repeat(install, number=1, repeat=max(5, N // 10))
    print(f"  installing the filter on a thread (thread start included): {min(install_times) * 1e6:.0f} us best")


def _without(argv: list[str], flag: str, arity: int, value: str | None = None) -> list[str]:
    """bubblewrap's options up to its `--` with every `flag` (taking `arity` values, the first `value` if given)
    left out; the launcher's options after it stay."""
    end = argv.index("--")
    out, i = [], 0
    while i < end:
        if argv[i] == flag and (value is None or argv[i + 1] == value):
            i += 1 + arity
            continue
        out.append(argv[i])
        i += 1
    return out + argv[end:]


def _without_launcher(argv: list[str]) -> list[str]:
    """bubblewrap executing the command itself: no Landlock, no bind checks, no limits (to price the launcher)."""
    start = argv.index(helper.PATH, argv.index("--"))
    end = argv.index("--", start + 1)
    return [*argv[:start], argv[end + 1], *argv[end + 3:]]


async def bwrap_parts(tmp: str) -> None:
    """What each part of one command's bubblewrap costs: the real command line (`BwrapLauncher.wrap`, a git
    repository as root) run whole and with one part left out, taking turns. Parts every guarantee needs are priced
    too, to show where the time goes; a difference under ~0.5 ms is noise on a shared machine."""
    if not bwrap.probe().ok or helper.helper_bytes() is None:
        print("\nbubblewrap's parts: skipped (bubblewrap or the compiled launcher unavailable)")
        return
    root = os.path.join(tmp, "repo")
    os.mkdir(root)
    subprocess.run(["git", "init", "-q", root], check=True)
    config = load_config(None, [f"bench={root}"], overrides={"commands": {"allowed": ["echo"], "sandbox": "bwrap"}},
                         env={})
    launcher = launcher_for(config)
    served = Root("bench", root, frozenset({"write_file"}), os.open(root, os.O_RDONLY | os.O_DIRECTORY))
    env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}
    parts: dict[str, Callable[[list[str]], list[str]]] = {
        "whole": lambda a: a,
        "without /sys": lambda a: _without(a, "--ro-bind", 2, "/sys"),
        "without --dev /dev": lambda a: _without(a, "--dev", 1),
        "without --unshare-net": lambda a: _without(a, "--unshare-net", 0),
        "without --unshare-ipc": lambda a: _without(a, "--unshare-ipc", 0),
        "without --unshare-uts": lambda a: _without(a, "--unshare-uts", 0),
        "without --unshare-cgroup-try": lambda a: _without(a, "--unshare-cgroup-try", 0),
        "without the launcher": _without_launcher,
    }

    def case(change: Callable[[list[str]], list[str]]) -> Callable[[], None]:
        def run() -> None:
            # (a bubblewrap of its own, as a command the supervisor cannot take: its command line is what is timed)
            launch = launcher._one_bwrap(Launch("/usr/bin/echo", ["echo", "hi"], served.handle(), root, env,
                                                roots=(served,)))
            try:
                done = subprocess.run(change(list(launch.argv)), executable=launch.executable, capture_output=True,
                                      cwd=root, env=dict(launch.env), start_new_session=True,
                                      pass_fds=launch.popen_options["pass_fds"])
                assert done.stdout == b"hi\n", done.stderr
            finally:
                if launch.cleanup is not None:
                    launch.cleanup()
        return run

    samples = await measure({name: case(change) for name, change in parts.items()}, N, warmup=3)
    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print_table("bubblewrap's parts: one command's echo hi, whole and without one part (not a configuration)",
                samples, "whole")


async def main() -> None:
    print(f"Landlock: {landlock.support().describe()}; bubblewrap: {bwrap.probe().detail}")
    with tempfile.TemporaryDirectory() as tmp:
        await tool_calls(tmp)
        await bare_spawns(tmp)
    syscall_cost()
    with tempfile.TemporaryDirectory() as tmp:
        await bwrap_parts(tmp)


if __name__ == "__main__":
    anyio.run(main)
