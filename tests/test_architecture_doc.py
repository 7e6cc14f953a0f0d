"""docs/architecture.md names every module of the package: a module nobody wrote down is a room nobody knows."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SRC = REPO / "src" / "rootbound"
DOC = REPO / "docs" / "architecture.md"


def _named() -> set[str]:
    return set(re.findall(r"`([\w/]+\.py)`", DOC.read_text()))


def test_every_module_is_named_in_the_architecture_doc() -> None:
    modules = {m.relative_to(SRC).as_posix() for m in SRC.rglob("*.py")}
    # A package's __init__.py is named by its room's heading; the top level's is named as itself.
    unnamed = sorted(m for m in modules - _named() if not (m.endswith("/__init__.py")))
    assert unnamed == [], f"docs/architecture.md does not name: {', '.join(unnamed)}"


def test_the_doc_names_no_module_that_is_gone() -> None:
    gone = sorted(m for m in _named() if not m.startswith("tests/") and not (SRC / m).exists())
    assert gone == [], f"docs/architecture.md names modules that no longer exist: {', '.join(gone)}"
