"""The words: every failure of the file tools as the agent reads it, and each tool's error list for the docs.

The core raises failures as data (`errors.Failure`, `errors.PathError`: a `Kind` and the
values the message needs); `TEXTS` words each kind, once. An entry keyed `(op, kind)` words
a kind for one operation (an existing name is "already there" for create_only, "created by
someone else meanwhile" for a patch). Importing this module installs `render` as the
failures' wording (`Failure.wording`), so a failure reads the same in a result, a log line
or an audit record. The texts are part of the contract (SPEC: "keep their wording").

docs/tools.md's error lists are generated from this table (`COMMON_ERRORS`, `TOOL_ERRORS`):
each tool names the kinds it may answer with, and the page shows their texts with `…` for the
variable parts. Texts worded elsewhere — by the pure patch and edit algorithms, the search
tools and the command tools — are listed as `_ELSEWHERE` strings.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable
from typing import Any, Final

from rootbound.catalogue import CATALOGUE
from rootbound.errors import Failure, Kind
from rootbound.fs.trees import Skip

__all__ = ["COMMON_ERRORS", "ELSEWHERE", "TEXTS", "TOOL_ERRORS", "render", "skip_reason", "text", "unknown_parameter"]

Key = Kind | tuple[str, Kind]

_NEVER_INTERNALS = "the file tools never change a repository's internals (git commands do that)"
_LEADS_OUT = "from its new place the link would lead outside the destination root; nothing was changed"
_GONE = "root '{root}' is no longer available (its directory was removed or replaced); "

TEXTS: Final[dict[Key, str]] = {
    # -- the call --
    # problems: "x is required", "unknown parameter 'x' (did you mean y?)" (`unknown_parameter`), ...
    Kind.INVALID_ARGUMENTS: "invalid arguments for {tool}: {problems}",
    Kind.INTERNAL: "internal error in {tool}; the server log has the details",
    Kind.TIMEOUT: "{tool} timed out after {seconds:g} s{on}; it stopped and changed nothing. Try a smaller file or "
                  "folder, or ask the operator to raise file_timeout (now {seconds:g} s)",
    Kind.BUSY: "{tool} timed out after {seconds:g} s{on} waiting for a free worker: the server is busy with other "
               "long file operations; try again shortly",
    Kind.CANCELLED: "{tool} cancelled by the client{on}; it stopped and nothing was changed",
    # -- roots --
    Kind.UNKNOWN_ROOT: "unknown root: {name}; roots: {roots}",
    Kind.NO_DEFAULT_ROOT: "no root given and this connection has no project root to default to; roots: {roots}",
    Kind.TOOL_NOT_ALLOWED: "tool {tool} not allowed on root {root}",
    Kind.ROOT_GONE: _GONE + "it is served again as soon as a directory exists at its configured path",
    Kind.ROOT_GONE_FOR_GOOD: _GONE + "restart the server (for a client root: reconnect, or send the roots again) to "
                                     "serve it again",
    # -- paths --
    Kind.NULL_BYTE: "invalid path: contains a null byte",
    Kind.NOT_UTF8: "invalid path: not valid UTF-8: {path!r}",
    Kind.COMPONENT_TOO_LONG: "invalid path: component longer than 255 bytes in {path!r}",
    Kind.ESCAPE: "path resolves outside root boundary",
    Kind.NOT_FOUND: "file not found: {path}",
    Kind.THROUGH_FILE: "not a directory: a component of {path} is a file",
    Kind.LOOP: "too many levels of symbolic links: {path}",
    Kind.ACCESS: "permission denied: {path}",
    Kind.NAME_TOO_LONG: "file name too long: {path}",
    Kind.UNOPENABLE: "not a regular file: {path}",
    Kind.OS_ERROR: "{reason}: {path}",
    Kind.IS_DIR: "path is a directory, not a file: {path}",
    ("open", Kind.IS_DIR): "path is a directory, not a file: {path}; use list_folder to see what it holds",
    ("remove", Kind.IS_DIR): "path is a directory, not a file: {path}; use remove_folder to remove a directory",
    Kind.NOT_DIR: "not a directory: {path}",
    Kind.NOT_REGULAR: "not a regular file: {path} is a {type}",
    Kind.CHANGED: "{path} changed while being opened; try again",
    Kind.FILE_CHANGED: "file changed while being opened: {path}; try again",
    Kind.EXISTS: "destination already exists: {path}",
    ("create", Kind.EXISTS): "file already exists: {path}; use overwrite mode to replace",
    ("write", Kind.EXISTS): "{path} was created by someone else while this call ran; nothing was changed, try again",
    ("remove", Kind.IS_ROOT): "cannot remove root directory",
    ("remove_tree", Kind.IS_ROOT): "cannot remove root directory",
    ("rename", Kind.IS_ROOT): "cannot move root directory",
    ("write", Kind.IS_ROOT): "path is the root directory, not a file: {path!r}; give a file path inside the root",
    ("patch", Kind.IS_ROOT): "path is the root directory, not a file: {path!r}; give the path of the file to patch",
    ("edit", Kind.IS_ROOT): "path is the root directory, not a file: {path!r}; give the path of the file to edit",
    Kind.ENDS_IN_DOTDOT: "invalid path: must not end with '..': {path}",
    Kind.TRAILING_SLASH: "invalid path: a file path must not end with '/': {path}",
    # -- protected paths and git --
    Kind.PROTECTED: "protected path: {path} matches the protected_paths rule {rule!r}; the file tools may not write, "
                    "patch, remove or move onto it (the operator can change protected_paths)",
    Kind.IS_DOTGIT: "protected path: {path} is a git directory or file (.git); the file tools never create, change, "
                    "remove or move one, nor anything inside it (git commands do that)",
    Kind.INSIDE_DOTGIT: "protected path: {path} is inside a git directory; " + _NEVER_INTERNALS,
    Kind.ROOT_INSIDE_DOTGIT: "protected path: {path} is inside a git directory (root {root} lies inside one); "
                             + _NEVER_INTERNALS,
    Kind.INSIDE_BARE_REPOSITORY: "protected path: {path} is inside a directory that git treats as a bare repository "
                                 "(it holds HEAD and objects and refs, or HEAD and commondir); " + _NEVER_INTERNALS,
    Kind.MAKES_BARE_REPOSITORY: "protected path: {path} would make {parent} a directory that git treats as a bare "
                                "repository (HEAD and objects and refs, or HEAD and commondir), whose config git would "
                                "obey; the file tools never create a repository (git init does)",
    Kind.COPIES_DOTGIT: "protected path: {path} is a git directory or file (.git): copying it would create a "
                        "repository; copy the folder without it, or use git clone",
    # -- changing a file --
    Kind.SWAPPED_FOR_SYMLINK: "{path} was replaced by a symlink while being written; nothing was changed, try again",
    Kind.CHANGED_MEANWHILE: "{path} was changed by someone else while this call ran; nothing was written, try again",
    Kind.JOURNAL_FAILED: "the change journal could not record this change, so it was not made (nothing was "
                         "changed); the server log says why. Ask the operator to check journal.dir's disk",
    Kind.TOO_LARGE_TO_PATCH: "file too large to patch: {path} is {size} bytes, the limit is {limit}",
    Kind.EXPECTED_MISSING: "file changed: {path} does not exist, but expected_sha256 {expected} was given; nothing was "
                           "written",
    Kind.SHA_MISMATCH: "file changed since you last read it: {path} has sha256 {current}, not the expected {expected}; "
                       "nothing was written — read it again, then retry",
    Kind.NOT_TEXT: "content is not valid text (it holds a lone surrogate); send binary data with encoding=base64",
    Kind.BAD_BASE64: "content is not valid base64",
    Kind.INVALID_ENCODING: "invalid encoding: {encoding}; valid encodings: utf-8, base64",
    Kind.INVALID_MODE: "invalid mode: {mode}; valid modes: {modes}",
    Kind.PATCH_DELETES: "the patch deletes the file (+++ /dev/null or *** Delete File); use remove_file to remove a "
                        "file",
    Kind.PATCH_CREATES_EXISTING: "the patch creates {path} (--- /dev/null), but that file already exists and is not "
                                 "empty; nothing was changed",
    Kind.EDIT_BOTH_FORMS: "give either old_string and new_string (with replace_all), or edits, not both",
    Kind.EDITS_EMPTY: "edits is empty; give at least one {{old_string, new_string}}",
    Kind.EDIT_MISSING: "{missing} is required (or give edits: a list of {{old_string, new_string}})",
    Kind.EDIT_NOT_UTF8: "{path} is not UTF-8 text; edit_file changes text only (use write_file with encoding=base64 "
                        "for binary files)",
    Kind.EDIT_NO_FILE: "file not found: {path} (to create a file, give an empty old_string, or use write_file)",
    # -- folders --
    Kind.NOT_A_FOLDER: "path exists and is a {type}, not a directory: {path}",
    Kind.NO_SUCH_FOLDER: "directory not found: {path}",
    Kind.FOLDER_IS_SYMLINK: "path is a symlink, not a directory: {path}; use remove_file to remove the link",
    Kind.FOLDER_IS_FILE: "path is a file, not a directory: {path}; use remove_file to remove a file",
    Kind.TOO_DEEP: "folder too deep: more than {levels} levels below {name}; nothing was changed",
    Kind.REMOVED_IN_PART: "could not remove all of {path}: {reason} at {where}; part of it may already be removed",
    # -- reading --
    Kind.BYTES_AND_LINES: "byte and line parameters are mutually exclusive: use offset_bytes/limit_bytes or "
                          "offset_lines/limit_lines, not both",
    Kind.TOO_LARGE_TO_READ: "file too large for full read (size: {size}, limit: {limit}); use offset/limit parameters",
    Kind.GREW_TOO_LARGE_TO_READ: "file too large for full read (limit: {limit}); use offset/limit parameters",
    Kind.UNSUPPORTED_HASH: "unsupported hash algorithm: {algorithm}; supported: {supported}",
    # -- copy and move --
    Kind.SOURCE_NOT_FOUND: "source file not found: {path}",
    Kind.SOURCE_NAME_UNKNOWN: "cannot tell the source's name; give its path without a trailing '..'",
    Kind.DESTINATION_IS_FOLDER: "destination already exists as a folder: {path}",
    Kind.NO_MERGE: "destination already exists: {path}; copy does not merge folders - remove it first or choose a new "
                   "name",
    Kind.INTO_ITSELF: "cannot copy a folder into itself: {path} -> {dest}",
    ("rename", Kind.INTO_ITSELF): "cannot move a folder into itself: {path} -> {dest}",
    Kind.REPLACES_ONLY_FILES: "destination already exists: {path} ({type}); a move replaces only a file with a file",
    Kind.COPY_FAILED: "copy failed at {rel}: {reason}; nothing was changed",
    Kind.TOO_DEEP_TO_COPY: "directory tree too deep to copy (more than {levels} levels) at {rel}",
    Kind.LINK_LEADS_OUT: "cannot move symlink {path} there: " + _LEADS_OUT,
    Kind.FOLDER_LINK_LEADS_OUT: "cannot move {path}: its symlink {rel} there: " + _LEADS_OUT,
    Kind.CROSS_FS_SKIPS: "cannot move {path} to another filesystem: {count} entries cannot be copied safely: {listed}; "
                         "nothing was changed",
    Kind.CROSS_FS_SPECIAL: "cannot move {path} to another filesystem: it is a {type}",
    Kind.CROSS_FS_LINK_LEADS_OUT: "cannot move symlink {path} to another filesystem: it would lead outside the "
                                  "destination root; nothing was changed",
    Kind.SOURCE_LEFT: "{path} was copied to {dest}, but removing the source failed ({reason}); both may now exist in "
                      "part",
    Kind.MOVED_MEANWHILE: "{path} changed while being moved; nothing was changed, try again",
}

_SKIPS: Final = {
    Skip.LINK_LEADS_OUT: "symlink leading outside the destination root",
    Skip.SPECIAL: "special file ({type})",
    Skip.REMOVED: "removed during the copy",
    Skip.CHANGED: "changed during the copy",
}


def unknown_parameter(name: str, valid: list[str]) -> str:
    """An argument the tool does not take, with the nearest valid names (`start_line` -> offset_lines), else all."""
    text = f"unknown parameter {name!r}"
    if not valid:
        return text
    near = difflib.get_close_matches(name, valid, n=2, cutoff=0.5)
    if near:
        return f"{text} (did you mean {' or '.join(near)}?)"
    return f"{text} (parameters: {', '.join(valid)})"


def skip_reason(why: Skip, kind: str) -> str:
    """Why a folder copy left an entry out, in words (`kind`: the entry's type)."""
    return _SKIPS[why].format(type=kind)


def _fields(kind: Kind, fields: dict[str, Any]) -> dict[str, Any]:
    """The values a text needs that the failure does not carry as such."""
    if kind in (Kind.TIMEOUT, Kind.BUSY, Kind.CANCELLED):
        where = fields.get("where")
        return {**fields, "on": f" on {where}" if where else ""}
    if kind is Kind.MAKES_BARE_REPOSITORY:
        return {**fields, "parent": str(fields["path"]).rstrip("/").rpartition("/")[0] or "the root"}
    if kind is Kind.CROSS_FS_SKIPS:
        skipped = fields["skipped"]
        listed = ", ".join(f"{p} ({skip_reason(why, t)})" for p, why, t in skipped[:5])
        return {**fields, "count": len(skipped), "listed": listed}
    return fields


def text(kind: Kind, op: str | None = None, **fields: Any) -> str:
    """The words for `kind` (as `op` meets it) with these values."""
    template = TEXTS.get((op, kind)) if op is not None else None
    return (template or TEXTS[kind]).format(**_fields(kind, fields))


def render(failure: Failure) -> str:
    return text(failure.kind, failure.op, **failure.fields)


Failure.wording = render


# -- the docs ---------------------------------------------------------------------------------------

_FIELD = re.compile(r"\{(\w+)[^{}]*\}")
_DOC_FIELDS = {"on": " on …"}


def _doc(key: Key | str) -> str:
    """A text as docs/tools.md shows it: the variable parts as `…`."""
    if not isinstance(key, (Kind, tuple)):
        return key  # worded elsewhere
    template = TEXTS[key]
    return _FIELD.sub(lambda m: _DOC_FIELDS.get(m.group(1), "…"), template).replace("{{", "{").replace("}}", "}")


def _docs(keys: Iterable[Key | str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(_doc(k) for k in keys))


# What any tool taking `root` and a path may answer.
_COMMON: tuple[Key, ...] = (
    Kind.UNKNOWN_ROOT, Kind.NO_DEFAULT_ROOT, Kind.TOOL_NOT_ALLOWED, Kind.INVALID_ARGUMENTS, Kind.ESCAPE,
    Kind.NOT_FOUND, Kind.NULL_BYTE, Kind.NOT_UTF8, Kind.COMPONENT_TOO_LONG, Kind.THROUGH_FILE, Kind.LOOP, Kind.ACCESS,
    Kind.NAME_TOO_LONG, Kind.UNOPENABLE, Kind.OS_ERROR, Kind.TIMEOUT, Kind.BUSY, Kind.CANCELLED, Kind.ROOT_GONE,
    Kind.ROOT_GONE_FOR_GOOD, Kind.INTERNAL,
)
# What every writing tool may answer besides its own: git's repositories, the protected paths, a race.
_GUARDED: tuple[Key, ...] = (
    Kind.PROTECTED, Kind.IS_DOTGIT, Kind.INSIDE_DOTGIT, Kind.ROOT_INSIDE_DOTGIT, Kind.INSIDE_BARE_REPOSITORY,
    Kind.MAKES_BARE_REPOSITORY, Kind.JOURNAL_FAILED,
)
_CHANGING_A_FILE: tuple[Key, ...] = (
    Kind.IS_DIR, Kind.NOT_REGULAR, Kind.SWAPPED_FOR_SYMLINK, Kind.TRAILING_SLASH, ("write", Kind.EXISTS),
    Kind.CHANGED_MEANWHILE, Kind.EXPECTED_MISSING, Kind.SHA_MISMATCH,
)
_MOVING: tuple[Key, ...] = (
    Kind.SOURCE_NOT_FOUND, Kind.EXISTS, Kind.DESTINATION_IS_FOLDER, Kind.ENDS_IN_DOTDOT, Kind.TOO_DEEP_TO_COPY,
    Kind.COPY_FAILED,
)
# Worded where they arise: the patch and edit algorithms (patching.py, editing.py) and the search and command tools.
_ELSEWHERE: Final = {
    "patch": (
        "patch failed: hunk … does not match at line … (expected …, found …: …); … Its closest place is …",
        "patch failed: hunk … matches … places (lines …) and its header's line … is none of them",
        "patch failed: hunks … and … overlap at line … of the file; merge them into one hunk",
        "patch failed: hunk …'s anchor '@@ …' names no line of the file",
    ),
    "edit": (
        "old_string was not found in …; nothing was changed … The closest text is at …, where it differs: …",
        "old_string matches … places in …, at lines …; nothing was changed",
        "old_string and new_string are the same; nothing to change",
        "old_string is empty, but … is not empty",
        "edit … of …: … (which of several edits failed; none was made)",
    ),
    "grep": ("invalid pattern: …; the syntax is RE2 (no lookaround, no backreferences); to search for the text "
             "itself: …", "invalid glob_filter: …", "not a regular file or directory: …"),
    "glob": ("exactly one of pattern or regex must be provided", "invalid pattern: …",
             "invalid regex: …; the syntax is RE2 (no lookaround, no backreferences); to search for the text itself: …",
             "not a directory: …"),
    "command": (
        "command not allowed: …. Allowed commands: …",
        "cwd does not exist: …; nothing was run",
        "commands are refused: …. Nothing was run",
        "commands are refused: … is a symbolic link where a protected … must be …. Nothing was run",
    ),
    "journal": (
        "the change journal is off on this server (journal: off), so there is no history to list or undo",
        "since: … is not a duration; write e.g. 90s, 30m, 2h, 14d or 1w",
        "no change … in root …'s history; nothing was undone",
        "… names several changes; give more of the id; nothing was undone",
        "… is not your change (another connection made it): you may undo only your own; nothing was undone",
    ),
    "execute_command": (
        "execute_command runs one program directly, without a shell, so the shell operator … cannot be …",
        "command not found: …. …",
        "cwd not allowed: … is outside the allowed working directories …",
    ),
}

_TOOL_KEYS: Final[dict[str, tuple[Key | str, ...]]] = {
    "list_roots": (),
    "list_folder": (Kind.NOT_DIR,),
    "read_file": (Kind.TOO_LARGE_TO_READ, Kind.GREW_TOO_LARGE_TO_READ, Kind.BYTES_AND_LINES, ("open", Kind.IS_DIR),
                  Kind.NOT_REGULAR, Kind.FILE_CHANGED),
    "stat_file": (),
    "hash_file": (Kind.UNSUPPORTED_HASH, ("open", Kind.IS_DIR), Kind.NOT_REGULAR, Kind.FILE_CHANGED),
    "permissions_file": (),
    "write_file": (("write", Kind.IS_ROOT), ("create", Kind.EXISTS), Kind.INVALID_MODE, Kind.INVALID_ENCODING,
                   Kind.NOT_TEXT, Kind.BAD_BASE64, *_CHANGING_A_FILE, *_GUARDED),
    "remove_file": (("remove", Kind.IS_ROOT), ("remove", Kind.IS_DIR), *_GUARDED),
    "patch_file": (("patch", Kind.IS_ROOT), *_ELSEWHERE["patch"], Kind.PATCH_DELETES, Kind.PATCH_CREATES_EXISTING,
                   Kind.TOO_LARGE_TO_PATCH, *_CHANGING_A_FILE, *_GUARDED),
    "edit_file": (("edit", Kind.IS_ROOT), *_ELSEWHERE["edit"], Kind.EDIT_BOTH_FORMS, Kind.EDITS_EMPTY,
                  Kind.EDIT_MISSING, Kind.EDIT_NO_FILE, Kind.EDIT_NOT_UTF8, Kind.TOO_LARGE_TO_PATCH,
                  *_CHANGING_A_FILE, *_GUARDED),
    "create_folder": (Kind.NOT_A_FOLDER, *_GUARDED),
    "remove_folder": (("remove_tree", Kind.IS_ROOT), Kind.ENDS_IN_DOTDOT, Kind.NO_SUCH_FOLDER, Kind.FOLDER_IS_SYMLINK,
                      Kind.FOLDER_IS_FILE, Kind.TOO_DEEP, Kind.REMOVED_IN_PART, *_GUARDED),
    "copy": (*_MOVING, Kind.NOT_REGULAR, Kind.CHANGED, Kind.NO_MERGE, Kind.INTO_ITSELF, Kind.SOURCE_NAME_UNKNOWN,
             Kind.COPIES_DOTGIT, *_GUARDED),
    "move": (*_MOVING, ("rename", Kind.IS_ROOT), ("rename", Kind.INTO_ITSELF), Kind.REPLACES_ONLY_FILES,
             Kind.LINK_LEADS_OUT, Kind.FOLDER_LINK_LEADS_OUT, Kind.TOO_DEEP, Kind.CROSS_FS_SKIPS,
             Kind.CROSS_FS_SPECIAL, Kind.CROSS_FS_LINK_LEADS_OUT, Kind.SOURCE_LEFT, Kind.MOVED_MEANWHILE, *_GUARDED),
    "history": _ELSEWHERE["journal"][:2],
    "undo": (_ELSEWHERE["journal"][0], *_ELSEWHERE["journal"][2:]),
    "grep": (*_ELSEWHERE["grep"], Kind.CHANGED),
    "glob": (*_ELSEWHERE["glob"], Kind.CHANGED),
    "execute_command": (*_ELSEWHERE["command"][:1], *_ELSEWHERE["execute_command"], *_ELSEWHERE["command"][1:]),
    "shell": _ELSEWHERE["command"],
}

COMMON_ERRORS: Final = _docs(_COMMON)
TOOL_ERRORS: Final = {tool.name: _docs(_TOOL_KEYS[tool.name]) for tool in CATALOGUE}
ELSEWHERE: Final = tuple(t for texts in _ELSEWHERE.values() for t in texts)
