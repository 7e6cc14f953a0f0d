"""The errors each tool may answer with, for docs/tools.md.

MCP tool definitions carry no error list, so this catalogue is kept beside the tools;
`tests/test_docs.py` checks that every tool has an entry and that the fixed part of every
message below still occurs in the source, so the page cannot promise an error that is gone.
`…` stands for the variable parts.
"""

from __future__ import annotations

__all__ = ["COMMON_ERRORS", "TOOL_ERRORS"]

# What any tool taking `root` and a path may answer.
COMMON_ERRORS: tuple[str, ...] = (
    "unknown root: …",
    "tool … not allowed on root …",
    "invalid arguments for …: … is required",
    "path resolves outside root boundary",
    "file not found: …",
    "invalid path: contains a null byte",
    "too many levels of symbolic links: …",
    "permission denied: …",
    "root … is no longer available (its directory was removed or replaced); …",
)

TOOL_ERRORS: dict[str, tuple[str, ...]] = {
    "list_roots": (),
    "list_folder": ("not a directory: …",),
    "read_file": (
        "file too large for full read (size: …, limit: …); use offset/limit parameters",
        "byte and line parameters are mutually exclusive: …",
        "path is a directory, not a file: …",
        "not a regular file: … is a …",
    ),
    "stat_file": (),
    "hash_file": (
        "unsupported hash algorithm: …; supported: … (md5, sha1, sha256)",
        "path is a directory, not a file: …",
    ),
    "permissions_file": (),
    "write_file": (
        "file already exists: …; use overwrite mode to replace",
        "invalid mode: …; valid modes: … (overwrite, append, create_only)",
        "file changed since you last read it: … has sha256 …, not the expected …",
        "protected path: … matches the protected_paths rule …",
        "path is a directory, not a file: …",
    ),
    "remove_file": (
        "path is a directory, not a file: …; use remove_folder to remove a directory",
        "protected path: … matches the protected_paths rule …",
    ),
    "patch_file": (
        "patch failed: hunk … does not match at line … (expected …)",
        "file changed since you last read it: … has sha256 …, not the expected …",
        "the patch deletes the file (+++ /dev/null); use remove_file to remove a file",
        "protected path: … matches the protected_paths rule …",
    ),
    "create_folder": ("path exists and is …, not a directory: …",),
    "remove_folder": (
        "cannot remove root directory",
        "directory not found: …",
        "path is a file, not a directory: …; use remove_file to remove a file",
        "protected path: … matches the protected_paths rule …",
    ),
    "copy": (
        "source file not found: …",
        "cannot copy a folder into itself: … -> …",
        "destination already exists: …; copy does not merge folders - remove …",
        "protected path: … matches the protected_paths rule …",
    ),
    "move": (
        "source file not found: …",
        "cannot move root directory",
        "cannot move a folder into itself: … -> …",
        "cannot move … there: from its new place the link would lead outside the …",
        "protected path: … matches the protected_paths rule …",
    ),
    "grep": ("invalid pattern: …", "invalid glob_filter: …", "not a regular file or directory: …"),
    "glob": ("exactly one of pattern or regex must be provided", "invalid regex: …"),
    "execute_command": (
        "command not allowed: …. Allowed commands: …",
        "execute_command runs one program directly, without a shell, so the shell operator … cannot be …",
        "command not found: …. …",
        "cwd does not exist: …; nothing was run",
        "cwd not allowed: … is outside the allowed working directories …",
        "commands are refused: …. Nothing was run",
    ),
    "shell": (
        "command not allowed: …. Allowed commands: …",
        "cwd does not exist: …; nothing was run",
        "commands are refused: …. Nothing was run",
    ),
}
