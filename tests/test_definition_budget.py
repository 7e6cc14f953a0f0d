"""Tool definitions a model can afford (issue 15 item 2): every byte of `tools/list` is sent to the model on every
turn. The file tools (all but the command tools) must fit the budget, measured as a client receives them."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.conftest import CommandServers

pytestmark = pytest.mark.anyio

TOTAL_BUDGET = 14_000  # bytes of the file tools' definitions in tools/list
MODEL_BUDGET = 8_769  # name + description + inputSchema: the reference server's 7,972 + 10%
COMMAND_TOOLS = {"execute_command", "shell"}


def _size(value: Any) -> int:
    return len(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode("utf-8"))


async def _definitions(servers: CommandServers) -> list[dict[str, Any]]:
    h = await servers({"allowed": ["*"]})
    tools = (await h.client.list_tools()).tools
    assert {t.name for t in tools} >= COMMAND_TOOLS  # measured with every tool listed
    return [t.model_dump(mode="json", by_alias=True, exclude_none=True) for t in tools if t.name not in COMMAND_TOOLS]


async def test_the_file_tools_fit_the_budget(servers: CommandServers) -> None:
    defs = await _definitions(servers)
    total = sum(_size(d) for d in defs)
    model = sum(_size({k: d[k] for k in ("name", "description", "inputSchema")}) for d in defs)
    each = {d["name"]: _size(d) for d in defs}
    assert total <= TOTAL_BUDGET, f"tools/list of the file tools is {total:,} bytes (budget {TOTAL_BUDGET:,}): {each}"
    assert model <= MODEL_BUDGET, f"model-facing part is {model:,} bytes (budget {MODEL_BUDGET:,})"


async def test_root_is_described_once_briefly_and_never_required(servers: CommandServers) -> None:
    defs = await _definitions(servers)
    props = [d["inputSchema"]["properties"] for d in defs]
    texts = {json.dumps(p[name], sort_keys=True) for p in props for name in ("root", "source_root") if name in p}
    assert len(texts) == 1 and len(next(iter(texts))) < 80, texts
    for d in defs:
        assert "root" not in d["inputSchema"].get("required", []), d["name"]
        assert "title" not in json.dumps(d["inputSchema"]), d["name"]  # generated titles repeat the field names
