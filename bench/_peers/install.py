"""Installing the peer servers into the benchmark's cache folder: npm packages each under their own prefix,
PyPI packages each in their own venv. A second run reuses what the first installed."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

INSTALL_TIMEOUT = 900  # seconds; Desktop Commander pulls ~700 npm packages


class Unavailable(Exception):
    """A peer that cannot be installed or started here; the message says why."""


def _run(argv: list[str], what: str) -> None:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=INSTALL_TIMEOUT, check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise Unavailable(f"{what} failed: {e}") from e
    if done.returncode != 0:
        lines = [line for line in (done.stderr or done.stdout).splitlines() if line.strip()]
        raise Unavailable(f"{what} failed (exit {done.returncode}): {' / '.join(lines[-3:])[:400]}")


def node() -> str:
    found = shutil.which("node")
    if not found:
        raise Unavailable("node not found on PATH (install Node.js 18 or newer)")
    return found


def npm_package(cache: Path, package: str, version: str) -> Path:
    """The installed package's folder, installing `package@version` first if needed.

    Install scripts are skipped: the only ones in these trees are Desktop Commander's install tracker (it reports
    the install to its vendor) and native builds the benchmark never calls; ripgrep comes as a prebuilt
    platform package."""
    prefix = cache / "npm" / f"{package.replace('/', '+').lstrip('@')}-{version}"
    folder = prefix / "node_modules" / package
    manifest = folder / "package.json"
    if manifest.exists() and json.loads(manifest.read_text()).get("version") == version:
        return folder
    npm = shutil.which("npm")
    if not npm:
        raise Unavailable("npm not found on PATH")
    prefix.mkdir(parents=True, exist_ok=True)
    print(f"  installing {package}@{version} with npm into {prefix} ...", flush=True)
    _run([npm, "install", "--prefix", str(prefix), "--ignore-scripts", "--no-audit", "--no-fund",
          "--loglevel=error", f"{package}@{version}"], f"npm install {package}@{version}")
    if not manifest.exists():
        raise Unavailable(f"npm install {package}@{version} left no {manifest}")
    return folder


def npm_bin(folder: Path, name: str) -> list[str]:
    """argv that runs the package's `name` executable with node directly (no shebang or shim in between)."""
    bins = json.loads((folder / "package.json").read_text()).get("bin", {})
    script = bins.get(name) if isinstance(bins, dict) else bins
    if not script:
        raise Unavailable(f"{folder.name} has no executable {name!r}")
    return [node(), str(folder / script)]


def pip_package(cache: Path, dist: str, version: str, script: str) -> Path:
    """Path of `script` from `dist==version`, installed in a venv of its own (its dependencies, e.g. an older
    `mcp`, must not meet rootbound's)."""
    venv = cache / "venv" / f"{dist}-{version}"
    exe, marker = venv / "bin" / script, venv / ".installed"
    if marker.exists() and exe.exists():
        return exe
    print(f"  installing {dist}=={version} with pip into {venv} ...", flush=True)
    _run([sys.executable, "-m", "venv", "--clear", str(venv)], f"python -m venv {venv}")
    _run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check",
          f"{dist}=={version}"], f"pip install {dist}=={version}")
    if not exe.exists():
        raise Unavailable(f"pip install {dist}=={version} installed no {script!r} script")
    marker.touch()
    return exe
