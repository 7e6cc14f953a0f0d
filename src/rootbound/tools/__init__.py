"""The tool families. Each module exports `TOOLS`, a list of `ToolSpec`."""

from __future__ import annotations

from rootbound.config import Config
from rootbound.tools import commands, editing, reading, search, transfer, writing
from rootbound.tools.base import ToolSpec

__all__ = ["all_tools"]


def all_tools(config: Config) -> list[ToolSpec]:
    """Every tool this configuration exposes, in the order clients list them.

    The command tools are listed only when some command is allowed: an agent should
    not be shown a tool that can only refuse.
    """
    tools = [*reading.TOOLS, *writing.TOOLS, *editing.TOOLS, *transfer.TOOLS, *search.TOOLS]
    if config.commands.allowed:
        tools.extend(commands.TOOLS)
    return tools
