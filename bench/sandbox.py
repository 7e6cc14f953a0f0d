"""Per-command cost of the OS sandbox: `echo hi` through execute_command with `commands.sandbox` off, landlock and
bwrap, in the same run (target: Landlock adds < 2 ms median); then the two ways to apply Landlock without
`preexec_fn`, measured on a bare spawn: a fresh restricted thread (what rootbound uses) against an exec launcher
(the Python program bubblewrap needs anyway, `rootbound.sandbox.exec`).

    python bench/sandbox.py [N]
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from contextlib import AsyncExitStack

import anyio
import yaml
from mcp import Client

from _util import checked, measure, print_table, verdict
from rootbound.config import load_config
from rootbound.sandbox import bwrap, landlock, limits
from rootbound.sandbox.launchers import _restrict
from rootbound.sandbox.layout import DEVICES, SYSTEM_PATHS
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

        samples = await measure({f"sandbox: {m}": case(c) for m, c in clients.items()}, N, warmup=5)
    medians = print_table(f"execute_command 'echo hi' (median of {N}, in-memory MCP client)", samples,
                          "sandbox: off")
    extra = (medians["sandbox: landlock"] - medians["sandbox: off"]) * 1000
    verdict("Landlock overhead < 2 ms median", extra < 2, f"{extra:+.2f} ms")
    if "sandbox: bwrap" in medians:
        print(f"  bubblewrap overhead: {(medians['sandbox: bwrap'] - medians['sandbox: off']) * 1000:+.2f} ms "
              "(bwrap itself, plus the Python launcher inside that applies Landlock)")
    return medians


async def bare_spawns(tmp: str) -> None:
    rules = _rules(tmp)
    level = landlock.support()
    launcher = [*bwrap.launcher_argv(), "--abi", str(level.abi), "--net", "0"]
    for p in (*SYSTEM_PATHS, "/proc"):
        if os.path.exists(p):
            launcher += ["--read", p]
    launcher += ["--write", tmp, "--", "/bin/echo", "echo", "hi"]
    prlimit = limits.prlimit_argv(load_config(None, [tmp], env={}).commands.limits)

    def plain() -> None:
        subprocess.run(["/bin/echo", "hi"], stdout=subprocess.DEVNULL, check=True)

    def thread() -> None:
        _in_thread(lambda: (_restrict(rules=rules, network=False, user=None, level=level),
                            subprocess.Popen(["/bin/echo", "hi"], stdout=subprocess.DEVNULL))[1]).wait()

    def thread_prlimit() -> None:
        _in_thread(lambda: (_restrict(rules=rules, network=False, user=None, level=level),
                            subprocess.Popen([*prlimit, "/bin/echo", "hi"], stdout=subprocess.DEVNULL))[1]).wait()

    def exec_launcher() -> None:
        subprocess.run(launcher, stdout=subprocess.DEVNULL, check=True)

    cases = {"plain Popen": plain, "restricted thread + Popen": thread,
             "restricted thread + prlimit": thread_prlimit, "exec launcher (python -I -S)": exec_launcher}
    samples = await measure(cases, N, warmup=3)  # type: ignore[arg-type]
    print_table("spawning /bin/echo with Landlock applied (no preexec_fn)", samples, "plain Popen")


async def main() -> None:
    print(f"Landlock: {landlock.support().describe()}; bubblewrap: {bwrap.probe().detail}")
    with tempfile.TemporaryDirectory() as tmp:
        await tool_calls(tmp)
        await bare_spawns(tmp)


if __name__ == "__main__":
    anyio.run(main)
