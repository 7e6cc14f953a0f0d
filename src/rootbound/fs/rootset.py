"""`RootSet`: the roots in force for a caller, by name, its default root, and the check that a tool may run on one."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping

from rootbound.errors import Failure, Kind
from rootbound.fs.root import Root

__all__ = ["RootSet"]


class RootSet(Mapping[str, Root]):
    """The roots in force, by name, in the order the operator gave them.

    `default` is the connection's project root, used when a call names none: the first root (the first
    accepted client root, else the first operator root); None when there is none."""

    def __init__(self, roots: Iterable[Root]) -> None:
        self._roots: dict[str, Root] = {r.name: r for r in roots}
        self.default: str | None = next(iter(self._roots), None)

    def plus(self, extra: Root) -> RootSet:
        """These roots and `extra` (the server's own `command-output` root), keeping the default."""
        out = RootSet([*self._roots.values(), extra])
        out.default = self.default
        return out

    def __getitem__(self, name: str) -> Root:
        return self._roots[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._roots)

    def __len__(self) -> int:
        return len(self._roots)

    def place(self, name: str | None, path: str | None, tool: str,
              default: str | None = None) -> tuple[str | None, str | None]:
        """Which root an agent's `(root, path)` means, and the path relative to it.

        A path is root-relative; an absolute host path that lies inside the root (`Root.host_relative`)
        is taken relative to it. With no root named, such a path picks the root it lies in (one that
        allows `tool`, the default one, then the deepest), else `default` (or the set's default) serves.
        Only the spelling is decided here: the rest is still resolved beneath the root's handle. An optional
        path left out (None) names no place: only the root is decided."""
        if path is None:
            return (name if name is not None else default if default is not None else self.default), None
        if name is not None:
            root = self._roots.get(name)
            rel = root.host_relative(path) if root is not None else None
            return name, path if rel is None else rel
        default = default if default is not None else self.default
        inside = [(r, rel) for r in self._roots.values() if (rel := r.host_relative(path)) is not None]
        if not inside:
            return default, path
        root, rel = max(inside, key=lambda m: (tool in m[0].allowed_tools, m[0].name == default,
                                               len(m[0].real_path)))
        return root.name, rel

    def get_for(self, name: str | None, tool: str) -> Root:
        """The root called `name` (None: the default root), after checking that `tool` may run there and that
        it is still there."""
        if name is None:
            if self.default is None:
                raise Failure(Kind.NO_DEFAULT_ROOT, roots=", ".join(self._roots) or "none")
            name = self.default
        root = self._roots.get(name)
        if root is None:
            raise Failure(Kind.UNKNOWN_ROOT, name=name, roots=", ".join(self._roots))
        root.check_tool(tool)
        root.check_available()
        return root

    def close(self) -> None:
        for root in self._roots.values():
            root.close()
