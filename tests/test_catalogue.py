"""The tool catalogue (names and kinds) and the tool definitions agree, so whatever derives from it is right."""

from __future__ import annotations

import inspect

from rootbound.catalogue import CATALOGUE, COMMAND_TOOLS, FILE_TOOLS, SPILL_TOOLS, WRITING_TOOLS
from rootbound.config import Config
from rootbound.tools import all_tools


def _specs() -> dict[str, object]:
    config = Config.model_validate({"roots": [{"name": "w", "path": "/", "allowed_tools": ["*", "history", "undo"]}],
                                   "commands": {"allowed": "*"}})
    return {spec.name: spec for spec in all_tools(config)}


def test_every_tool_is_in_the_catalogue_once() -> None:
    names = [t.name for t in CATALOGUE]
    assert len(names) == len(set(names))
    assert set(_specs()) == set(names)


def test_the_specs_run_as_the_catalogue_says() -> None:
    specs = _specs()
    for tool in CATALOGUE:
        spec = specs[tool.name]
        assert inspect.iscoroutinefunction(spec.handler) == (tool.runs == "async"), tool.name  # type: ignore[attr-defined]
        assert (spec.work is not None) == (tool.runs == "by_arguments"), tool.name  # type: ignore[attr-defined]


def test_writing_tools_are_exactly_those_not_read_only() -> None:
    specs = _specs()
    for name in FILE_TOOLS:
        read_only = specs[name].annotations.read_only_hint  # type: ignore[attr-defined]
        assert bool(read_only) == (name not in WRITING_TOOLS), name
    assert set(SPILL_TOOLS) <= set(FILE_TOOLS) - WRITING_TOOLS  # the command-output root is read-only
    assert "execute_command" in COMMAND_TOOLS and not set(COMMAND_TOOLS) & set(FILE_TOOLS)


def test_config_and_list_roots_name_the_file_tools_in_the_seed_order() -> None:
    assert FILE_TOOLS[:3] == ("list_folder", "read_file", "write_file") and FILE_TOOLS[-2:] == ("grep", "glob")
