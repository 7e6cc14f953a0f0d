"""The packages' import graph: no cycle between rootbound's rooms, and the sandbox depends on execution's launch
interface only.

Read from the source (every `import`, at any depth, TYPE_CHECKING ones included: a type-only import is still a
dependency of the design), at package level: `rootbound.grep.scanner` counts as `grep`, a flat module as itself.
Until the filesystem core is a package (`rootbound/fs/`), its flat modules count as one room `fs`, so the test
reads the same before and after that move.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import rootbound

PACKAGE = Path(rootbound.__file__).parent

# The filesystem core's modules while they are still flat (issue 14 moves them into rootbound/fs/).
_FS_CORE = frozenset({"beneath", "roots", "fsops", "bounds", "recovery", "walking", "protected", "gitdirs"})

# Imports that close a cycle today, in rooms this test's author does not own; each names why and what removes it.
# An entry whose importing module no longer exists simply stops applying.
_ALLOWED = {
    # recovery.py stops the processes of commands a killed server left, with execution.groups.sweep_ids: the fs
    # core reaching up into execution. Gone with the fs/ room (branch fs-core: recovery.start takes the sweep
    # function from the App).
    ("rootbound.recovery", "rootbound.execution.groups"),
    # config.py validates the journal's durations with journal.settings, while journal/cli.py loads the config:
    # the journal's CLI lives in the package whose settings the config needs. Owner: the journal.
    ("rootbound.config", "rootbound.journal.settings"),
}


def _existing_rooms() -> set[str]:
    rooms = {p.stem for p in PACKAGE.glob("*.py") if p.stem != "__init__"}
    rooms |= {p.parent.name for p in PACKAGE.glob("*/__init__.py")}
    return rooms


def _room(module: str, rooms: set[str]) -> str | None:
    """The node a dotted name belongs to: its package, or the flat module; None for `rootbound` itself or a name
    defined in it (`from rootbound import __version__`)."""
    parts = module.split(".")
    if parts[0] != "rootbound" or len(parts) == 1 or parts[1] not in rooms:
        return None
    if parts[1] in _FS_CORE and "fs" not in rooms:
        return "fs"
    return parts[1]


def _modules() -> Iterator[tuple[str, Path]]:
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        yield ".".join(parts), path


def _imports(module: str, path: Path) -> Iterator[str]:
    """Every dotted name `module` imports (`from rootbound.x import y` yields rootbound.x and rootbound.x.y: y is a
    module or a name in rootbound.x, in the same room either way)."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: resolve against this module's package
                anchor = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            yield base
            for alias in node.names:
                yield f"{base}.{alias.name}"


def _allowed(module: str, name: str) -> bool:
    return any(module == m and (name == t or name.startswith(t + ".")) for m, t in _ALLOWED)


def _graph() -> dict[str, set[str]]:
    rooms = _existing_rooms()
    edges: dict[str, set[str]] = {}
    for module, path in _modules():
        room = _room(module, rooms)
        if room is None:
            continue
        targets = edges.setdefault(room, set())
        for name in _imports(module, path):
            other = _room(name, rooms)
            if other is not None and other != room and not _allowed(module, name):
                targets.add(other)
    return edges


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one room (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in sorted(edges.get(node, ())):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = stack[stack.index(node):]
            del stack[stack.index(node):]
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return found


def _chain(edges: dict[str, set[str]], start: str, goal: str) -> list[str]:
    """The shortest import chain from start to goal (to show a cycle as a reader can follow it)."""
    queue, seen = [[start]], {start}
    while queue:
        chain = queue.pop(0)
        for other in sorted(edges.get(chain[-1], ())):
            if other == goal:
                return [*chain, other]
            if other not in seen:
                seen.add(other)
                queue.append([*chain, other])
    return []


def test_the_graph_is_read_from_the_real_rooms() -> None:
    """Guards the test itself: the rooms it walks exist, and edges known to exist are found."""
    edges = _graph()
    for room in ("fs", "execution", "sandbox", "server", "tools", "grep", "journal", "config"):
        assert room in edges, room
    assert "execution" in edges["sandbox"]
    assert {"execution", "sandbox", "tools", "fs"} <= edges["server"]


def test_no_import_cycle_between_rooms() -> None:
    edges = _graph()
    cycles = _cycles(edges)
    shown = [" -> ".join(_chain(edges, c[0], c[0])) for c in cycles]
    assert not cycles, f"import cycles between rooms: {shown}"


def test_a_cycle_would_be_found() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _chain({"a": {"b"}, "b": {"c"}, "c": {"a"}}, "a", "a") == ["a", "b", "c", "a"]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_the_sandbox_uses_only_the_launch_interface_of_execution() -> None:
    """sandbox implements execution.launch's Launcher and takes plain data; it never reaches into the service,
    the policy or the runner (which would tie the two packages back into one)."""
    reached: dict[str, set[str]] = {}
    for module, path in _modules():
        if not module.startswith("rootbound.sandbox"):
            continue
        for name in _imports(module, path):
            inside = name == "rootbound.execution" or name.startswith("rootbound.execution.")
            if inside and not (name == "rootbound.execution.launch" or name.startswith("rootbound.execution.launch.")):
                reached.setdefault(module, set()).add(name)
    assert not reached, f"sandbox modules importing execution beyond execution.launch: {reached}"


def test_execution_imports_nothing_of_the_sandbox() -> None:
    assert "sandbox" not in _graph()["execution"]


def test_fs_depends_on_no_upper_room() -> None:
    """The filesystem core serves the rooms above it and imports none of them."""
    assert not _graph()["fs"] & {"tools", "server", "execution", "sandbox", "grep", "journal"}
