"""Glob patterns (glob's `pattern`, grep's `glob_filter`) turned into compiled regexes, once per call.

Doublestar semantics, as the seed's Go library has them: `**` crosses directories, `{a,b}`
alternates, and `*` matches names starting with a dot. wcmatch translates; calling the
compiled regex directly skips its per-call wrapper layers, which cost more than the match
itself when every entry of a big tree is tested.

A pattern longer than MAX_LENGTH is refused before wcmatch sees it: its brace expansion
(bracex) took over 25 s on a 10 MB pattern, holding a worker thread; no path is longer
than 4096 bytes, so a real glob is nowhere near the limit. Braces that expand to more
than MAX_EXPANSIONS patterns are refused too.
"""

from __future__ import annotations

import re
from typing import Final

from rootbound.grep.scanner import PatternError

__all__ = ["MAX_LENGTH", "name_regex", "path_regex"]

MAX_LENGTH: Final = 10_000
MAX_EXPANSIONS: Final = 1000  # patterns the braces may expand to (wcmatch's own default)


def _compile(glob: str, *, names: bool) -> re.Pattern[str]:
    if len(glob) > MAX_LENGTH:
        raise PatternError(f"{len(glob)} characters is too long for a glob (at most {MAX_LENGTH}); shorten it")
    from wcmatch import fnmatch as wc_fnmatch  # loaded by the first glob: a server that never globs does not pay
    from wcmatch import glob as wc_glob

    try:
        if names:
            flags = wc_fnmatch.BRACE | wc_fnmatch.DOTMATCH
            include, _ = wc_fnmatch.translate(glob, flags=flags, limit=MAX_EXPANSIONS)
        else:
            flags = wc_glob.GLOBSTAR | wc_glob.BRACE | wc_glob.DOTGLOB
            include, _ = wc_glob.translate(glob, flags=flags, limit=MAX_EXPANSIONS)
        # wcmatch ends each part with "$", which also matches before a last newline: "*.py" took "x.py\n".
        return re.compile("(?:" + "|".join(f"(?:{part})" for part in include) + r")\Z")
    except (ValueError, TypeError, re.error) as exc:
        raise PatternError(str(exc)) from None
    except Exception as exc:  # wcmatch's PatternLimitException, which it does not export (it was an internal error)
        if type(exc).__name__ != "PatternLimitException":
            raise
        raise PatternError(f"its {{a,b}} alternatives expand to more than {MAX_EXPANSIONS} patterns; use fewer") \
            from None


def path_regex(glob: str) -> re.Pattern[str]:
    """The regex that matches the `/`-separated relative paths `glob` does (a leading "./" is ignored)."""
    return _compile(glob.removeprefix("./"), names=False)


def name_regex(glob: str) -> re.Pattern[str]:
    """The regex that matches the file names `glob` does."""
    return _compile(glob, names=True)
