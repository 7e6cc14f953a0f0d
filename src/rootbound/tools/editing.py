"""edit_file: replace exact text in a file, the edit primitive models are trained on.

The matching is `rootbound.editing` (pure); this handler only reads, guards and
writes, exactly as patch_file does: resolved beneath the root with the protected-path
guard, under the target lock, `expected_sha256` checked, atomic replacement.
"""

from __future__ import annotations

from typing import Annotated, Any

from mcp.types import ToolAnnotations
from pydantic import BaseModel, ConfigDict, Field

from rootbound import editing
from rootbound.errors import Failure, Kind, PathError, ToolError
from rootbound.fs import display_path, split_path
from rootbound.tools.base import Args, CallContext, RootName, ToolOutput, ToolSpec
from rootbound.tools.writing import changing_file, check_expected, check_file_path, sha256

__all__ = ["TOOLS"]

MAX_EDIT_SIZE = 64 * 1024 * 1024  # the file is held in memory, as for patch_file


def _compact(schema: dict[str, Any]) -> dict[str, Any]:
    """Every byte of a tool definition is sent to the model on every turn: drop the generated titles, spell an
    optional field as its type alone (null is accepted all the same) and put the edit item's schema inline."""
    schema.pop("title", None)
    defs = schema.pop("$defs", {})
    for prop in schema.get("properties", {}).values():
        prop.pop("title", None)
        options = prop.pop("anyOf", None)
        if options:
            prop.update(next(o for o in options if o.get("type") != "null"))
            if prop.get("default", 0) is None:
                del prop["default"]
        ref = prop.get("items", {}).pop("$ref", None)
        if ref:
            item = _compact(defs[ref.rsplit("/", 1)[1]])
            item.pop("additionalProperties")
            item["properties"]["replace_all"].pop("default")
            prop["items"].update(item)
    return schema


class OneEdit(BaseModel):
    model_config = ConfigDict(extra="forbid")

    old_string: str
    new_string: str
    replace_all: bool = False


class EditFileArgs(Args):
    # No descriptions on the fields: the tool's description says it all in fewer bytes.
    root: RootName = None
    path: str
    old_string: str | None = None
    new_string: str | None = None
    replace_all: bool = False
    edits: list[OneEdit] | None = None
    expected_sha256: Annotated[str | None, Field(pattern=r"^[0-9a-fA-F]{64}$")] = None

    @classmethod
    def model_json_schema(cls, *args: Any, **kwargs: Any) -> dict[str, Any]:
        return _compact(super().model_json_schema(*args, **kwargs))


class EditFileResult(BaseModel):
    path: str
    replacements: int
    first_changed_line: int
    size: int
    created: bool
    sha256: str

    @classmethod
    def model_json_schema(cls, *args: Any, **kwargs: Any) -> dict[str, Any]:
        schema = _compact(super().model_json_schema(*args, **kwargs))
        del schema["required"]  # every field is always there; the types are what a client needs
        return schema


def _edits(args: EditFileArgs) -> list[editing.Edit]:
    single = args.old_string is not None or args.new_string is not None
    if args.edits is not None:
        if single or args.replace_all:
            raise Failure(Kind.EDIT_BOTH_FORMS)
        if not args.edits:
            raise Failure(Kind.EDITS_EMPTY)
        return [editing.Edit(e.old_string, e.new_string, e.replace_all) for e in args.edits]
    if args.old_string is None or args.new_string is None:
        raise Failure(Kind.EDIT_MISSING, missing="old_string" if args.old_string is None else "new_string")
    return [editing.Edit(args.old_string, args.new_string, args.replace_all)]


def _text(data: bytes, path: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise PathError("edit", path, Kind.EDIT_NOT_UTF8) from None


def edit_file(ctx: CallContext, args: EditFileArgs) -> ToolOutput:
    root = ctx.roots.get_for(args.root, "edit_file")
    edits = _edits(args)
    path = args.path
    check_file_path(root, path, "edit")
    shown = display_path(split_path(path))
    creates = edits[0].old == ""  # only then may the file (and its folders) be missing
    with changing_file(ctx, root, path, "edit", make_parents=creates) as target:
        st = target.regular()
        if st is None and not creates:
            raise PathError("edit", path, Kind.EDIT_NO_FILE)
        data, st = target.read(MAX_EDIT_SIZE) if st else (b"", None)
        check_expected(args.expected_sha256, sha256(data) if st else None, path)
        try:
            done = editing.apply(_text(data, path), edits, shown)
        except editing.EditError as exc:
            raise ToolError(str(exc)) from None
        new = done.text.encode("utf-8")
        digest = sha256(new)
        target.write_atomic(new, like=st, replace=st is not None, before_commit=lambda: target.unchanged_since(st),
                            digest=digest)
    result = EditFileResult(path=shown, replacements=done.replacements, first_changed_line=done.first_changed_line,
                            size=len(new), created=st is None, sha256=digest)
    n = done.replacements
    head = (f"Created {shown} ({len(new)} bytes)." if st is None else
            f"Edited {shown}: {n} replacement{'s' * (n != 1)}, first changed line {done.first_changed_line}.")
    return ToolOutput(result, f"{head}\n{done.shown}" if done.shown else head)


# As writes() would say, in fewer bytes: no second title, and not the hints whose MCP default already
# says it (readOnlyHint and idempotentHint default to false).
_ANNOTATIONS = ToolAnnotations(destructive_hint=True, open_world_hint=False)

TOOLS = [
    ToolSpec(
        "edit_file", "Edit a file",
        "Replace old_string (exactly as in the file, once unless replace_all) with new_string. edits: several "
        "in order, all or none. Whole files: write_file.",
        EditFileArgs, EditFileResult, _ANNOTATIONS, edit_file),
]
