"""`python -m rootbound`: the same as the `rootbound` command."""

import os
import sys

import rootbound

# `-m` put the working directory first on the import path, and it is often a root: nothing imported from here on
# may come from there (only os and sys are loaded so far). The start-up check is told, because the *next*
# `python -m rootbound` started there would import from it before any of our code runs.
_cwd = os.getcwd()
_kept = [p for p in sys.path if p not in ("", ".") and os.path.abspath(p) != _cwd]
if len(_kept) != len(sys.path):
    sys.path[:] = _kept
    rootbound._cwd_on_import_path = _cwd  # type: ignore[attr-defined]

from rootbound.cli import main  # noqa: E402

raise SystemExit(main())
