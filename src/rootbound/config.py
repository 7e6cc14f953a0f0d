"""YAML file + environment + command-line flags -> one validated `Config`.

Every mistake an operator can make is a `ConfigError` whose message names the
offending key and value, raised before anything listens.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any, Literal, TextIO, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from rootbound import config_errors, hosts
from rootbound.catalogue import FILE_TOOLS, JOURNAL_TOOLS

__all__ = ["UNNAMED_TOKEN", "CommandLimits", "CommandsConfig", "Config", "ConfigError", "JournalConfig", "RootConfig",
           "TokenConfig", "load_config"]

DEFAULT_ROOT_NAME = "workspace"
UNNAMED_TOKEN = "auth_token"  # the name logged for the token of `auth_token` / ROOTBOUND_AUTH_TOKEN
_C = TypeVar("_C", bound=BaseModel)
_T = TypeVar("_T")


class ConfigError(Exception):
    """The configuration cannot be served; the message says what to fix."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class RootConfig(_Strict):
    name: Annotated[str, Field(min_length=1, pattern=r"^[A-Za-z0-9_.-]+$",
                               description="Unique name the agent uses to pick this root.")]
    path: Annotated[str, Field(min_length=1, description="Host directory; must exist.")]
    allowed_tools: list[str] = Field(default_factory=lambda: ["*"],
                                     description='File tools allowed here; "*" means all. history and undo '
                                     "(the change journal's, for the agent's own changes) only when named.")

    @field_validator("allowed_tools")
    @classmethod
    def _known_tools(cls, tools: list[str]) -> list[str]:
        unknown = [t for t in tools if t != "*" and t not in FILE_TOOLS and t not in JOURNAL_TOOLS]
        if unknown:
            raise ValueError(f"unknown tool {unknown[0]!r}; valid tools: *, {', '.join(FILE_TOOLS + JOURNAL_TOOLS)}")
        return tools


class TokenConfig(_Strict):
    """One bearer token of the HTTP server, and whose it is."""

    name: Annotated[str, Field(min_length=1, pattern=r"^[A-Za-z0-9_.-]+$", description=(
        "Who holds the token; logged with each of its calls (the token itself never is)."))]
    # repr=False: a Config printed in a traceback or a debugger must not show it.
    token: Annotated[str, Field(min_length=1, repr=False, description="The bearer token (at least 128 random bits).")]
    roots: list[str] | None = Field(default=None, description="Names of the operator roots this token reaches (the "
                                    "others do not exist for its calls, commands included); null: every root.")


class CommandLimits(_Strict):
    """Resource limits of every sandboxed command (null: leave the server's own limit)."""

    cpu_seconds: Annotated[int | None, Field(ge=1, description="CPU time per process.")] = 3600
    address_space: Annotated[int | None, Field(ge=1 << 20, description="Virtual memory per process, bytes.")] = \
        16 << 30
    processes: Annotated[int | None, Field(ge=1, description="Processes of the command's user (not enforced "
                                                             "for uid 0: use run_as).")] = 4096
    file_size: Annotated[int | None, Field(ge=1, description="Largest file a command may write, bytes.")] = 16 << 30
    open_files: Annotated[int | None, Field(ge=16, description="Open file descriptors per process.")] = 4096


class CommandsConfig(_Strict):
    allowed: list[str] | Literal["*"] = Field(
        default_factory=list, description='Programs the command tools may run, or "*" for any.')
    blocked: list[str] = Field(default_factory=list, description="Patterns refused even when allowed.")
    allowed_cwd_roots: list[str] = Field(default_factory=list,
                                         description="Directories a command's working directory must be under; "
                                                     "with a sandbox, those outside the roots are work areas "
                                                     "commands may read and write.")
    default_timeout: Annotated[int, Field(ge=1)] = 300
    max_timeout: Annotated[int, Field(ge=1)] = 1800
    max_output_size: Annotated[int, Field(ge=1024)] = 10 * 1024 * 1024
    inline_output_limit: Annotated[int, Field(ge=2000, description=(
        "Characters of output one command result shows, stdout and stderr together (head and tail, cut at line "
        "boundaries); the rest is in the spill file. max_output_size still bounds what is kept in memory."))] = 30_000
    audit_log: str | None = None
    max_concurrent: Annotated[int, Field(ge=1, description="Commands running at once; more wait in a queue.")] = 8
    max_spill_size: Annotated[int, Field(ge=0, description="Bytes of a cut stream kept in its spill file "
                                                           "(0: no spill files).")] = 256 * 1024 * 1024
    env_passthrough: list[str] = Field(default_factory=list, description="Server environment variables (names or "
                                       "globs) passed to commands besides PATH, HOME, USER, LANG, LC_*, TZ, TMPDIR.")
    secret_env: list[str] = Field(default_factory=list, description="Server environment variables (names or globs) "
                                  "never passed to commands; ROOTBOUND_AUTH_TOKEN always is one.")
    allowed_loader_vars: list[str] = Field(default_factory=list, description="Loader variables (LD_*, DYLD_*) the "
                                           "agent may set through env/environment; all others are refused.")
    allowed_exec_vars: list[str] = Field(default_factory=list, description="Variables (names or globs) that make "
                                         "a program run another or load code (GIT_SSH_COMMAND, PAGER, NODE_OPTIONS, "
                                         "PYTHONPATH, ...) the agent may set while the allowlist is restricted.")
    sandbox: Literal["auto", "landlock", "bwrap", "off"] = Field(
        default="auto", description="OS confinement of commands: auto (bubblewrap if it works, else Landlock), "
        "landlock, bwrap, or off (no confinement: the allowlist is the only fence).")
    network: bool = Field(default=False, description="Let sandboxed commands use the network (any socket). Off: "
                          "Landlock denies TCP, seccomp refuses every other socket, bubblewrap adds an empty network "
                          "namespace.")
    run_as: str | None = Field(default=None, description="User (name or uid) that commands run as when the server "
                               "runs as root.")
    read_paths: list[str] = Field(default_factory=list, description="Host paths sandboxed commands may read and "
                                  "execute besides the system directories and the roots.")
    write_paths: list[str] = Field(default_factory=list, description="Host paths sandboxed commands may write "
                                   "besides the writable roots and their private temp directory.")
    limits: CommandLimits = Field(default_factory=CommandLimits)

    @field_validator("sandbox", mode="before")
    @classmethod
    def _yaml_off(cls, value: object) -> object:
        # YAML 1.1 reads a bare `off` as false.
        return "off" if value is False else value

    @field_validator("allowed")
    @classmethod
    def _programs(cls, allowed: list[str] | Literal["*"]) -> list[str] | Literal["*"]:
        # A relative path would name a different file in every working directory.
        for entry in allowed if isinstance(allowed, list) else []:
            if not entry.strip() or ("/" in entry and not entry.startswith("/")):
                raise ValueError(f"{entry!r} must be a program name (e.g. git) or an absolute path")
            if "/" not in entry and len(entry.split()) > 1:
                words = entry.split()
                raise ValueError(f"{entry!r} is not a program name (names have no spaces); the list is "
                                 f"comma-separated: ALLOWED_COMMANDS={','.join(words)}, --allow-commands "
                                 f"{','.join(words)}, or in YAML allowed: [{', '.join(words)}]")
        return allowed

    @model_validator(mode="after")
    def _timeouts(self) -> CommandsConfig:
        if self.default_timeout > self.max_timeout:
            raise ValueError(f"default_timeout ({self.default_timeout}) exceeds max_timeout ({self.max_timeout})")
        return self


class JournalConfig(_Strict):
    """The change journal (history, diff and undo of what the file tools change); `journal: off` disables it."""

    enabled: bool = Field(default=True, description="false (or `journal: off`): nothing is recorded.")
    dir: str | None = Field(default=None, description="Where the journal lives (one folder per root path); must "
                            "lie outside every root. Default: <state_dir>/journal.")
    max_bytes: Annotated[int, Field(ge=0, description="Bytes of stored contents kept per root's journal; the "
                                                      "oldest changes go first.")] = 1 << 30
    max_age: Annotated[int | str, Field(description="How long changes are kept: seconds, or 90s, 30m, 12h, 14d, "
                                                    "2w.")] = "14d"
    max_file_size: Annotated[int, Field(ge=0, description="Files larger than this are recorded by hash only (their "
                                                          "changes cannot be undone).")] = 64 << 20

    @field_validator("max_age")
    @classmethod
    def _duration(cls, value: int | str) -> int | str:
        from rootbound.journal.settings import parse_duration

        parse_duration(value)  # ValueError names the forms accepted
        return value

    @property
    def max_age_seconds(self) -> float:
        from rootbound.journal.settings import parse_duration

        return parse_duration(self.max_age)


def _off_or_object(schema: dict[str, Any]) -> None:
    """`journal` is an object, or `off` (a boolean to YAML 1.1)."""
    ref = schema.pop("$ref", None)
    if ref is not None:
        schema["anyOf"] = [{"$ref": ref}, {"enum": ["off", "on", False, True]}]


# Paths the file tools will not write, remove, move onto or patch (root-relative globs, any root).
# Each turns a file write into code that runs later, outside the sandbox, without the user asking for it.
DEFAULT_PROTECTED_PATHS: tuple[str, ...] = (
    # git's hooks and config: listed for the commands' sandbox, which freezes them; the file tools refuse
    # everything inside .git anyway (gitdirs.py). ~/.gitconfig when a root is a home directory.
    ".git/hooks/**", ".git/config", ".gitconfig",
    # Agents and editors that start MCP servers, hooks or tasks from the project when it is opened:
    # Claude Code (hooks run shell commands), VS Code (tasks with runOn: folderOpen, settings that name
    # programs, MCP servers), Cursor and Gemini CLI (MCP servers).
    ".mcp.json", ".claude/settings.json", ".claude/settings.local.json", ".vscode/settings.json",
    ".vscode/tasks.json", ".vscode/mcp.json", ".cursor/mcp.json", ".gemini/settings.json",
    # Shell start-up files (a root that is a home directory).
    ".bashrc", ".bash_profile", ".bash_login", ".bash_logout", ".profile", ".zshrc", ".zprofile", ".zshenv",
    ".zlogin", ".cshrc", ".tcshrc", ".kshrc",
)


class Config(_Strict):
    host: str = "127.0.0.1"
    port: Annotated[int, Field(ge=0, le=65535)] = 8091
    max_full_read_size: Annotated[int, Field(ge=1)] = 1024 * 1024
    file_timeout: Annotated[float, Field(gt=0, le=86400, description=(
        "Seconds a file tool call may take, waiting for a worker included; past it the call stops with an "
        "error (grep and glob keep their own timeout_seconds)."))] = 120.0
    auth_token: str | None = Field(default=None, repr=False, description="Bearer token required on /mcp (one unnamed "
                                   "token reaching every root; logged as `auth_token`); env ROOTBOUND_AUTH_TOKEN.")
    auth_tokens: list[TokenConfig] = Field(default_factory=list, description="Named bearer tokens for /mcp, each "
                                           "limited to some roots if wanted; beside auth_token or instead of it.")
    allowed_hosts: list[str] = Field(default_factory=list, description="Extra Host headers accepted over HTTP "
                                     '(e.g. "mcp.example.com"); each matches with and without a port ("name:443": '
                                     "that port or none); localhost is always accepted.")
    allowed_origins: list[str] = Field(default_factory=list, description="Extra browser Origins accepted over HTTP; "
                                       "localhost origins are always accepted.")
    max_request_body_size: Annotated[int, Field(ge=1024)] = 8 * 1024 * 1024
    shutdown_grace: Annotated[float, Field(ge=0)] = 10.0
    state_dir: str | None = Field(default=None, description="Directory for the server's records of changes in "
                                  "progress, so a server killed mid-change is finished or rolled back on its next "
                                  "start; must lie outside every root. Default: $XDG_STATE_HOME/rootbound, else "
                                  "~/.local/state/rootbound.")
    journal: JournalConfig = Field(
        default_factory=JournalConfig, description="The change journal: history, diff and undo of every change "
        "the file tools make (rootbound history/show/undo); off: nothing is recorded.",
        json_schema_extra=_off_or_object)
    client_roots: Literal["off", "within", "replace"] = "within"
    project_dir: str | None = None
    roots: list[RootConfig] = Field(default_factory=list)
    protected_paths: list[str] = Field(default_factory=lambda: list(DEFAULT_PROTECTED_PATHS),
                                       description="Root-relative globs the file tools may not modify.")
    commands: CommandsConfig = Field(default_factory=CommandsConfig)
    allow_self_modification: bool = Field(
        default=False, description="Serve writable roots (and command write areas) that contain rootbound's own "
        "installation: its virtual environment or Python, the rootbound package, or its import path. Off: such "
        "a configuration is refused at start-up, since the agent could change the server's code.")
    # Where the settings came from, for `rootbound check` and the startup log line.
    source: str = Field(default="built-in default", exclude=True)

    @field_validator("client_roots", mode="before")
    @classmethod
    def _yaml_off(cls, value: object) -> object:
        # YAML 1.1 reads a bare `off` as false (as for commands.sandbox).
        return "off" if value is False else value

    @field_validator("journal", mode="before")
    @classmethod
    def _journal_off(cls, value: object) -> object:
        # `journal: off` (YAML 1.1 reads a bare off as false; on as true: the defaults).
        if value is False or value == "off":
            return {"enabled": False}
        return {} if value is True or value is None or value == "on" else value

    @field_validator("allowed_hosts")
    @classmethod
    def _hosts(cls, entries: list[str]) -> list[str]:
        return [hosts.check_host(e) for e in entries]

    @field_validator("allowed_origins")
    @classmethod
    def _origins(cls, entries: list[str]) -> list[str]:
        return [hosts.check_origin(e) for e in entries]

    @field_validator("protected_paths")
    @classmethod
    def _protected(cls, entries: list[str]) -> list[str]:
        # A rule is root-relative: `..` would name the root's parent, which no file tool path ever matches, and
        # which the commands' sandbox would bind (a directory on the way to the rule is bound read-write).
        for entry in entries:
            if ".." in entry.replace("\\", "/").split("/"):
                raise ValueError(f"protected_paths entry {entry!r} has a '..' component: entries are globs relative "
                                 "to each root (e.g. 'secrets/**'); a path outside the roots needs no rule, since "
                                 "no tool reaches it")
        return entries

    @model_validator(mode="after")
    def _roots(self) -> Config:
        if not self.roots:
            raise ValueError("roots: at least one root is required")
        seen: set[str] = set()
        for root in self.roots:
            if root.name in seen:
                raise ValueError(f"roots: duplicate root name {root.name!r}; give one of them another name "
                                 f"(in the config file, or --root other=PATH)")
            seen.add(root.name)
        return self

    @model_validator(mode="after")
    def _tokens(self) -> Config:
        # Messages name tokens by their place and name only: a token's value is never echoed.
        unnamed = "auth_token (or ROOTBOUND_AUTH_TOKEN)"
        names = {UNNAMED_TOKEN: f"{unnamed}, which the log names {UNNAMED_TOKEN!r}"} if self.auth_token else {}
        secrets = {self.auth_token: unnamed} if self.auth_token else {}
        roots = [r.name for r in self.roots]
        for i, entry in enumerate(self.auth_tokens):
            place = f"auth_tokens[{i}]"
            if entry.name in names:
                raise ValueError(f"{place}.name: duplicate token name {entry.name!r} (also {names[entry.name]}); "
                                 "each token needs a name of its own, since the log tells the calls apart by it")
            if entry.token in secrets:
                raise ValueError(f"{place}.token ({entry.name!r}) is the same token as {secrets[entry.token]}: calls "
                                 "could not be told apart; give each person or agent a token of its own")
            names[entry.name] = f"auth_tokens[{i}]"
            secrets[entry.token] = f"auth_tokens[{i}] ({entry.name!r})"
            if entry.roots is not None:
                if not entry.roots:
                    raise ValueError(f"{place}.roots is empty: token {entry.name!r} would reach no root; list the "
                                     "names of the roots it may use, or leave roots out for all of them")
                unknown = [r for r in entry.roots if r not in roots]
                if unknown:
                    raise ValueError(f"{place}.roots: unknown root {unknown[0]!r} for token {entry.name!r}; "
                                     f"roots: {', '.join(roots)}")
        return self

    @property
    def tokens(self) -> list[TokenConfig]:
        """Every bearer token /mcp accepts: `auth_token` (as one unnamed token reaching every root), then
        `auth_tokens`. Empty: no authentication."""
        unnamed = [TokenConfig(name=UNNAMED_TOKEN, token=self.auth_token)] if self.auth_token else []
        return [*unnamed, *self.auth_tokens]


def parse_root_flag(flag: str) -> dict[str, Any]:
    """`--root NAME=PATH` or `--root PATH` (named after the folder's basename)."""
    name, sep, path = flag.partition("=")
    if not sep or "/" in name:
        path = flag
        # A folder called "My Project" becomes root "My_Project": names are what the agent types.
        name = re.sub(r"[^A-Za-z0-9_.-]", "_", Path(os.path.abspath(path)).name) or "root"
    return {"name": name, "path": path, "allowed_tools": ["*"]}


def _read_file(path: str) -> dict[str, Any]:
    try:
        with open(path, encoding="utf-8") as f:
            data = _json_object(f.read())
            if data is None:
                f.seek(0)
                data = _yaml(path, f)
    except FileNotFoundError:
        raise ConfigError(f"config file not found: {path}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path} must hold a mapping of keys, not {type(data).__name__}")
    return data


def _yaml(path: str, f: TextIO) -> Any:
    import yaml  # loading it is a noticeable part of start-up, which a JSON file need not pay

    try:
        return yaml.safe_load(f)  # from the file, so that its errors name it
    except yaml.YAMLError as exc:
        raise ConfigError(f"config file {path} is not valid YAML: {exc}") from None


def _json_object(text: str) -> dict[str, Any] | None:
    """A JSON object (which is YAML too: read alike), else None."""
    if not text.lstrip().startswith("{"):
        return None
    try:
        data = json.loads(text)
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


def _split_env(value: str) -> list[str]:
    return [v.strip() for v in value.split(",") if v.strip()]


def load_config(
    config_file: str | None = None,
    root_flags: Sequence[str] = (),
    overrides: Mapping[str, Any] | None = None,
    env: Mapping[str, str] | None = None,
) -> Config:
    """Build the `Config` from its sources, later ones winning: file, environment, flags.

    With neither a file nor `--root`, the current directory is served as root `workspace`.
    """
    env = os.environ if env is None else env
    data: dict[str, Any] = _read_file(config_file) if config_file else {}
    problem = config_errors.shape_problem(data)
    if problem:
        raise ConfigError(problem)
    base = os.path.dirname(os.path.abspath(config_file)) if config_file else os.getcwd()
    # Relative root paths in a config file are relative to the file; on the command line, to the cwd.
    roots = [_absolute(r, base) for r in (data.get("roots") or [])]
    roots.extend(_absolute(parse_root_flag(f), os.getcwd()) for f in root_flags)
    if not config_file and not root_flags:
        if os.getcwd() == "/":
            raise ConfigError("refusing to serve / (the whole filesystem) as the default root: rootbound was "
                              "started in / without --config or --root, as an MCP client that starts its servers "
                              "in / would do; start it in the project directory or pass --root PATH, or pass "
                              "--root / explicitly if the whole filesystem is really meant")
        roots = [{"name": DEFAULT_ROOT_NAME, "path": os.getcwd(), "allowed_tools": ["*"]}]
    if roots:
        data["roots"] = roots
    if isinstance(data.get("state_dir"), str) and data["state_dir"]:
        data["state_dir"] = os.path.normpath(os.path.join(base, os.path.expanduser(data["state_dir"])))
    journal = data.get("journal")
    if isinstance(journal, dict) and isinstance(journal.get("dir"), str) and journal["dir"]:
        data["journal"] = {**journal, "dir": os.path.normpath(os.path.join(base, os.path.expanduser(journal["dir"])))}
    commands = dict(data.get("commands") or {})
    if "ALLOWED_COMMANDS" in env:
        allowed = _split_env(env["ALLOWED_COMMANDS"])
        commands["allowed"] = "*" if allowed == ["*"] else allowed
    if _split_env(env.get("ALLOWED_CWD_ROOTS", "")):
        # Seed 000: empty means unset, so an empty variable never lifts a restriction the file sets.
        commands["allowed_cwd_roots"] = _split_env(env["ALLOWED_CWD_ROOTS"])
    if env.get("ROOTBOUND_AUTH_TOKEN"):
        data["auth_token"] = env["ROOTBOUND_AUTH_TOKEN"]
    for key, value in (overrides or {}).items():
        if value is None:
            continue
        if key == "allow_commands":
            allowed = _split_env(value)
            commands["allowed"] = "*" if allowed == ["*"] else allowed
        else:
            data[key] = value
    if commands:
        data["commands"] = commands
    data["source"] = config_file or ("--root flags" if root_flags else "built-in default (current directory)")
    try:
        config = Config.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(config_errors.explain(exc, Config)) from None
    _check_root_paths(config)
    return config


def _absolute(entry: Any, base: str) -> Any:
    if isinstance(entry, dict) and isinstance(entry.get("path"), str) and entry["path"]:
        return {**entry, "path": os.path.normpath(os.path.join(base, os.path.expanduser(entry["path"])))}
    return entry  # malformed: validation names the problem


def _check_root_paths(config: Config) -> None:
    if config.state_dir is not None:
        state = os.path.realpath(config.state_dir)
        for root in config.roots:
            real = os.path.realpath(root.path)
            if os.path.commonpath([state, real]) == real:
                raise ConfigError(f"state_dir {config.state_dir} lies inside root {root.name!r}: the server's "
                                  "records must be out of the agent's reach; choose a directory outside every root")
    if config.journal.enabled and config.journal.dir is not None:
        journal = os.path.realpath(config.journal.dir)
        for root in config.roots:
            real = os.path.realpath(root.path)
            if os.path.commonpath([journal, real]) == real:
                raise ConfigError(f"journal.dir {config.journal.dir} lies inside root {root.name!r}: the journal keeps "
                                  "old file contents and must be out of the agent's reach; choose a directory "
                                  "outside every root")
            if os.path.commonpath([journal, real]) == journal:
                raise ConfigError(f"root {root.name!r} ({root.path}) lies inside journal.dir {config.journal.dir}: "
                                  "the journal cannot be served as a root; serve another directory")
    for root in config.roots:
        if not os.path.exists(root.path):
            raise ConfigError(f"root {root.name!r}: path does not exist: {root.path}")
        if not os.path.isdir(root.path):
            raise ConfigError(f"root {root.name!r}: path is not a directory: {root.path}")
        if not os.access(root.path, os.R_OK | os.X_OK):
            raise ConfigError(f"root {root.name!r}: path is not readable: {root.path}")


def config_json_schema() -> dict[str, Any]:
    """The JSON Schema of the config file, from the models (shipped as `rootbound/config.schema.json`)."""
    schema = Config.model_json_schema(mode="validation")
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "rootbound configuration"
    schema.get("properties", {}).pop("source", None)
    return schema


def per_config(build: Callable[[_C], _T]) -> Callable[[_C], _T]:
    """Memoise `build(config)` by the config object's identity: configs are frozen, so what is derived
    from one (a command policy, the chosen sandbox) is computed once, not on every call."""
    cache: dict[int, tuple[_C, _T]] = {}

    def get(config: _C) -> _T:
        hit = cache.get(id(config))
        if hit is not None and hit[0] is config:
            return hit[1]
        if len(cache) > 32:
            cache.clear()
        value = build(config)
        cache[id(config)] = (config, value)
        return value

    return get
