"""Writes the edit corpus: `cases/*.yaml` and `expected/*` from the specs below (run it after changing them).

Each case is one realistic change to one of the files in `files/` (Python, JavaScript, Go; CRLF, unicode,
no final newline, trailing whitespace, empty). Its `intent` is the change as exact (old, new) pairs; the
expected file is the intent applied with `str.replace` (an oracle independent of rootbound). The attempts
are that change as a model sends it: to edit_file (old_string/new_string or edits) and to patch_file (a
unified diff in one of the styles models write, and for some a `*** Begin Patch` envelope), each with the
mistakes models make — indentation drift, tabs for spaces, trailing whitespace, an omitted or changed line,
wrong line numbers, hunks out of order, text that occurs twice. Each attempt declares the right outcome:
`applied` (the file must then equal the expected file) or `refused` (unchanged, the error naming the
closest place or the ambiguity). The diffs start from difflib's output and get the style and mistakes by
the small, visible transforms below, so every one of them can be read in `cases/`.

    python tests/edit_corpus/build.py
"""

from __future__ import annotations

import difflib
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).resolve().parent
ANCHOR = re.compile(r"^\s*(def |class |func |function |async function |app\.\w+\(|[A-Z_]+ = \{)")


@dataclass
class Case:
    name: str
    source: str
    intent: list[tuple[str, str]]  # exact (old, new), applied in order; each old occurs once...
    tags: list[str]
    occurrence: dict[int, int] = field(default_factory=dict)  # ...unless this names which one is meant (-1: all)
    edit: dict[str, Any] | None = None  # edit_file arguments when they are not simply the intent
    edit_flaw: str | None = None
    edit_outcome: str = "applied"
    edit_mentions: list[str] = field(default_factory=list)
    diff_style: str = "git"
    diff_flaw: str | None = None
    diff_context: int = 3
    diff: str | None = None  # a hand-written diff instead of the generated one
    diff_outcome: str = "applied"
    diff_mentions: list[str] = field(default_factory=list)
    envelope: bool | str = False  # True: generate one; str: hand-written
    envelope_outcome: str = "applied"
    envelope_mentions: list[str] = field(default_factory=list)
    target: str | None = None  # the path the tools are called with, when not the source's name


# -- the oracle -------------------------------------------------------------------------------------------


def replace_nth(text: str, old: str, new: str, nth: int | None) -> str:
    count = text.count(old)
    if nth == -1:  # every one, as replace_all
        assert count >= 1, old
        return text.replace(old, new)
    if nth is None:
        assert count == 1, f"intent text occurs {count} times: {old!r}"
        return text.replace(old, new)
    at = -1
    for _ in range(nth + 1):
        at = text.index(old, at + 1)
    return text[:at] + new + text[at + len(old):]


def expected(case: Case, source: str) -> str:
    crlf = "\r\n" in source
    text = source.replace("\r\n", "\n")
    for n, (old, new) in enumerate(case.intent):
        text = replace_nth(text, old, new, case.occurrence.get(n))
    return text.replace("\n", "\r\n") if crlf else text


# -- edit_file attempts ------------------------------------------------------------------------------------


def flawed(text: str, flaw: str | None) -> str:
    """The text as a model with this slip would write it."""
    if flaw is None:
        return text
    kind, _, arg = flaw.partition(":")
    lines = text.split("\n")
    if kind == "drift":  # every line indented by `arg` more spaces (negative: fewer)
        delta = int(arg)
        out = []
        for ln in lines:
            lead = len(ln) - len(ln.lstrip(" "))
            out.append(ln if not ln.strip() else " " * max(lead + delta, 0) + ln.lstrip(" "))
        return "\n".join(out)
    if kind == "tabs":  # leading tabs written as four spaces
        return "\n".join(re.sub(r"^\t+", lambda m: "    " * len(m.group()), ln) for ln in lines)
    if kind == "omit":  # line `arg` (0-based) left out
        del lines[int(arg)]
        return "\n".join(lines)
    if kind == "token":  # a word misremembered: "a>b"
        a, b = arg.split(">")
        assert a in text, (a, text)
        return text.replace(a, b, 1)
    if kind == "strip":  # trailing whitespace dropped
        return "\n".join(ln.rstrip() for ln in lines)
    raise ValueError(flaw)


def edit_args(case: Case) -> dict[str, Any]:
    if case.edit is not None:
        return case.edit
    pairs = [{"old_string": flawed(old, case.edit_flaw),
              "new_string": flawed(new, case.edit_flaw if case.edit_flaw and case.edit_flaw.startswith(
                  ("drift", "tabs")) else None)}
             for old, new in case.intent]
    return pairs[0] if len(pairs) == 1 else {"edits": pairs}


# -- patch_file attempts ----------------------------------------------------------------------------------


def hunks(before: str, after: str, context: int) -> list[list[str]]:
    """difflib's unified diff as hunks: header line, then body lines (without line ends)."""
    a = [ln if ln.endswith("\n") else ln + "\n" for ln in before.splitlines(keepends=True)]
    b = [ln if ln.endswith("\n") else ln + "\n" for ln in after.splitlines(keepends=True)]
    out: list[list[str]] = []
    for line in list(difflib.unified_diff(a, b, n=context))[2:]:
        line = line.rstrip("\n")
        if line.startswith("@@"):
            out.append([line])
        else:
            out[-1].append(line)
    return out


def flaw_hunk(hunk: list[str], flaw: str | None) -> list[str]:
    if flaw is None:
        return hunk
    head, body = hunk[0], hunk[1:]
    kind, _, arg = flaw.partition(":")
    if kind in ("drift", "tabs"):
        return [head, *(ln[0] + flawed(ln[1:], flaw) for ln in body)]
    if kind == "omit":  # the context line `arg` (0-based among context lines) left out
        ctx = [i for i, ln in enumerate(body) if ln.startswith(" ")]
        del body[ctx[int(arg)]]
        return [head, *body]
    if kind == "token":
        a, b = arg.split(">")
        for i, ln in enumerate(body):
            if ln[0] in " -" and a in ln:
                body[i] = ln.replace(a, b, 1)
                return [head, *body]
        raise ValueError(f"{a!r} not in the hunk")
    if kind == "strip":  # models drop trailing whitespace: of context lines ("strip:ctx") or of all ("strip:all")
        kinds = " " if arg == "ctx" else " -"
        return [head, *(ln.rstrip() if ln[0] in kinds else ln for ln in body)]
    raise ValueError(flaw)


def shift(head: str, by: int) -> str:
    m = re.match(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@", head)
    assert m
    old, new = max(int(m.group(1)) + by, 1), max(int(m.group(3)) + by, 1)
    return f"@@ -{old},{m.group(2) or 1} +{new},{m.group(4) or 1} @@"


def unified(case: Case, before: str, after: str) -> str:
    name = case.target or case.source
    parts = [flaw_hunk(h, case.diff_flaw) for h in hunks(before, after, case.diff_context)]
    style = case.diff_style
    if "reversed" in style:
        parts.reverse()
    if "wrong" in style:  # the header numbers models guess: off by some lines, counts not fixed
        by = int(re.search(r"wrong([+-]\d+)", style).group(1))  # type: ignore[union-attr]
        parts = [[shift(h[0], by), *h[1:]] for h in parts]
    if "bare" in style:
        parts = [["@@", *h[1:]] for h in parts]
    if "blank" in style:  # blank context lines that lost their leading space
        parts = [[h[0], *("" if ln == " " else ln for ln in h[1:])] for h in parts]
    body = "\n".join("\n".join(h) for h in parts) + "\n"
    if "noheaders" in style or "bare" in style:
        return body
    head = f"--- a/{name}\n+++ b/{name}\n" if "plain" not in style else f"--- {name}\n+++ {name}\n"
    if "git" in style:
        head = f"diff --git a/{name} b/{name}\nindex 4e1c2a9..7f3b0d2 100644\n" + head
    text = head + body
    if "fenced" in style:
        text = f"Here is the change:\n\n```diff\n{text}```\n"
    return text


def envelope(case: Case, before: str, after: str) -> str:
    """OpenAI's apply_patch format: each hunk under `@@ <the def, func or block it is in>`, else a bare `@@`."""
    lines = before.split("\n")
    out = ["*** Begin Patch", f"*** Update File: {case.target or case.source}"]
    for h in hunks(before, after, 3):
        pos = int(re.match(r"^@@ -(\d+)", h[0]).group(1)) - 1  # type: ignore[union-attr]
        for ln in h[1:]:
            if ln[:1] in "-+":
                break
            pos += 1
        first = next(ln[1:] for ln in h[1:] if ln[:1] in "-+")
        depth = len(first) - len(first.lstrip())
        anchor = ""
        for i in range(pos - 1, -1, -1):  # the nearest line above that is indented less: the enclosing block
            text = lines[i]
            if text.strip() and len(text) - len(text.lstrip()) < depth:
                anchor = text.strip() if ANCHOR.match(text) else ""
                break
        out.append(f"@@ {anchor}" if anchor else "@@")
        out.extend(flaw_hunk(h, case.diff_flaw)[1:])
    out.append("*** End Patch")
    return "\n".join(out) + "\n"


# -- writing the corpus -----------------------------------------------------------------------------------


def _literal(dumper: yaml.Dumper, text: str) -> yaml.ScalarNode:
    clean = "\n" in text and not re.search(r"[ \t]\n|[ \t]$|\r|^\s", text)
    style = "|" if clean else '"' if re.search(r"[\n\t]|\s$", text) else None  # whitespace shown, not folded
    return dumper.represent_scalar("tag:yaml.org,2002:str", text, style=style)


def main() -> None:
    from specs import CASES  # type: ignore[import-not-found]  # beside this file

    yaml.add_representer(str, _literal)
    for sub in ("cases", "expected"):
        shutil.rmtree(HERE / sub, ignore_errors=True)
        (HERE / sub).mkdir()
    names = set()
    for n, case in enumerate(CASES, 1):
        assert case.name not in names, case.name
        names.add(case.name)
        source = (HERE / "files" / case.source).read_bytes().decode() if case.source != "-" else ""
        after = expected(case, source)
        lf_before, lf_after = source.replace("\r\n", "\n"), after.replace("\r\n", "\n")
        stem = f"{n:03d}-{case.name}"
        suffix = Path(case.target or case.source).suffix
        (HERE / "expected" / f"{stem}{suffix}").write_bytes(after.encode())
        attempts: list[dict[str, Any]] = [{
            "tool": "edit_file", "arguments": edit_args(case), "outcome": case.edit_outcome,
            **({"mentions": case.edit_mentions} if case.edit_mentions else {})}]
        diff = case.diff if case.diff is not None else unified(case, lf_before, lf_after)
        attempts.append({"tool": "patch_file", "style": case.diff_style + (f", {case.diff_flaw}" if case.diff_flaw
                                                                          else ""),
                         "arguments": {"patch": diff}, "outcome": case.diff_outcome,
                         **({"mentions": case.diff_mentions} if case.diff_mentions else {})})
        if case.envelope:
            text = case.envelope if isinstance(case.envelope, str) else envelope(case, lf_before, lf_after)
            attempts.append({"tool": "patch_file", "style": "begin-patch", "arguments": {"patch": text},
                             "outcome": case.envelope_outcome,
                             **({"mentions": case.envelope_mentions} if case.envelope_mentions else {})})
        doc = {"name": case.name, "tags": case.tags, "file": case.source, "path": case.target or case.source,
               "expected": f"{stem}{suffix}", "intent": [{"old": o, "new": w} for o, w in case.intent],
               "attempts": attempts}
        text = yaml.dump(doc, sort_keys=False, allow_unicode=True, width=1000)
        assert yaml.safe_load(text) == doc, case.name
        (HERE / "cases" / f"{stem}.yaml").write_text(text)
    print(f"{len(CASES)} cases")


if __name__ == "__main__":
    import sys

    sys.path.insert(0, str(HERE))
    main()
