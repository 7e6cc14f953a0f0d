"""Configuration mistakes in the operator's words: what is wrong, how to write it, the nearest valid key.

pydantic would say `commands.allowed.list[str]: Input should be a valid list; commands.allowed.literal['*']:
Input should be '*'`. An operator needs "commands.allowed must be a list, not the text 'git, ls'", the
YAML that works, and "did you mean allowed_tools" for a typo. This module turns a `ValidationError` (and
the shapes `load_config` must see before validating) into such sentences.
"""

from __future__ import annotations

import difflib
import re
import types
import typing
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ValidationError

__all__ = ["explain", "shape_problem"]

Loc = tuple[str | int, ...]
_ROOT_EXAMPLE = "roots:\n  - name: workspace\n    path: /srv/project"


def _scalar(value: Any) -> str:
    import yaml  # only to word an error: loading it is a noticeable part of start-up

    return yaml.safe_dump(value).removesuffix("\n...\n").strip()


def _roots_yaml(entries: list[dict[str, Any]]) -> str:
    return "roots:\n" + "".join(f"  - name: {_scalar(e['name'])}\n    path: {_scalar(e['path'])}\n" for e in entries)


def _indent(text: str) -> str:
    return "\n".join("    " + line for line in text.rstrip("\n").splitlines())


def _yaml(data: Any) -> str:
    import yaml

    return yaml.safe_dump(data, default_flow_style=None, sort_keys=False, width=1000)


def shape_problem(data: Mapping[str, Any]) -> str | None:
    """Shapes `load_config` reads before validation (it iterates `roots`, copies `commands`)."""
    roots = data.get("roots")
    if roots is not None and not isinstance(roots, list):
        if isinstance(roots, dict) and {"name", "path"} <= set(roots):
            entries = [roots]  # one entry without its leading "-"
        elif isinstance(roots, dict) and roots and all(isinstance(v, str) for v in roots.values()):
            entries = [{"name": k, "path": v} for k, v in roots.items()]  # written as name: path
        else:
            entries = []
        example = _roots_yaml(entries) if entries else _ROOT_EXAMPLE
        kind = "a mapping" if isinstance(roots, dict) else f"{type(roots).__name__} {roots!r}"
        return (f"roots must be a list of {{name, path}} entries (each starting with '-'), not {kind}. "
                f"Write:\n{_indent(example)}")
    commands = data.get("commands")
    if commands is not None and not isinstance(commands, dict):
        return (f"commands must be a mapping of keys, not {commands!r}. Write, for example:\n"
                f"{_indent(_yaml({'commands': {'allowed': ['git', 'ls']}}))}")
    return None


# -- walking a pydantic location back to the models ------------------------------------------------


def _args(tp: Any) -> tuple[Any, ...]:
    origin = typing.get_origin(tp)
    if origin is typing.Annotated:
        return _args(typing.get_args(tp)[0])
    if origin in (typing.Union, types.UnionType):
        return tuple(a for arg in typing.get_args(tp) for a in (_args(arg) or (arg,)))
    return ()


def _model(tp: Any) -> type[BaseModel] | None:
    for candidate in (tp, *_args(tp)):
        if isinstance(candidate, type) and issubclass(candidate, BaseModel):
            return candidate
    return None


def _item(tp: Any) -> Any:
    for candidate in (tp, *_args(tp)):
        if typing.get_origin(candidate) is list:
            return typing.get_args(candidate)[0]
    return None


class _Place:
    """Where a pydantic `loc` points: its readable path, the field (if known) and the model holding it."""

    def __init__(self, root: type[BaseModel], loc: Loc) -> None:
        self.parts: list[str | int] = []
        self.field: Any = None
        self.owner: type[BaseModel] | None = root
        current: Any = root
        for part in loc:
            model = _model(current)
            if isinstance(part, int):
                self.parts.append(part)
                current = _item(current)
            elif model is not None:
                self.owner = model
                self.field = model.model_fields.get(part)
                self.parts.append(part)
                current = self.field.annotation if self.field is not None else None
            # else: a union member's tag, such as "list[str]" or "literal['*']": not part of the path

    @property
    def path(self) -> str:
        return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in self.parts).lstrip(".")

    @property
    def key(self) -> str:
        named = [p for p in self.parts if isinstance(p, str)]
        return named[-1] if named else ""

    def example(self, value: Any) -> str:
        """YAML that sets this path to `value`, nested as in the file (list indexes become one entry)."""
        data: Any = value
        for part in reversed(self.parts):
            data = [data] if isinstance(part, int) else {part: data}
        return _indent(_yaml(data))


# -- sentences -----------------------------------------------------------------------------------

_SECTIONS = {"": "Config", "roots[]": "RootConfig", "commands": "CommandsConfig", "commands.limits": "CommandLimits"}


def _all_keys(root: type[BaseModel]) -> dict[str, str]:
    """Every valid key of the file by name, with the dotted place it belongs (`allowed` -> `commands.allowed`)."""
    found: dict[str, str] = {}

    def walk(model: type[BaseModel], prefix: str) -> None:
        for name, field in model.model_fields.items():
            if name == "source":
                continue
            found.setdefault(name, prefix + name)  # the first place a name appears (top level first)
            inner = _model(field.annotation) or _model(_item(field.annotation))
            if inner is not None:
                walk(inner, f"{prefix}{name}{'[].' if _item(field.annotation) else '.'}")

    walk(root, "")
    return found


def _unknown_key(place: _Place, root: type[BaseModel]) -> str:
    """`unknown key 'x'; did you mean 'y'?` with the nearest valid key at this level, or elsewhere in the
    file when that is much nearer (`allowed` at the top level is `commands.allowed`)."""
    key = place.key
    here = [k for k in (place.owner.model_fields if place.owner else {}) if k != "source"]
    parent = place.path[: len(place.path) - len(key)]
    candidates = [(k, parent + k, 0.05) for k in here]  # a small bonus: this level is the likelier intent
    candidates += [(k, where, 0.0) for k, where in _all_keys(root).items() if where != parent + k]
    score, where = max((difflib.SequenceMatcher(None, key, k).ratio() + bonus, where) for k, where, bonus in candidates)
    message = f"unknown key {place.path!r}"
    if score >= 0.65:
        return f"{message}; did you mean {where!r}?"
    return f"{message}; valid keys here: {', '.join(here)}"


def _words(text: str) -> list[str]:
    return [w for w in re.split(r"[,\s]+", text) if w]


def _sentence(place: _Place, errors: list[dict[str, Any]], root: type[BaseModel]) -> str:
    kinds = [e["type"] for e in errors]
    error = next((e for e in errors if e["type"] != "literal_error"), errors[0])
    kind, value, ctx = error["type"], error.get("input"), error.get("ctx") or {}
    path = place.path
    if "extra_forbidden" in kinds:
        return _unknown_key(place, root)
    if kind == "missing":
        if place.parts[:1] == ["roots"]:
            return (f"{path} is missing: every root needs a name and a path. Write:\n"
                    f"{_indent(_ROOT_EXAMPLE)}")
        return f"{path} is missing"
    if kind == "list_type":
        star = " (or \"*\" for any)" if "literal_error" in kinds else ""
        items = _words(value) if isinstance(value, str) else [value]
        return (f"{path} must be a list{star}, not {value!r}. Write it as a YAML list, e.g.:\n"
                f"{place.example(items)}")
    if kind in ("model_type", "model_attributes_type", "dict_type"):
        if place.key == "roots" and isinstance(value, str):
            name = re.sub(r"[^A-Za-z0-9_.-]", "_", value.rstrip("/").rsplit("/", 1)[-1]) or "root"
            return (f"{path} must be a {{name, path}} entry, not {value!r}. Write:\n"
                    f"{_indent(_roots_yaml([{'name': name, 'path': value}]))}")
        return f"{path} must be a mapping of keys, not {value!r}"
    if kind == "string_type":
        return f"{path} must be text, not {value!r}"
    if kind in ("int_parsing", "int_type", "int_from_float"):
        return f"{path} must be a whole number, not {value!r}"
    if kind in ("float_parsing", "float_type"):
        return f"{path} must be a number, not {value!r}"
    if kind in ("bool_parsing", "bool_type"):
        return f"{path} must be true or false, not {value!r}"
    if kind in ("greater_than_equal", "greater_than", "less_than_equal", "less_than"):
        bound = {"greater_than_equal": "at least", "greater_than": "more than", "less_than_equal": "at most",
                 "less_than": "less than"}[kind]
        limit = next(iter(ctx.values()), "?")
        return f"{path} must be {bound} {limit}, not {value!r}"
    if kind == "string_too_short":
        return f"{path} must not be empty"
    if kind == "string_pattern_mismatch" and place.key == "name":
        fixed = re.sub(r"[^A-Za-z0-9_.-]", "_", str(value))
        return f"{path} {value!r} may contain only letters, digits, '_', '.' and '-', e.g. {fixed!r}"
    if kind == "literal_error":
        options = re.findall(r"'([^']*)'", str(ctx.get("expected", "")))
        close = difflib.get_close_matches(str(value), options, n=1, cutoff=0.5)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        return f"{path} must be one of {', '.join(options)}, not {value!r}{hint}"
    message = str(error["msg"]).removeprefix("Value error, ")
    return f"{path}: {message}" if path else message


_TOKEN_EXAMPLE = "auth_tokens:\n  - name: alice\n    token: <at least 128 random bits>\n    roots: [alice]"


def _is_secret(place: _Place) -> bool:
    """A place whose value may be a bearer token (`auth_token`, an `auth_tokens` entry or its `token`)."""
    parts = place.parts
    if not parts or parts[0] not in ("auth_token", "auth_tokens"):
        return False
    return not any(p in ("name", "roots") for p in parts[1:])


def _secret_sentence(place: _Place, errors: list[dict[str, Any]], root: type[BaseModel]) -> str:
    """Like `_sentence`, but never quoting the value: it may be a token."""
    kinds = [e["type"] for e in errors]
    path = place.path
    if "extra_forbidden" in kinds:
        return _unknown_key(place, root)
    reason = {"missing": "is missing", "string_type": "must be text", "string_too_short": "must not be empty",
              "list_type": "must be a list of {name, token, roots} entries",
              "model_type": "must be a {name, token, roots} entry", "model_attributes_type":
              "must be a {name, token, roots} entry", "dict_type": "must be a {name, token, roots} entry",
              }.get(kinds[0], str(errors[0]["msg"]).removeprefix("Value error, "))
    hint = "" if kinds[0] == "missing" else " (the value given is not repeated: it may be a secret)"
    example = f". Write, for example:\n{_indent(_TOKEN_EXAMPLE)}" if path != "auth_token" else ""
    return f"{path} {reason}{hint}{example}"


def explain(exc: ValidationError, root: type[BaseModel]) -> str:
    """Every error of `exc` (validated as `root`) as a sentence; one per offending key."""
    groups: dict[str, tuple[_Place, list[dict[str, Any]]]] = {}
    for error in exc.errors():
        place = _Place(root, tuple(error["loc"]))
        groups.setdefault(place.path, (place, []))[1].append(dict(error))
    paths = list(groups)
    sentences = []
    for path, (place, errors) in groups.items():
        # A union's "or '*'" alternative, when the list alternative failed deeper: not a problem of its own.
        if all(e["type"] == "literal_error" for e in errors) and any(
                p != path and (p.startswith(path + "[") or p.startswith(path + ".")) for p in paths):
            continue
        sentences.append((_secret_sentence if _is_secret(place) else _sentence)(place, errors, root))
    return "\n".join(sentences)
