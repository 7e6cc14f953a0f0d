"""The tool families. Each module exports `TOOLS`, a list of `ToolSpec`."""

from __future__ import annotations

from rootbound.config import Config
from rootbound.tools import commands, editing, history, reading, search, transfer, writing
from rootbound.tools.base import ToolSpec

__all__ = ["all_tools"]


def all_tools(config: Config) -> list[ToolSpec]:
    """Every tool this configuration exposes, in the order clients list them.

    The command tools are listed only when some command is allowed, the journal's only when a root names
    them: an agent should not be shown a tool that can only refuse.
    """
    tools = [*reading.TOOLS, *writing.TOOLS, *editing.TOOLS, *transfer.TOOLS, *search.TOOLS]
    # history and undo: listed only when the journal is on and some root allows them.
    named = {t for root in config.roots for t in root.allowed_tools}
    if config.journal.enabled:
        tools.extend(spec for spec in history.TOOLS if spec.name in named)
    if config.commands.allowed:
        tools.extend(commands.TOOLS)
    return tools
