"""The tool families. Each module exports `TOOLS`, a list of `ToolSpec`.

Which tools a configuration exposes is decided from the catalogue alone (`exposed`), so that start-up can
name and count them without importing the tool modules and building their pydantic models (a good part of
start-up, which `initialize` does not need): `all_tools` imports them when the tools are first wanted.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rootbound.catalogue import CATALOGUE

if TYPE_CHECKING:
    from rootbound.config import Config
    from rootbound.tools.base import ToolSpec

__all__ = ["all_tools", "exposed"]


def exposed(config: Config) -> frozenset[str]:
    """The names of the tools this configuration exposes.

    The command tools are listed only when some command is allowed, the journal's only when the journal is on
    and a root names them: an agent should not be shown a tool that can only refuse.
    """
    named = {t for root in config.roots for t in root.allowed_tools}
    return frozenset(t.name for t in CATALOGUE if t.family in ("roots", "file")
                     or (t.family == "journal" and config.journal.enabled and t.name in named)
                     or (t.family == "command" and bool(config.commands.allowed)))


def all_tools(config: Config) -> list[ToolSpec]:
    """Every tool this configuration exposes, in the order clients list them."""
    from rootbound.tools import commands, editing, history, reading, search, transfer, writing

    names = exposed(config)
    families = (reading, writing, editing, transfer, search, history, commands)
    return [spec for family in families for spec in family.TOOLS if spec.name in names]
