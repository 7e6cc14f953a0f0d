"""The tool catalogue: every tool's name and what kind of tool it is, and nothing else.

The tool modules (`tools/`) build the definitions; this list only names them, so that
everything that must agree on the names derives from one place without importing the
tools: the names an operator may put in `allowed_tools` (`config.py`), the tools that
make a root writable for commands (`sandbox/layout.py`), the read-only tools served on
the `command-output` root (`execution/spill.py`), where a call runs (`tools/base.py`)
and each tool's error list (`tools/messages.py`). `tests/test_catalogue.py` checks
that the `ToolSpec`s agree with it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal

__all__ = ["CATALOGUE", "COMMAND_TOOLS", "FILE_TOOLS", "JOURNAL_TOOLS", "ON_LOOP", "RUNS", "SPILL_TOOLS",
           "WRITING_TOOLS", "Runs", "Tool"]

# Where a call runs (see tools/base.py):
# inline       - no blocking work at all: on the event loop, no thread hop;
# quick        - a few system calls on one file or folder (stat, a bounded read, a write);
# heavy        - work that grows with a file's or a tree's size (hash, copy, grep, line scans);
# by_arguments - quick or heavy, as the call's arguments say (read_file: a line scan is heavy);
# async        - a coroutine that awaits its own work (the command tools).
Runs = Literal["inline", "quick", "heavy", "by_arguments", "async"]


@dataclass(frozen=True)
class Tool:
    name: str
    family: Literal["roots", "file", "command", "journal"]
    runs: Runs
    writes: bool = False  # changes files: a root that allows it is writable for commands too
    spill: bool = False  # served on the read-only `command-output` root
    # Read-only and quick: tried on the event loop first, run in a worker only when the core cannot vouch that it
    # stays quick there (fs/onloop.py: a remote filesystem, a mount point on the way, a big file).
    on_loop: bool = False


CATALOGUE: Final[tuple[Tool, ...]] = (
    Tool("list_roots", "roots", "inline"),
    # The file tools, in seed 003's order (the order list_roots and error messages name them in).
    Tool("list_folder", "file", "quick", spill=True),
    Tool("read_file", "file", "by_arguments", spill=True, on_loop=True),
    Tool("write_file", "file", "quick", writes=True),
    Tool("remove_file", "file", "quick", writes=True),
    Tool("patch_file", "file", "quick", writes=True),
    Tool("edit_file", "file", "quick", writes=True),
    Tool("create_folder", "file", "quick", writes=True),
    Tool("remove_folder", "file", "heavy", writes=True),
    Tool("stat_file", "file", "quick", spill=True, on_loop=True),
    Tool("hash_file", "file", "heavy", spill=True),
    Tool("permissions_file", "file", "quick"),
    Tool("copy", "file", "heavy", writes=True),
    Tool("move", "file", "heavy", writes=True),
    Tool("grep", "file", "heavy", spill=True),
    Tool("glob", "file", "heavy", spill=True),
    # The change journal's tools: an agent's own connection's changes, listed or reverted. Off unless a root's
    # allowed_tools names them ("*" does not: they are not file tools).
    Tool("history", "journal", "quick"),
    Tool("undo", "journal", "quick", writes=True),
    Tool("execute_command", "command", "async"),
    Tool("shell", "command", "async"),
)

# Seed 003 §7.2: the names an operator may put in `allowed_tools`.
FILE_TOOLS: Final = tuple(t.name for t in CATALOGUE if t.family == "file")
WRITING_TOOLS: Final = frozenset(t.name for t in CATALOGUE if t.writes)
SPILL_TOOLS: Final = tuple(t.name for t in CATALOGUE if t.spill)
COMMAND_TOOLS: Final = tuple(t.name for t in CATALOGUE if t.family == "command")
JOURNAL_TOOLS: Final = tuple(t.name for t in CATALOGUE if t.family == "journal")
RUNS: Final = {t.name: t.runs for t in CATALOGUE}
ON_LOOP: Final = frozenset(t.name for t in CATALOGUE if t.on_loop)
