"""The errors each tool may answer with, for docs/tools.md.

MCP tool definitions carry no error list, so this catalogue is kept beside the tools;
`tests/test_docs.py` checks that every tool has an entry and that the fixed part of every
message below still occurs in the source, so the page cannot promise an error that is gone.
`…` stands for the variable parts.
"""

from __future__ import annotations

__all__ = ["COMMON_ERRORS", "TOOL_ERRORS"]

# What any tool taking `root` and a path may answer.
# What every writing tool may answer besides its own: git's repository internals (`gitdirs.py`).
_GIT_ERRORS: tuple[str, ...] = (
    "protected path: … is inside a git directory…; the file tools never change a repository's internals (git "
    "commands do that)",
    "protected path: … is a git directory or file (.git); the file tools never create, change, remove or move one, "
    "nor anything inside it (git commands do that)",
    "protected path: … is inside a directory that git treats as a bare repository (…); the file tools never change a "
    "repository's internals",
    "protected path: … would make … a directory that git treats as a bare repository (…), whose config git would obey; "
    "the file tools never create a repository (git init does)",
)

COMMON_ERRORS: tuple[str, ...] = (
    "unknown root: …; roots: …",
    "tool … not allowed on root …",
    "invalid arguments for …: … is required",
    "path resolves outside root boundary",
    "file not found: …",
    "invalid path: contains a null byte",
    "too many levels of symbolic links: …",
    "permission denied: …",
    "… timed out after … s on …; it stopped and changed nothing. Try a smaller file or folder, or ask the "
    "operator to raise file_timeout (…)",
    "… timed out after … s on … waiting for a free worker: the server is busy with other long file operations; "
    "try again shortly",
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
        *_GIT_ERRORS,
    ),
    "patch_file": (
        "patch failed: hunk … does not match at line … (expected …, found …: …); … Its closest place is …",
        "patch failed: hunk … matches … places (lines …) and its header's line … is none of them",
        "patch failed: hunks … and … overlap at line … of the file; merge them into one hunk",
        "patch failed: hunk …'s anchor '@@ …' names no line of the file",
        "file changed since you last read it: … has sha256 …, not the expected …",
        "the patch deletes the file (+++ /dev/null or *** Delete File); use remove_file to remove a file",
        "protected path: … matches the protected_paths rule …",
        *_GIT_ERRORS,
    ),
    "create_folder": (
        "path exists and is …, not a directory: …",
        "protected path: … matches the protected_paths rule …",
        *_GIT_ERRORS,
    ),
    "edit_file": (
        "old_string was not found in …; nothing was changed … The closest text is at …, where it differs: …",
        "old_string matches … places in …, at lines …; nothing was changed",
        "old_string and new_string are the same; nothing to change",
        "old_string is empty, but … is not empty",
        "edit … of …: … (which of several edits failed; none was made)",
        "give either old_string and new_string (with replace_all), or edits, not both",
        "file changed since you last read it: … has sha256 …, not the expected …",
        "protected path: … matches the protected_paths rule …",
        "… is not UTF-8 text; edit_file changes text only",
        "path is a directory, not a file: …",
        *_GIT_ERRORS,
    ),
    "remove_folder": (
        "cannot remove root directory",
        "directory not found: …",
        "path is a file, not a directory: …; use remove_file to remove a file",
        "protected path: … matches the protected_paths rule …",
        *_GIT_ERRORS,
    ),
    "copy": (
        "source file not found: …",
        "cannot copy a folder into itself: … -> …",
        "destination already exists: …; copy does not merge folders - remove …",
        "protected path: … is a git directory or file (.git): copying it would create a repository; copy the folder "
        "without it, or use git clone",
        "protected path: … matches the protected_paths rule …",
        *_GIT_ERRORS,
    ),
    "move": (
        "source file not found: …",
        "cannot move root directory",
        "cannot move a folder into itself: … -> …",
        "cannot move … there: from its new place the link would lead outside the …",
        "protected path: … matches the protected_paths rule …",
        *_GIT_ERRORS,
    ),
    "grep": ("invalid pattern: …", "invalid glob_filter: …", "not a regular file or directory: …"),
    "glob": ("exactly one of pattern or regex must be provided", "invalid pattern: …", "invalid regex: …"),
    "execute_command": (
        "command not allowed: …. Allowed commands: …",
        "execute_command runs one program directly, without a shell, so the shell operator … cannot be …",
        "command not found: …. …",
        "cwd does not exist: …; nothing was run",
        "cwd not allowed: … is outside the allowed working directories …",
        "commands are refused: …. Nothing was run",
        "commands are refused: … is a symbolic link where a protected … must be …. Nothing was run",
    ),
    "shell": (
        "command not allowed: …. Allowed commands: …",
        "cwd does not exist: …; nothing was run",
        "commands are refused: …. Nothing was run",
        "commands are refused: … is a symbolic link where a protected … must be …. Nothing was run",
    ),
}
