"""The tool families. Each module exports `TOOLS`, a list of `ToolSpec`."""

from __future__ import annotations

from rootbound.config import Config
from rootbound.tools import reading
from rootbound.tools.base import ToolSpec

__all__ = ["all_tools"]


def all_tools(config: Config) -> list[ToolSpec]:
    """Every tool this configuration exposes, in the order clients list them."""
    return [*reading.TOOLS]
