"""Placeholder: filled in by its issue."""

from __future__ import annotations

from rootbound.tools.base import ToolSpec

TOOLS: list[ToolSpec] = []
