"""The command tools: execute_command (one program, no shell; seeds 000/001) and shell (`/bin/sh -c`; seed 002).

Both are thin: arguments in, `execution.service.execute` (policy, working
directory, environment, queue, run, audit), a result shaped the seeds' way out.
"""

from __future__ import annotations

import os
from typing import Annotated, Any

from mcp.types import ToolAnnotations
from pydantic import BaseModel, Field, model_serializer, model_validator

from rootbound.execution.runner import RunResult
from rootbound.execution.service import CommandRequest, Outcome, execute
from rootbound.execution.yamltext import dump
from rootbound.tools.base import Args, CallContext, ToolOutput, ToolSpec

__all__ = ["TOOLS"]

_ANNOTATIONS = dict(read_only_hint=False, destructive_hint=True, idempotent_hint=False, open_world_hint=True)

Env = Annotated[dict[str, str] | None, Field(
    description="Variables to add to the command's environment, e.g. {\"RUST_LOG\": \"debug\"}. The server's own "
                "secrets are never passed; loader variables (LD_PRELOAD, ...) are refused and, when programs are "
                "restricted, so are PATH and variables that make a program run another (GIT_SSH_COMMAND, PAGER, "
                "NODE_OPTIONS, PYTHONPATH, ...) unless the server allows them.")]
Timeout = Annotated[int | None, Field(ge=1, le=1800, description="Seconds before the command and everything it "
                                      "started are stopped (default 300, the server's default_timeout; capped by "
                                      "its max_timeout).")]
RootOption = Annotated[str | None, Field(description="Optional: name of a root (see list_roots); the working "
                                         "directory is then a path relative to it and cannot leave it.")]


class OutputFile(BaseModel):
    stream: str
    root: str
    path: str
    size: int
    complete: bool = Field(description="False when the spill itself hit the server's max_spill_size.")


def _files(result: RunResult) -> list[OutputFile] | None:
    files = [OutputFile(stream=name, root=s.spill.root, path=s.spill.path, size=s.spill.size,
                        complete=s.spill.complete)
             for name, s in (("stdout", result.stdout), ("stderr", result.stderr)) if s.spill is not None]
    return files or None


def _note(result: RunResult, removed: list[str]) -> str | None:
    notes = []
    if result.held_open:
        notes.append("the command exited but a process it started kept its output open; that process was stopped "
                     "(background jobs do not outlive the call)")
    if removed:
        notes.append("the sandbox removed what the command created at protected paths, which commands may not "
                     f"create (git's configuration and repositories at the top of a root, .bashrc, ...): "
                     f"{', '.join(removed)}")
    return "; ".join(notes) or None


def _one_of(args: Args, name: str, alias: str) -> Any:
    """The value given under either spelling of one parameter; both at once is an error naming both."""
    a, b = getattr(args, name), getattr(args, alias)
    if a is not None and b is not None:
        raise ValueError(f"{name} and {alias} are two spellings of one parameter: give only one of them")
    return a if a is not None else b


_SAME_AS = "Another spelling of {}; give one or the other."


def _sandbox_note() -> Any:
    return Field(default=None, description=(
        "Set when the command failed probably because the sandbox denied it: what it tried, and the server "
        "setting that would allow it."))


def _removed() -> Any:
    return Field(default=None, description=(
        "Protected paths (root:path) the command created, which the sandbox removed once it ended."))


# -- execute_command ------------------------------------------------------------------------------


class ExecuteCommandArgs(Args):
    command: Annotated[str, Field(min_length=1, max_length=100_000, description=(
        'One program and its arguments, e.g. "git status --short" or "ls -la src". Quotes work as in a shell; '
        "nothing else does (no pipes, redirections, &&, ;, $(...), variables or globs)."))]
    cwd: Annotated[str | None, Field(description=(
        "Working directory: absolute, or relative to the project directory (the server's working directory by "
        "default). Use this instead of cd."))] = None
    root: RootOption = None
    timeout: Timeout = None
    env: Env = None
    working_directory: Annotated[str | None, Field(description=_SAME_AS.format("cwd"))] = None
    environment: Annotated[dict[str, str] | None, Field(description=_SAME_AS.format("env"))] = None

    @model_validator(mode="after")
    def _spellings(self) -> ExecuteCommandArgs:
        self.cwd, self.env = _one_of(self, "cwd", "working_directory"), _one_of(self, "env", "environment")
        return self


class ExecuteCommandResult(BaseModel):
    exit_code: int | None = Field(description="The program's exit status; null when a signal ended it.")
    stdout: str
    stderr: str
    duration_ms: int
    execution_time_ms: int = Field(description="Same as duration_ms (the shell tool's name for it).")
    timed_out: bool
    truncated: bool = Field(description="True when stdout or stderr was cut (to the inline limit, or the server's "
                              "max_output_size); output_files says where the whole output is.")
    signal: str | None = Field(default=None, description='Name of the signal that ended the program, e.g. "SIGKILL".')
    working_directory: str
    stdout_bytes: int
    stderr_bytes: int
    output_files: list[OutputFile] | None = Field(default=None, description=(
        "Where the full output of a cut stream is kept: read it with read_file on that root and path."))
    removed: list[str] | None = _removed()
    note: str | None = None
    sandbox_note: str | None = _sandbox_note()

    @model_serializer(mode="wrap")
    def _keep_nulls(self, handler: Any) -> dict[str, Any]:
        # exit_code and signal are part of the answer even when null.
        data: dict[str, Any] = handler(self)
        data.setdefault("exit_code", self.exit_code)
        data.setdefault("signal", self.signal)
        return data


_YAML_INDENT = 2  # each line of stdout/stderr in the YAML text block is indented by two


async def execute_command(ctx: CallContext, args: ExecuteCommandArgs) -> ToolOutput:
    outcome = await _run(ctx, CommandRequest("execute_command", args.command, False, args.cwd, args.root,
                                             args.timeout, args.env, line_cost=_YAML_INDENT))
    r = outcome.result
    result = ExecuteCommandResult(
        exit_code=r.exit_code, stdout=r.stdout.text, stderr=r.stderr.text, duration_ms=round(r.duration_ms),
        execution_time_ms=round(r.duration_ms),
        timed_out=r.timed_out, truncated=r.truncated, signal=r.signal, working_directory=outcome.working_directory,
        stdout_bytes=r.stdout.total_bytes, stderr_bytes=r.stderr.total_bytes, output_files=_files(r),
        removed=outcome.removed or None, note=_note(r, outcome.removed), sandbox_note=outcome.sandbox_note)
    items: list[tuple[str, Any]] = [("exit_code", r.exit_code), ("stdout", r.stdout.text), ("stderr", r.stderr.text)]
    if r.timed_out:
        items += [("timed_out", True), ("timeout_seconds", outcome.timeout)]
    if r.signal:
        items.append(("signal", r.signal))
    if result.note:
        items.append(("note", result.note))
    if result.sandbox_note:
        items.append(("sandbox_note", result.sandbox_note))
    return ToolOutput(result, dump(items), is_error=r.timed_out)


async def _run(ctx: CallContext, request: CommandRequest) -> Outcome:
    assert ctx.commands is not None  # the App builds it whenever these tools are listed
    return await execute(request, config=ctx.config, roots=ctx.roots, project_dir=ctx.project_dir or os.getcwd(),
                         host=ctx.commands, progress=ctx.report_progress, spill=ctx.caller.spill)


# -- shell ----------------------------------------------------------------------------------------


class ShellArgs(Args):
    command: Annotated[str, Field(min_length=1, max_length=100_000, description=(
        "The shell command to execute with /bin/sh -c, e.g. \"find . -name '*.py' | wc -l\" or "
        '"make build && make test".'))]
    working_directory: Annotated[str | None, Field(description=(
        "Working directory for command execution: absolute, or relative to the project directory (the server's "
        "working directory by default)."))] = None
    timeout: Timeout = None
    environment: Env = None
    root: RootOption = None
    cwd: Annotated[str | None, Field(description=_SAME_AS.format("working_directory"))] = None
    env: Annotated[dict[str, str] | None, Field(description=_SAME_AS.format("environment"))] = None

    @model_validator(mode="after")
    def _spellings(self) -> ShellArgs:
        self.working_directory = _one_of(self, "working_directory", "cwd")
        self.environment = _one_of(self, "environment", "env")
        return self


class ShellResult(BaseModel):
    command: str
    exit_code: int | None = None
    stdout: str | None = None
    stderr: str | None = None
    execution_time_ms: int
    duration_ms: int = Field(description="Same as execution_time_ms (execute_command's name for it).")
    working_directory: str
    timeout_seconds: int | None = Field(default=None, description="Set when the command timed out.")
    partial_stdout: str | None = Field(default=None, description="Output captured before the timeout.")
    partial_stderr: str | None = None
    signal: str | None = Field(default=None, description='Name of the signal that ended the command, e.g. "SIGKILL".')
    truncated: bool
    stdout_bytes: int
    stderr_bytes: int
    output_files: list[OutputFile] | None = Field(default=None, description=(
        "Where the full output of a cut stream is kept: read it with read_file on that root and path."))
    removed: list[str] | None = _removed()
    note: str | None = None
    sandbox_note: str | None = _sandbox_note()


def _summary(r: RunResult, timeout: int) -> str:
    if r.timed_out:
        return f"Command timed out after {timeout} seconds"
    if r.signal:
        return f"Command terminated by signal {r.signal}"
    if r.exit_code == 0:
        return "Command executed successfully"
    hint = " (127: command not found)" if r.exit_code == 127 else ""
    return f"Command failed with exit code {r.exit_code}{hint}"


async def shell(ctx: CallContext, args: ShellArgs) -> ToolOutput:
    outcome = await _run(ctx, CommandRequest("shell", args.command, True, args.working_directory, args.root,
                                             args.timeout, args.environment))
    r = outcome.result
    out, err = r.stdout.text, r.stderr.text
    common: dict[str, Any] = dict(
        command=args.command, execution_time_ms=round(r.duration_ms), duration_ms=round(r.duration_ms),
        working_directory=outcome.working_directory,
        signal=r.signal, truncated=r.truncated, stdout_bytes=r.stdout.total_bytes, stderr_bytes=r.stderr.total_bytes,
        output_files=_files(r), removed=outcome.removed or None, note=_note(r, outcome.removed),
        sandbox_note=outcome.sandbox_note)
    if r.timed_out:
        result = ShellResult(timeout_seconds=outcome.timeout, partial_stdout=out, partial_stderr=err, **common)
    else:
        result = ShellResult(exit_code=r.exit_code, stdout=out, stderr=err, **common)
    sections = [_summary(r, outcome.timeout)]
    if out:
        sections.append(f"--- stdout ---\n{out.removesuffix(chr(10))}")
    if err:
        sections.append(f"--- stderr ---\n{err.removesuffix(chr(10))}")
    if result.note:
        sections.append(f"Note: {result.note}")
    if result.sandbox_note:
        sections.append(f"Sandbox: {result.sandbox_note}")
    return ToolOutput(result, "\n".join(sections), is_error=r.timed_out or r.exit_code != 0)


TOOLS: list[ToolSpec] = [
    ToolSpec(
        name="execute_command",
        title="Execute command",
        description=(
            "Run ONE program directly, without a shell, and return its exit_code, stdout and stderr (as YAML). "
            "This tool is ONLY for non-interactive commands: interactive commands are not supported (stdin is empty "
            "and there is no terminal, so a program waiting for input gets end-of-file). Quotes work as in a shell, "
            "but pipes, redirections, &&, ;, $(...), variables and globs do not: use the shell tool for those, and "
            "the cwd parameter instead of cd. Only programs the server allows may run; a refusal lists them. "
            "Long output is cut (head and tail kept) and the whole output saved for read_file."),
        args=ExecuteCommandArgs,
        result=ExecuteCommandResult,
        annotations=ToolAnnotations(title="Execute command", **_ANNOTATIONS),
        handler=execute_command,
    ),
    ToolSpec(
        name="shell",
        title="Shell",
        description=(
            "Run a shell command line with /bin/sh -c (POSIX sh): pipes, &&, ||, ;, $(...) work. Non-interactive "
            "only (stdin is empty, no terminal). Returns a summary line and the output; metadata has exit_code, "
            "stdout, stderr, execution_time_ms and working_directory (on timeout: timeout_seconds, partial_stdout, "
            "partial_stderr). A non-zero exit is an error result. When the server restricts programs, every "
            "command in the line must be allowed and the line must be plain POSIX sh: no eval/exec/source, "
            "functions, variables as command names, bash-only syntax, or redirections to files (> /dev/null and "
            "2>&1 are fine). Long output is cut (head and tail kept) and the whole output saved for read_file."),
        args=ShellArgs,
        result=ShellResult,
        annotations=ToolAnnotations(title="Shell", **_ANNOTATIONS),
        handler=shell,
    ),
]
