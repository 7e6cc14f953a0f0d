"""What a tool is, and the one place where a call is validated, run, timed, logged and shaped.

A tool module declares `ToolSpec`s: an argument model (its JSON schema is the
tool's `inputSchema`; unknown arguments are refused), a result model (its
`outputSchema`), annotations, and a handler. Handlers stay thin: arguments in,
`Root` calls, a result model out. They raise `Failure`s (data, worded by
`messages.py`) or `ToolError`s for anything the agent should read; `call_tool`
turns either into an `isError` result.
"""

from __future__ import annotations

import contextlib
import inspect
import math
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Annotated, Any, ClassVar, Literal, cast

import anyio
import anyio.to_thread
from mcp.types import Tool, ToolAnnotations
from pydantic import BaseModel, ConfigDict, Field, ValidationError, WithJsonSchema

from rootbound.catalogue import ON_LOOP, RUNS
from rootbound.config import Config
from rootbound.errors import Kind, ToolError
from rootbound.execution import output
from rootbound.execution.service import CommandHost
from rootbound.execution.spill import SpillArea
from rootbound.fs import RootSet, journaling, onloop
from rootbound.fs.bounds import CallBound, bounded
from rootbound.grep.helper import SharedHelper
from rootbound.logs import VALUE_LIMIT, caller_fields, log, log_tool_call, shorten
from rootbound.tools import messages

__all__ = ["Args", "CallContext", "Caller", "PathArgs", "PlainResult", "RelPath", "Reply", "RootName", "ToolOutput",
           "ToolSpec", "Work", "Workers", "call_tool", "iso_time", "loose_list", "read_only", "reply", "writes"]

# Described once, briefly: every byte of a definition is sent to the model on every turn.
RootName = Annotated[str | None, Field(description="Default: the project root.")]
RelPath = str  # relative to the root: list_roots and the server's instructions say it once


_EPOCH = datetime(1970, 1, 1)  # naive UTC: adding a timedelta is cheaper than fromtimestamp(tz=UTC)
_SECONDS: dict[int, str] = {}  # whole second -> "YYYY-MM-DDTHH:MM:SS": files in a tree share mtimes


def iso_time(timestamp: float) -> str:
    """ISO 8601 in UTC, e.g. 2026-11-26T02:11:03.123456Z (exactly what datetime.isoformat gives).

    Runs once per entry of a listing; caching the part before the fraction halves its cost there.
    """
    frac, whole = math.modf(timestamp)
    micros, seconds = round(frac * 1e6), int(whole)
    if micros >= 1_000_000:
        seconds, micros = seconds + 1, micros - 1_000_000
    elif micros < 0:
        seconds, micros = seconds - 1, micros + 1_000_000
    prefix = _SECONDS.get(seconds)
    if prefix is None:
        if len(_SECONDS) >= 4096:
            _SECONDS.clear()
        prefix = _SECONDS[seconds] = (_EPOCH + timedelta(seconds=seconds)).isoformat()
    # zfill, not a format spec: several times cheaper, once per entry of a listing
    return f"{prefix}.{str(micros).zfill(6)}Z" if micros else prefix + "Z"


def loose_list(description: str) -> WithJsonSchema:
    """A light output schema for a result list: an array, its items' fields named in words.

    The MCP Python client validates every structured result against the output schema
    with jsonschema, at about 30 µs per fully described item and still 5 µs per item
    described only as an object: on a 10,000-entry listing that cost more than the listing.
    """
    return WithJsonSchema({"type": "array", "description": description})


class Args(BaseModel):
    """Base for argument models: unknown keys are an error, not silently dropped."""

    model_config = ConfigDict(extra="forbid")
    # The (root, path) pairs of the arguments, placed before the handler runs (`_placed`); a later pair whose root
    # is omitted defaults to the root of the first.
    PLACES: ClassVar[tuple[tuple[str, str], ...]] = (("root", "path"),)


class PathArgs(Args):
    """The arguments of a tool that takes one path in a root."""

    root: RootName = None
    path: RelPath


Progress = Callable[[float, float | None, str | None], Awaitable[None]]

# Where a sync call runs (`catalogue.Runs` says which tool runs how): inline on the event loop, or in a quick or
# a heavy worker thread.
Work = Literal["inline", "quick", "heavy"]

BIG_RESULT = 1 << 20  # characters of text: a result this big leaves the heap grown (`output.trim_heap`)
QUICK_THREADS = 32
HEAVY_THREADS = 8
CLIENT_QUICK_THREADS = 16  # one client's share of each kind, so no client can hold all the threads
CLIENT_HEAVY_THREADS = 4


@dataclass
class Workers:
    """The server's worker threads, limited per kind of work: however many heavy calls wait, the quick
    calls have threads of their own (anyio's shared pool of 40 used to fill up with hashing)."""

    quick: anyio.CapacityLimiter = field(default_factory=lambda: anyio.CapacityLimiter(QUICK_THREADS))
    heavy: anyio.CapacityLimiter = field(default_factory=lambda: anyio.CapacityLimiter(HEAVY_THREADS))
    # The threads themselves: the two limiters above (and the clients' shares) do the limiting.
    threads: anyio.CapacityLimiter = field(default_factory=lambda: anyio.CapacityLimiter(math.inf))


class Caller:
    """What one client has to itself: its spill files, and its share of the worker threads.

    A client is a stdio connection, an HTTP session, or (for sessionless requests) an auth principal;
    `connection` names it in the log (and the journal).
    """

    def __init__(self, spill: SpillArea | None, connection: str = "") -> None:
        self.spill = spill
        self.connection = connection
        self.quick = anyio.CapacityLimiter(CLIENT_QUICK_THREADS)
        self.heavy = anyio.CapacityLimiter(CLIENT_HEAVY_THREADS)

    def close(self) -> None:
        if self.spill is not None:
            self.spill.close()


@dataclass(frozen=True)
class CallContext:
    """What a handler may use: the roots in force for this caller, and the configuration."""

    roots: RootSet
    config: Config
    # Base for relative command working directories: the first client root, else `project_dir` from the config,
    # else (None) the server's working directory, looked up by the command that needs it, not by every call.
    project_dir: str | None
    caller: Caller
    workers: Workers
    # Sends `notifications/progress` for this call; a no-op unless the client asked for progress.
    report_progress: Progress | None = None
    grep_helper: SharedHelper | None = None  # the server's grep helper process (None: search in this process)
    commands: CommandHost | None = None  # the server's launcher, queue and process groups (None: commands off)
    journal: journaling.Recorder | None = None  # records every change the file tools make (None: journal off)


@dataclass(frozen=True)
class ToolOutput:
    """A handler's result when the text block is not simply the JSON of the structured content."""

    structured: BaseModel
    text: str
    is_error: bool = False


class PlainResult(BaseModel):
    """A result its handler builds with `model_construct` from values that are JSON already (str, int, bool, and
    lists and dicts of them): `_shape` takes its fields as the structuredContent as they are. Copying them through
    model_dump cost a 10,000-entry listing ~10 ms for nothing."""


Handler = Callable[[CallContext, Any], BaseModel | ToolOutput | Awaitable[BaseModel | ToolOutput]]
# The text block of a result, from the call's arguments and the structured result as the client gets it
# (`render.py`); without one the text is the JSON of the structured result.
Text = Callable[[Any, dict[str, Any]], str]


@dataclass(frozen=True)
class ToolSpec:
    name: str
    title: str
    description: str
    args: type[Args]
    result: type[BaseModel]
    annotations: ToolAnnotations
    handler: Handler
    # For a tool the catalogue says runs `by_arguments`: which kind of work these arguments make.
    work: Callable[[Any], Work] | None = None
    # False: the tool bounds its own running time (grep and glob: timeout_seconds, with partial results)
    # instead of failing at the server's file_timeout.
    file_timeout: bool = True
    text: Text | None = None
    is_async: bool = field(init=False)  # whether `handler` is a coroutine function: asked once, not on every call

    def __post_init__(self) -> None:
        object.__setattr__(self, "is_async", inspect.iscoroutinefunction(self.handler))

    def definition(self) -> Tool:
        return Tool(
            name=self.name,
            title=self.title,
            description=self.description,
            input_schema=_schema(self.args),
            output_schema=_schema(self.result, output=True),
            annotations=self.annotations,
        )


# The annotations carry no second title (the tool's own is there), and a read-only tool neither destructiveHint nor
# idempotentHint (MCP: they mean something only when readOnlyHint is false).
def read_only(title: str) -> ToolAnnotations:
    return ToolAnnotations(read_only_hint=True, open_world_hint=False)


def writes(title: str, *, destructive: bool, idempotent: bool) -> ToolAnnotations:
    return ToolAnnotations(read_only_hint=False, destructive_hint=destructive, idempotent_hint=idempotent,
                           open_world_hint=False)


def _schema(model: type[BaseModel], *, output: bool = False) -> dict[str, Any]:
    """The model's JSON Schema, lean: every byte of a definition is sent to the model on every turn."""
    schema = model.model_json_schema()
    defs = schema.pop("$defs", {})
    for part in (schema, *defs.values()):
        part.pop("description", None)  # a class's docstring, written for programmers
    # A result is sent without its None fields (`_shape`), so an optional field is never null, unless the model
    # serializes itself (execute_command keeps exit_code and signal as null).
    nullable = output and bool(model.__pydantic_decorators__.model_serializers)
    lean = _lean(schema, defs, "nullable" if nullable else output)
    assert isinstance(lean, dict)
    if output:  # an object inside a result is declared by its type alone (docs/tools.md describes it)
        props = lean.get("properties", {})
        for name, prop in props.items():
            if "properties" in prop:
                props[name] = {"type": prop["type"]}
    return lean


def _lean(node: Any, defs: dict[str, Any], output: bool | Literal["nullable"]) -> Any:
    """`node` without what pydantic generates for its own sake: titles (the field names again), `$defs` (put
    inline), null defaults. An optional field is spelled as its type alone (an input still accepts null); a
    "nullable" output keeps null in its type list, in fewer bytes than `anyOf`. Output schemas are for programs:
    they keep names, types and what is required, not descriptions or defaults (docs/tools.md has the
    descriptions)."""
    if isinstance(node, list):
        return [_lean(n, defs, output) for n in node]
    if not isinstance(node, dict):
        return node
    ref = node.get("$ref")
    if isinstance(ref, str):
        node = {**defs[ref.rsplit("/", 1)[1]], **{k: v for k, v in node.items() if k != "$ref"}}
    options = node.get("anyOf")
    if isinstance(options, list) and len(options) == 2 and {"type": "null"} in options:
        other = _lean(next(o for o in options if o != {"type": "null"}), defs, output)
        if output != "nullable":
            node = {**other, **{k: v for k, v in node.items() if k != "anyOf"}}
        elif isinstance(other.get("type"), str):
            node = {**other, **{k: v for k, v in node.items() if k != "anyOf"}, "type": [other["type"], "null"]}
    if output and node.get("type") == "array":
        # A result list's items are not described: a client validating 10,000 entries one by one spends a second.
        return {"type": "array"}
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key == "title" and isinstance(value, str):
            continue
        if (key == "default" and (value is None or output)) or (key == "description" and output):
            continue
        out[key] = {k: _lean(v, defs, output) for k, v in value.items()} if key == "properties" \
            else _lean(value, defs, output)
    return out


def _describe_validation(tool: str, model: type[Args], exc: ValidationError) -> str:
    problems = []
    for err in exc.errors():
        field = ".".join(str(p) for p in err["loc"]) or "arguments"
        match err["type"]:
            case "missing":
                problems.append(f"{field} is required")
            case "extra_forbidden":
                problems.append(messages.unknown_parameter(field, list(model.model_fields) if len(err["loc"]) == 1
                                                           else []))
            case _:
                problems.append(f"{field}: {err['msg'].removeprefix('Value error, ')}")
    return messages.text(Kind.INVALID_ARGUMENTS, tool=tool, problems="; ".join(problems))


# A tools/call result in its wire form, as the client receives it (`content`, `structuredContent`, `isError`, and
# the SDK's `resultType`). Built as a dict from the start: a `CallToolResult` model made per call and dumped
# straight back for the wire cost more than the rest of a `stat_file`'s own work.
Reply = dict[str, Any]


def reply(text: str, structured: dict[str, Any] | None = None, *, is_error: bool = False) -> Reply:
    """The wire form of a result: one text block for the model, and the structured content for programs."""
    wire: Reply = {"content": [{"type": "text", "text": text}], "isError": is_error, "resultType": "complete"}
    if structured is not None:
        wire["structuredContent"] = structured
    return wire


def _error(message: str) -> Reply:
    return reply(message, is_error=True)


ERROR_LIMIT = 2000  # characters of an error text; an argument it quotes is cut long before that


def shortened(message: str, arguments: Any) -> str:
    """`message` with each long argument it quotes (a value or a key) shortened, and at most ERROR_LIMIT long:
    a 10 MB path must not come back as a 10 MB error."""
    for value in sorted(_long_strings(arguments), key=len, reverse=True):
        if value in message:  # quoted or bare: `shorten` adds its own quotes
            message = message.replace(f"'{value}'", value).replace(value, shorten(value))
    if len(message) > ERROR_LIMIT:  # the argument was quoted in another form (escaped, normalised)
        message = f"{message[:ERROR_LIMIT]}… ({len(message)} characters)"
    return message


def _long_strings(value: Any, depth: int = 0) -> list[str]:
    if isinstance(value, str):
        return [value] if len(value) > VALUE_LIMIT else []
    if depth > 3:
        return []
    if isinstance(value, dict):
        return [s for k, v in list(value.items())[:100] for s in (*_long_strings(k), *_long_strings(v, depth + 1))]
    if isinstance(value, list):
        return [s for v in value[:100] for s in _long_strings(v, depth + 1)]
    return []


def _where(args: dict[str, Any]) -> tuple[str | None, str | None]:
    root = args.get("root", args.get("source_root"))
    path = args.get("path", args.get("source_path"))
    return (root if isinstance(root, str) else None, path if isinstance(path, str) else None)


async def call_tool(spec: ToolSpec, ctx: CallContext, arguments: dict[str, Any] | None) -> Reply:
    """Validate, run and log one call. Never raises: every failure becomes an `isError` result."""
    # The previous big result has been answered and let go by now: its leftover pages go back to the system.
    output.trim_heap()
    start = time.perf_counter()
    arguments = arguments or {}
    root, path = _where(arguments)
    outcome, error = "ok", None
    # Every change the call makes is journaled, for this tool and this caller (fs/journaling.py).
    with journaling.attributed(ctx.journal, spec.name, ctx.caller.connection or None, caller_fields().get("client")):
        try:
            args = _placed(spec.args.model_validate(arguments), ctx.roots, spec.name)
            work = _work(spec, args)
            if spec.is_async:
                result = _shape(spec, args, await cast(Awaitable[BaseModel | ToolOutput], spec.handler(ctx, args)))
            elif work == "inline":
                result = _run_sync(spec, ctx, args)
            elif work == "quick" and spec.name in ON_LOOP:
                result = await _on_loop_first(spec, ctx, args, path)
            else:
                result = await _in_worker(spec, ctx, args, work, path)
            if result["isError"]:
                outcome = "error"
        except anyio.get_cancelled_exc_class():
            # The client cancelled, disconnected, or the server is stopping: no reply, but still the log line.
            log_tool_call(spec.name, root, path, "cancelled", (time.perf_counter() - start) * 1000, 0)
            raise
        except ValidationError as exc:
            outcome, error = "error", shortened(_describe_validation(spec.name, spec.args, exc), arguments)
            result = _error(error)
        except ToolError as exc:
            outcome, error = exc.outcome, shortened(exc.message, arguments)
            result = _error(error)
        except Exception:
            log.exception("tool %s failed", spec.name, extra={"tool": spec.name, "root": root, "path": path})
            outcome, error = "crash", "internal error"
            result = _error(messages.text(Kind.INTERNAL, tool=spec.name))
    size = len(result["content"][0]["text"])
    if size > BIG_RESULT:
        output.heap_grew()
    log_tool_call(spec.name, root, path, outcome, (time.perf_counter() - start) * 1000, size, error)
    return result


def _placed(args: Args, roots: RootSet, tool: str) -> Args:
    """`args` with each omitted root filled in and each absolute host path inside a root made relative to it
    (`RootSet.place`): handlers see a root name and a root-relative path, as before. The model is this call's own,
    just validated: its fields are set in place (no copy, and no validation: `place` returns a root's name and a
    path it was given or a part of one)."""
    first: str | None = None
    fields = type(args).model_fields
    for root_field, path_field in args.PLACES:
        if root_field not in fields or path_field not in fields:
            continue
        name, path = getattr(args, root_field), getattr(args, path_field)
        placed, rel = roots.place(name, path, tool, default=first)
        first = first if first is not None else placed
        if placed != name:
            args.__dict__[root_field] = placed
        if rel != path:
            args.__dict__[path_field] = rel
    return args


def _work(spec: ToolSpec, args: Args) -> Work:
    runs = RUNS[spec.name]
    if runs == "by_arguments":
        assert spec.work is not None, f"{spec.name} runs by its arguments but has no work chooser"
        return spec.work(args)
    return "quick" if runs == "async" else runs


async def _on_loop_first(spec: ToolSpec, ctx: CallContext, args: Args, where: str | None) -> Reply:
    """A read-only quick call, on the event loop when the core can vouch that it stays quick there (fs/onloop.py):
    no hop to a thread and back, which costs more than the call. Else in a worker, as any quick call; nothing was
    changed meanwhile, and nothing read is kept."""
    try:
        with onloop.on_loop():
            return _run_sync(spec, ctx, args)
    except onloop.Offload:
        return await _in_worker(spec, ctx, args, "quick", where)


async def _in_worker(spec: ToolSpec, ctx: CallContext, args: Args, work: Work, where: str | None) -> Reply:
    """Run a sync handler in a worker thread of its kind, within the call's time bound.

    Filesystem work blocks, and serialising a big result takes a while too: both run in the thread
    so that other requests keep flowing meanwhile. The thread is never abandoned: a cancelled or
    timed-out call stops at its next checkpoint (see `bounds`), and only then frees its worker.
    """
    seconds = ctx.config.file_timeout
    bound = CallBound(spec.name, where, seconds if spec.file_timeout else None)
    kinds = (ctx.caller.heavy, ctx.workers.heavy) if work == "heavy" else (ctx.caller.quick, ctx.workers.quick)
    async with _slot(kinds, CallBound(spec.name, where, seconds)):
        return await anyio.to_thread.run_sync(_run_bounded, spec, ctx, args, bound,
                                              limiter=ctx.workers.threads)


@contextlib.asynccontextmanager
async def _slot(limiters: tuple[anyio.CapacityLimiter, ...], bound: CallBound) -> AsyncIterator[None]:
    """Hold a token of each limiter (the client's share, then the server's pool); waiting counts against
    the call's time bound."""
    held: list[anyio.CapacityLimiter] = []
    try:
        # Free tokens are taken at once (nobody waiting: first come, first served still holds); the cancel
        # scope of a timed wait cost more than the rest of a quick call's way to its thread.
        for limiter in limiters:
            try:
                limiter.acquire_nowait()
            except anyio.WouldBlock:
                break
            held.append(limiter)
        if len(held) < len(limiters):
            with anyio.move_on_after(bound.remaining()) as waited:
                for limiter in limiters[len(held):]:
                    await limiter.acquire()
                    held.append(limiter)
            if waited.cancelled_caught:
                raise bound.stopped(Kind.BUSY)
        yield
    finally:
        for limiter in reversed(held):
            limiter.release()


def _run_bounded(spec: ToolSpec, ctx: CallContext, args: Args, bound: CallBound) -> Reply:
    with bounded(bound):
        return _run_sync(spec, ctx, args)


def _run_sync(spec: ToolSpec, ctx: CallContext, args: Args) -> Reply:
    output = spec.handler(ctx, args)
    assert isinstance(output, (BaseModel, ToolOutput)), "a sync handler returned an awaitable"
    return _shape(spec, args, output)


def _shape(spec: ToolSpec, args: Args, output: BaseModel | ToolOutput) -> Reply:
    """The result the client gets: structuredContent for programs, and a text block for the model (the tool's
    own text, its `text` rendering, else the JSON of the structured content)."""
    if isinstance(output, ToolOutput):
        return reply(output.text, output.structured.model_dump(mode="json", exclude_none=True),
                     is_error=output.is_error)
    data = {k: v for k, v in output if v is not None} if isinstance(output, PlainResult) \
        else output.model_dump(mode="json", exclude_none=True)
    # pydantic's serializer is ~3x faster than json.dumps
    return reply(spec.text(args, data) if spec.text is not None else output.model_dump_json(exclude_none=True), data)

