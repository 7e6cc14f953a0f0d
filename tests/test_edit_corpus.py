"""The edit corpus (tests/edit_corpus, see build.py) through the real tools over MCP: every attempt must end as
its case says (applied, giving the expected file byte for byte, or refused, leaving the file unchanged and the
error naming what it says), and no attempt may ever apply in the wrong place. The success and wrong-place
rates of edit_file and patch_file are printed with the test's result."""

from __future__ import annotations

import shutil
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import Harness, text_of

pytestmark = pytest.mark.anyio

CORPUS = Path(__file__).resolve().parent / "edit_corpus"
CASES = [yaml.safe_load(p.read_text()) for p in sorted((CORPUS / "cases").glob("*.yaml"))]


@dataclass
class Outcome:
    case: str
    tool: str
    style: str
    expected: str  # "applied" or "refused"
    applied: bool
    right: bool  # applied and the file is exactly the expected one
    problem: str | None  # why the outcome differs from the case's, if it does


def test_the_corpus_is_large_and_covers_every_kind() -> None:
    assert len(CASES) >= 60
    tags = Counter(t for c in CASES for t in c["tags"])
    for kind in ("indentation-drift", "trailing-whitespace", "tabs-vs-spaces", "omitted-context-line",
                 "wrong-line-numbers", "out-of-order-hunks", "ambiguous", "crlf", "unicode", "empty-file",
                 "end-of-file-without-newline", "changed-token", "multi-edit", "replace-all", "begin-patch"):
        assert tags[kind] >= 2, kind
    for case in CASES:
        tools = [a["tool"] for a in case["attempts"]]
        assert "edit_file" in tools and "patch_file" in tools, case["name"]
    assert sum(1 for c in CASES for a in c["attempts"] if a.get("style") == "begin-patch") >= 10


async def run(server: Harness, workspace: Path, case: dict[str, Any], attempt: dict[str, Any]) -> Outcome:
    for entry in workspace.iterdir():
        shutil.rmtree(entry) if entry.is_dir() else entry.unlink()
    target = workspace / case["path"]
    before = None
    if case["file"] != "-":
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(CORPUS / "files" / case["file"], target)
        before = target.read_bytes()
    result = await server.call(attempt["tool"], root="workspace", path=case["path"], **attempt["arguments"])
    now = target.read_bytes() if target.exists() else None
    wanted = (CORPUS / "expected" / case["expected"]).read_bytes()
    applied = not result.is_error
    outcome = Outcome(case["name"], attempt["tool"], attempt.get("style", ""), attempt["outcome"], applied,
                      applied and now == wanted, None)
    message = text_of(result)
    if applied != (attempt["outcome"] == "applied"):
        outcome.problem = f"{'applied' if applied else 'refused'}, not {attempt['outcome']}: {message[:400]}"
    elif applied and now != wanted:
        outcome.problem = f"applied, but the file differs from {case['expected']}: {now!r}"
    elif not applied and now != before:
        outcome.problem = "refused, but the file changed"
    else:
        missing = [m for m in attempt.get("mentions", []) if m not in message]
        if missing:
            outcome.problem = f"the error does not say {missing}: {message}"
    return outcome


def summary(outcomes: list[Outcome], tool: str) -> str:
    mine = [o for o in outcomes if o.tool == tool]
    n = len(mine)
    right = sum(o.right for o in mine)
    wrong_place = sum(o.applied and not o.right for o in mine)
    should = [o for o in mine if o.expected == "applied"]
    refused = [o for o in mine if not o.applied]
    return (f"{tool}: {n} attempts, success {right}/{n} = {right / n:.0%} (of the {len(should)} that should apply: "
            f"{sum(o.right for o in should) / max(len(should), 1):.0%}), refused {len(refused)}, wrong place "
            f"{wrong_place}/{n} = {wrong_place / n:.0%}, outcome as the case says "
            f"{sum(o.problem is None for o in mine) / n:.0%}")


async def test_every_attempt_ends_as_its_case_says_and_none_applies_in_the_wrong_place(
        server: Harness, workspace: Path, capsys: pytest.CaptureFixture[str]) -> None:
    outcomes = [await run(server, workspace, case, attempt) for case in CASES for attempt in case["attempts"]]
    wrong = [o for o in outcomes if o.applied and not o.right]
    with capsys.disabled():
        print(f"\nedit corpus, {len(CASES)} cases:", *(summary(outcomes, t) for t in ("edit_file", "patch_file")),
              sep="\n  ")
    problems = [f"{o.case} / {o.tool} {o.style}: {o.problem}" for o in outcomes if o.problem]
    assert not wrong, f"applied in the wrong place: {[(o.case, o.tool, o.style) for o in wrong]}"
    assert not problems, "\n".join(problems)
