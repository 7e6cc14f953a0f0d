"""What `rootbound check` prints: exactly what the agent will be able to do, as a table or as JSON (the command
policy in words included), and the Markdown tool reference (`rootbound tools --markdown`, kept in docs/tools.md)."""

from __future__ import annotations

import json
import os
import shutil
from typing import TYPE_CHECKING, Any

from rootbound.catalogue import FILE_TOOLS
from rootbound.config import Config
from rootbound.errors import ToolError
from rootbound.execution.environment import ALWAYS_SECRET, BASE_PASSTHROUGH
from rootbound.execution.groups import KILL_GRACE
from rootbound.execution.launch import Launcher
from rootbound.execution.policy import policy_for
from rootbound.execution.runner import DRAIN_SECONDS
from rootbound.execution.service import SHELL
from rootbound.execution.workdir import cwd_roots
from rootbound.fs import beneath
from rootbound.preflight import nesting_warnings
from rootbound.sandbox.select import launcher_for
from rootbound.tokens import describe_tokens, reach_warnings
from rootbound.tools.messages import COMMON_ERRORS, TOOL_ERRORS

if TYPE_CHECKING:
    from rootbound.server import App

__all__ = ["describe_commands", "policy", "problems", "render_policy", "tools_markdown"]

_RESOLVERS = {
    "openat2": "openat2 with RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS (kernel-enforced)",
    "walk": "component-by-component O_NOFOLLOW walk (openat2 unavailable)",
}


# Allowed programs that can start any other program from their arguments or configuration.
_RUNNERS = frozenset({
    "sh", "bash", "dash", "zsh", "env", "xargs", "find", "awk", "gawk", "sed", "perl", "python", "python3", "node",
    "npm", "npx", "make", "git", "tar", "vim", "vi", "less", "man", "ssh", "timeout", "nohup", "nice", "setsid",
    "stdbuf", "sudo", "busybox", "watch", "flock", "strace", "gdb", "zip", "sort", "rsync", "docker",
})


def describe_commands(config: Config, launcher: Launcher | None = None) -> tuple[list[str], list[str]]:
    """The effective command policy in words: (lines to print, configuration problems): what may run, where, how;
    and what is not enforced. No problems when commands are off.

    `launcher`: the one that confines the commands (the App's); by default the one the configuration selects
    (`commands.sandbox`). Its own lines and problem end the description.
    """
    c = config.commands
    if not c.allowed:
        return ["commands: off (no program allowed; execute_command and shell are not listed)"], []
    if launcher is None:
        launcher = launcher_for(config)
    policy = policy_for(c)
    problems: list[str] = []
    lines = ["commands: execute_command and shell are listed"]
    if policy.any:
        lines.append("  programs: any (*); the shell tool's scripts are not checked")
    else:
        shown = []
        for name in sorted(policy.names):
            found = shutil.which(name, path=policy.path_env)
            shown.append(f"{name} -> {found}" if found else f"{name} -> NOT FOUND on PATH")
            if not found:  # every call would fail: the operator should hear it now, not the agent later
                problems.append(f"allowed program {name!r} is not on PATH ({policy.path_env}); install it, or "
                                "remove it from commands.allowed / ALLOWED_COMMANDS / --allow-commands")
        shown += [p.path if os.path.exists(p.path) else f"{p.path} (does not exist)" for p in policy.paths]
        problems += [f"allowed program {p.path} does not exist; fix the path in commands.allowed"
                     for p in policy.paths if not os.path.exists(p.path)]
        lines.append(f"  programs: {'; '.join(shown)}")
        lines.append(f"  shell scripts: checked (POSIX sh subset; file redirections refused) and run by {SHELL}")
        risky = sorted(n for n in policy.names | {p.base for p in policy.paths} if n in _RUNNERS)
        if risky:
            lines.append(f"  warning: {', '.join(risky)} can run arbitrary other programs from their arguments or "
                         "configuration; the allowlist cannot stop that")
    lines.append(f"  blocked patterns: {', '.join(repr(p) for p, _ in policy.blocked) or 'none'} "
                 "(a tripwire, not a fence)")
    if c.allowed_cwd_roots:
        try:
            lines.append(f"  working directories: under {', '.join(cwd_roots(c.allowed_cwd_roots))}")
        except ToolError as exc:
            problems.append(exc.message)
            lines.append("  working directories: CONFIGURATION ERROR (every command request is refused)")
    else:
        lines.append("  working directories: any existing directory (ALLOWED_CWD_ROOTS unset); relative ones from "
                     f"the project directory ({config.project_dir or 'the server working directory'})")
    passed = [*BASE_PASSTHROUGH, *c.env_passthrough]
    never = [*ALWAYS_SECRET, *c.secret_env]
    lines.append(f"  environment: PATH={policy.path_env}; passes {', '.join(passed)}; never {', '.join(never)}; "
                 f"loader variables allowed: {', '.join(c.allowed_loader_vars) or 'none'}; "
                 + (f"variables that make a program run another (GIT_SSH_COMMAND, PAGER, NODE_OPTIONS, ...) allowed: "
                    f"{', '.join(c.allowed_exec_vars) or 'none'}" if policy.restricted else
                    "variables that make a program run another: any (every program is allowed anyway)"))
    lines.append(f"  limits: timeout {c.default_timeout} s (max {c.max_timeout} s), then SIGTERM and SIGKILL after "
                 f"{KILL_GRACE:g} s to the whole process group; output {c.max_output_size} bytes per stream (rest in "
                 f"spill files up to {c.max_spill_size} bytes, each client seeing only its own); "
                 f"{c.max_concurrent} at once; open output after exit waits {DRAIN_SECONDS:g} s")
    lines.append(f"  audit: {c.audit_log or 'log only (commands.audit_log not set)'}")
    lines.extend(launcher.describe())
    if launcher.problem is not None:
        problems.append(f"commands are refused: {launcher.problem}")
    return lines, problems


def policy(app: App) -> dict[str, Any]:
    """The resolved policy as plain data (the `--json` form)."""
    cfg = app.config
    commands = cfg.commands
    launcher = app.commands.launcher if app.commands is not None else None
    command_lines, command_problems = describe_commands(cfg, launcher)
    return {
        "configuration": cfg.source,
        "path_resolution": _RESOLVERS[beneath.RESOLVER],
        "roots": [
            {"name": rc.name, "path": app.roots[rc.name].real_path, "all_tools": "*" in rc.allowed_tools,
             "allowed_tools": [t for t in FILE_TOOLS if t in app.roots[rc.name].allowed_tools]}
            for rc in cfg.roots
        ],
        "max_full_read_size": cfg.max_full_read_size,
        "file_timeout": cfg.file_timeout,
        "protected_paths": list(cfg.protected_paths),
        "client_roots": cfg.client_roots,
        "project_dir": cfg.project_dir,
        "commands": {
            "enabled": bool(commands.allowed),
            "allowed": commands.allowed,
            "blocked": commands.blocked,
            "allowed_cwd_roots": commands.allowed_cwd_roots,
            "default_timeout": commands.default_timeout,
            "max_timeout": commands.max_timeout,
            "max_output_size": commands.max_output_size,
            "max_concurrent": commands.max_concurrent,
            "audit_log": commands.audit_log,
            "os_confinement": launcher.name if launcher is not None else None,
            "description": command_lines,
            "problems": command_problems,
        },
        "http": {
            "endpoint": f"http://{cfg.host}:{cfg.port}/mcp",
            "health": f"http://{cfg.host}:{cfg.port}/health",
            "auth": "bearer token" if cfg.tokens else "none",
            "tokens": describe_tokens(cfg),
            "allowed_hosts": ["localhost", *cfg.allowed_hosts],
            "allowed_origins": ["localhost", *cfg.allowed_origins],
            "max_request_body_size": cfg.max_request_body_size,
        },
        "tools": list(app.tools),
        "warnings": [*nesting_warnings(app.roots.values()), *reach_warnings(cfg)],
    }


def problems(data: dict[str, Any]) -> list[str]:
    """Configuration problems found while resolving the policy; `check` exits 1 when there are any."""
    return list(data["commands"]["problems"])


def render_policy(data: dict[str, Any]) -> str:
    """The readable form of `policy()`."""
    out: list[str] = [f"configuration: {data['configuration']}", f"path resolution: {data['path_resolution']}",
                      f"roots ({len(data['roots'])}):"]
    width = max(len(r["name"]) for r in data["roots"])
    for r in data["roots"]:
        tools = "all file tools" if r["all_tools"] else ", ".join(sorted(r["allowed_tools"])) or "none"
        out.append(f"  {r['name']:{width}}  {r['path']}")
        out.append(f"  {'':{width}}  tools: {tools}")
    out.append(f"max_full_read_size: {data['max_full_read_size']} bytes")
    out.append(f"file_timeout: {data['file_timeout']:g} s per file tool call, then it stops (grep and glob: their "
               "own timeout_seconds)")
    out.append(f"protected paths (never modified by file tools): {', '.join(data['protected_paths']) or 'none'}")
    out.append("git repositories (never changed by file tools, whatever protected_paths says): .git and everything "
               "inside it, and folders shaped like a bare repository")
    out.append(f"client roots: {data['client_roots']}; project dir: {data['project_dir'] or 'server working dir'}")
    out.extend(data["commands"]["description"])
    http = data["http"]
    out.append(f"http: {http['endpoint']} (health: {http['health']}), auth: {http['auth']}, hosts: "
               f"{', '.join(http['allowed_hosts'])}")
    for token in http["tokens"]:  # by name: a token's value is never printed
        reached = "all roots" if token["all_roots"] else f"root(s) {', '.join(token['roots'])}"
        out.append(f"  token {token['name']}: reaches {reached}")
    out.append(f"tools exposed: {', '.join(data['tools'])}")
    problems = data["commands"]["problems"]
    out.extend(f"WARNING: {w}" for w in data["warnings"])
    out.extend(f"PROBLEM: {p}" for p in problems)
    out.append("ok" if not problems else "not ok")
    return "\n".join(out)


def _type(schema: dict[str, Any]) -> str:
    if "anyOf" in schema:
        return " or ".join(_type(s) for s in schema["anyOf"] if s.get("type") != "null")
    if "enum" in schema:
        return " or ".join(f"`{json.dumps(v)}`" for v in schema["enum"])
    if schema.get("type") == "array":
        return f"array of {_type(schema.get('items', {}))}"
    return str(schema.get("type", schema.get("$ref", "object").rsplit("/", 1)[-1]))


def tools_markdown(app: App) -> str:
    """docs/tools.md, generated from the server's own tool definitions (so it cannot drift)."""
    lines = [
        "# Tool reference",
        "",
        "_Generated by `rootbound tools --markdown` from the server's own tool definitions; "
        "`tests/test_docs.py` fails when this file is stale. The command tools appear only when "
        "`commands.allowed` is set (this page is generated with every tool enabled)._",
        "",
        "Every file tool takes `root` (a name from `list_roots`; omitted, the project root: `default_root`) and "
        "paths relative to that root (an absolute host path inside a root works too). "
        "Every success carries `structuredContent` (the fields below) and the same JSON as text; every "
        "failure is an `isError` result whose text names the problem, e.g. `file not found: a.txt`, "
        "`path resolves outside root boundary`, `tool write_file not allowed on root docs`, "
        "`unknown root: nope; roots: docs`, `invalid arguments for read_file: path is required`.",
        "",
        "Common errors of the tools that take a root and a path: "
        + "; ".join(f"`{e}`" for e in COMMON_ERRORS) + ". (`…` marks the variable parts.)",
        "",
    ]
    # history and undo are listed to clients only where a root names them; the reference documents them always.
    from rootbound.tools import history

    specs = {**{spec.name: spec for spec in history.TOOLS}, **app.tools}
    unlisted = [spec.definition() for spec in history.TOOLS if spec.name not in app.tools]
    for definition in [*app.definitions, *unlisted]:
        ann = definition.annotations
        hints = []
        if ann is not None:
            hints = [name for name, on in (("read-only", ann.read_only_hint), ("destructive", ann.destructive_hint),
                                           ("idempotent", ann.idempotent_hint)) if on]
        lines += [f"## `{definition.name}` — {definition.title}", "", definition.description or "", ""]
        if hints:
            lines += [f"Hints: {', '.join(hints)}.", ""]
        props = definition.input_schema.get("properties", {})
        required = set(definition.input_schema.get("required", []))
        if props:
            lines += ["| parameter | type | required | default | description |", "|---|---|---|---|---|"]
            for name, schema in props.items():
                default = json.dumps(schema["default"]) if "default" in schema else ""
                desc = (schema.get("description") or "").replace("|", "\\|").replace("\n", " ")
                lines.append(f"| `{name}` | {_type(schema)} | {'yes' if name in required else 'no'} | "
                             f"{default} | {desc} |")
            lines.append("")
        errors = TOOL_ERRORS.get(definition.name, ())
        if errors:
            lines += ["Errors (besides the common ones above): " + "; ".join(f"`{e}`" for e in errors) + ".", ""]
        result = (definition.output_schema or {}).get("properties", {})
        # The lean output schema has no descriptions (it is sent to the model): they come from the result model.
        described = specs[definition.name].result.model_json_schema().get("properties", {})
        if result:
            lines += ["| result field | type | description |", "|---|---|---|"]
            for name, schema in result.items():
                desc = (described.get(name, {}).get("description") or "").replace("|", "\\|").replace("\n", " ")
                lines.append(f"| `{name}` | {_type(schema)} | {desc} |")
            lines.append("")
    return "\n".join(lines).rstrip() + "\n"
