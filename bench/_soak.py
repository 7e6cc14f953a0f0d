"""Shared by the soak passes: one pass's score."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Score:
    name: str
    attempts: int = 0
    failures: int = 0
    notes: list[str] = field(default_factory=list)
