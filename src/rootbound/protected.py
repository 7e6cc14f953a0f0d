"""Protected paths: files the file tools never write, patch, remove or move onto.

They are the files that turn a file write into code execution or a changed agent
setup: git hooks and config, `.mcp.json`, shell start-up files (the defaults in
`config.DEFAULT_PROTECTED_PATHS`; the operator changes the list with the
`protected_paths` key).

Rules are root-relative globs: `*` and `?` stay within one path component, `**`
spans any number of components, `[...]` is a character class. A rule matches at
any depth (`.git/config` also protects `vendor/lib/.git/config`, since a root often
holds several repositories) unless it starts with `/`, which anchors it at the
root. `dir/**` protects the directory itself and everything below it. Matching
ignores case, because on a case-insensitive filesystem `.GIT/config` is `.git/config`.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence

__all__ = ["Matcher", "matcher"]


def _component(glob: str) -> str:
    out, i = [], 0
    while i < len(glob):
        c = glob[i]
        if c == "*":
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif c == "[" and (end := glob.find("]", i + 2)) > 0:
            body = glob[i + 1:end]
            if body[0] in "!^":
                body = "^" + body[1:]
            out.append("[" + body.replace("\\", "\\\\").replace("/", "") + "]")
            i = end
        else:
            out.append(re.escape(c))
        i += 1
    return "".join(out)


def _translate(rule: str) -> str:
    anchored = rule.startswith("/")
    comps = [c for c in rule.strip("/").split("/") if c not in ("", ".")]
    regex = ""
    after_globstar = True  # no separator needed before the first component
    for n, comp in enumerate(comps):
        last = n == len(comps) - 1
        if comp == "**":
            if last:
                regex += "(?:/.*)?" if regex else ".*"
            else:
                regex += "(?:[^/]+/)*" if not regex else "/(?:[^/]+/)*"
            after_globstar = True
            continue
        regex += ("" if after_globstar else "/") + _component(comp)
        after_globstar = False
    return regex if anchored else "(?:[^/]+/)*" + regex


class Matcher:
    """The compiled rules; `rule_for(path)` names the first rule that protects `path`."""

    def __init__(self, rules: Sequence[str]) -> None:
        self.rules = [r for r in rules if r.strip("/")]
        self._compiled = [re.compile(_translate(r), re.IGNORECASE | re.DOTALL) for r in self.rules]

    def __bool__(self) -> bool:
        return bool(self.rules)

    def rule_for(self, path: str) -> str | None:
        """`path` is root-relative with "/" separators, no leading "/"."""
        for rule, regex in zip(self.rules, self._compiled, strict=True):
            if regex.fullmatch(path):
                return rule
        return None


@functools.lru_cache(maxsize=8)
def _cached(rules: tuple[str, ...]) -> Matcher:
    return Matcher(rules)


def matcher(rules: Sequence[str]) -> Matcher:
    """The compiled form of a configuration's `protected_paths` (compiled once per distinct list)."""
    return _cached(tuple(rules))
