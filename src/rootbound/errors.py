"""The failures a tool reports to the agent, and the core's errors as data.

* `Failure` (and `PathError`, the same with the operation and the agent's path): what
  went wrong as a `Kind` and the values a message needs. The filesystem core raises
  only these and holds no agent-facing sentence; the tool edge words them
  (`tools/messages.py`: one table, also the source of docs/tools.md's error lists).
  That module installs the wording (`Failure.wording`) when the tools are imported,
  so `message` reads the same wherever a failure is logged.
* `ToolError` with a message of its own: the pure text algorithms (patch, edit) and the
  command tools word their errors where they arise.

Every one becomes an `isError` result whose text is `message` (`tools.base.call_tool`).
A denial (`Denied`, or a Failure of a `DENIALS` kind) is a held fence: an escape attempt,
a protected path, a tool not allowed; it is logged at WARN. Anything else a tool raises
is a bug: the client gets a generic message and the traceback goes to the log, so no
internal detail (host paths, symlink targets) leaks.
"""

from __future__ import annotations

from collections.abc import Callable
from enum import StrEnum
from typing import Any, ClassVar

__all__ = ["DENIALS", "Denied", "Failure", "Kind", "PathError", "ToolError"]


class ToolError(Exception):
    """Bad input or a filesystem condition the agent can act on ("file not found: a.txt")."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self._message = message

    @property
    def message(self) -> str:
        return self._message

    @property
    def outcome(self) -> str:
        """How the call log records it: error, denied, timeout or cancelled."""
        return "error"


class Denied(ToolError):
    """A fence held: an escape attempt or a tool not allowed on a root. Logged at WARN."""

    @property
    def outcome(self) -> str:
        return "denied"


class Kind(StrEnum):
    """What went wrong. The wording of each is in tools/messages.py."""

    # -- the call ------------------------------------------------------------------------------------
    INVALID_ARGUMENTS = "invalid_arguments"
    INTERNAL = "internal"
    TIMEOUT = "timeout"
    BUSY = "busy"
    CANCELLED = "cancelled"
    # -- roots ---------------------------------------------------------------------------------------
    UNKNOWN_ROOT = "unknown_root"
    NO_DEFAULT_ROOT = "no_default_root"
    TOOL_NOT_ALLOWED = "tool_not_allowed"
    ROOT_GONE = "root_gone"  # its directory was removed or replaced; it comes back with a new one
    ROOT_GONE_FOR_GOOD = "root_gone_for_good"  # ... and only a restart (or new client roots) brings it back
    # -- a path and what it leads to (errno-like) ----------------------------------------------------
    NULL_BYTE = "null_byte"
    NOT_UTF8 = "not_utf8"
    COMPONENT_TOO_LONG = "component_too_long"
    ESCAPE = "escape"
    NOT_FOUND = "not_found"
    THROUGH_FILE = "through_file"  # ENOTDIR: a component on the way is not a directory
    LOOP = "loop"
    ACCESS = "access"
    NAME_TOO_LONG = "name_too_long"
    UNOPENABLE = "unopenable"  # ENXIO: a socket, or a device without a driver
    OS_ERROR = "os_error"  # anything else: `reason` is the system's words
    IS_DIR = "is_dir"
    NOT_DIR = "not_dir"
    NOT_REGULAR = "not_regular"
    CHANGED = "changed"  # the entry changed between the look and the open
    FILE_CHANGED = "file_changed"  # ... a file opened to be read
    EXISTS = "exists"
    IS_ROOT = "is_root"
    ENDS_IN_DOTDOT = "ends_in_dotdot"
    TRAILING_SLASH = "trailing_slash"
    # -- protected paths and git ---------------------------------------------------------------------
    PROTECTED = "protected"
    IS_DOTGIT = "is_dotgit"
    INSIDE_DOTGIT = "inside_dotgit"
    ROOT_INSIDE_DOTGIT = "root_inside_dotgit"
    INSIDE_BARE_REPOSITORY = "inside_bare_repository"
    MAKES_BARE_REPOSITORY = "makes_bare_repository"
    COPIES_DOTGIT = "copies_dotgit"
    # -- changing a file -----------------------------------------------------------------------------
    SWAPPED_FOR_SYMLINK = "swapped_for_symlink"
    CHANGED_MEANWHILE = "changed_meanwhile"
    JOURNAL_FAILED = "journal_failed"
    TOO_LARGE_TO_PATCH = "too_large_to_patch"
    EXPECTED_MISSING = "expected_missing"
    SHA_MISMATCH = "sha_mismatch"
    NOT_TEXT = "not_text"
    BAD_BASE64 = "bad_base64"
    INVALID_ENCODING = "invalid_encoding"
    INVALID_MODE = "invalid_mode"
    PATCH_DELETES = "patch_deletes"
    PATCH_CREATES_EXISTING = "patch_creates_existing"
    EDIT_BOTH_FORMS = "edit_both_forms"
    EDITS_EMPTY = "edits_empty"
    EDIT_MISSING = "edit_missing"
    EDIT_NOT_UTF8 = "edit_not_utf8"
    EDIT_NO_FILE = "edit_no_file"
    # -- folders -------------------------------------------------------------------------------------
    NOT_A_FOLDER = "not_a_folder"
    NO_SUCH_FOLDER = "no_such_folder"
    FOLDER_IS_SYMLINK = "folder_is_symlink"
    FOLDER_IS_FILE = "folder_is_file"
    TOO_DEEP = "too_deep"
    REMOVED_IN_PART = "removed_in_part"
    # -- reading -------------------------------------------------------------------------------------
    BYTES_AND_LINES = "bytes_and_lines"
    TOO_LARGE_TO_READ = "too_large_to_read"
    GREW_TOO_LARGE_TO_READ = "grew_too_large_to_read"
    UNSUPPORTED_HASH = "unsupported_hash"
    # -- copy and move -------------------------------------------------------------------------------
    SOURCE_NOT_FOUND = "source_not_found"
    SOURCE_NAME_UNKNOWN = "source_name_unknown"
    DESTINATION_IS_FOLDER = "destination_is_folder"
    NO_MERGE = "no_merge"
    INTO_ITSELF = "into_itself"
    REPLACES_ONLY_FILES = "replaces_only_files"
    COPY_FAILED = "copy_failed"
    TOO_DEEP_TO_COPY = "too_deep_to_copy"
    LINK_LEADS_OUT = "link_leads_out"
    FOLDER_LINK_LEADS_OUT = "folder_link_leads_out"
    CROSS_FS_SKIPS = "cross_fs_skips"
    CROSS_FS_SPECIAL = "cross_fs_special"
    CROSS_FS_LINK_LEADS_OUT = "cross_fs_link_leads_out"
    SOURCE_LEFT = "source_left"
    MOVED_MEANWHILE = "moved_meanwhile"


# The kinds that are a fence holding (logged at WARN as outcome "denied").
DENIALS = frozenset({Kind.TOOL_NOT_ALLOWED, Kind.NULL_BYTE, Kind.ESCAPE, Kind.PROTECTED, Kind.IS_DOTGIT,
                     Kind.INSIDE_DOTGIT, Kind.ROOT_INSIDE_DOTGIT, Kind.INSIDE_BARE_REPOSITORY,
                     Kind.MAKES_BARE_REPOSITORY, Kind.COPIES_DOTGIT})
_OUTCOMES = {Kind.TIMEOUT: "timeout", Kind.BUSY: "timeout", Kind.CANCELLED: "cancelled"}


class Failure(ToolError):
    """A failure as data: `kind`, and the `fields` its message needs."""

    # Turns a failure into the agent's text; tools/messages.py installs its table here.
    wording: ClassVar[Callable[[Failure], str] | None] = None

    def __init__(self, kind: Kind, **fields: Any) -> None:
        Exception.__init__(self, kind, fields)
        self.kind = kind
        self.fields = fields
        self.op: str | None = None

    @property
    def message(self) -> str:
        wording = Failure.wording
        return wording(self) if wording is not None else f"{self.kind}: {self.fields}"

    @property
    def outcome(self) -> str:
        return "denied" if self.kind in DENIALS else _OUTCOMES.get(self.kind, "error")


class PathError(Failure):
    """What `op` (a Root operation: open, mkdir, remove, ...) met at `path` (as the agent spelled it)."""

    def __init__(self, op: str, path: str, kind: Kind, **fields: Any) -> None:
        super().__init__(kind, path=path, **fields)
        self.op = op
        self.path = path
