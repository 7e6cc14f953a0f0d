"""`RootSet`: the roots in force for a caller, by name, and the check that a tool may run on one."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping

from rootbound.errors import Failure, Kind
from rootbound.fs.root import Root

__all__ = ["RootSet"]


class RootSet(Mapping[str, Root]):
    """The roots in force, by name, in the order the operator gave them."""

    def __init__(self, roots: Iterable[Root]) -> None:
        self._roots: dict[str, Root] = {r.name: r for r in roots}

    def __getitem__(self, name: str) -> Root:
        return self._roots[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._roots)

    def __len__(self) -> int:
        return len(self._roots)

    def get_for(self, name: str, tool: str) -> Root:
        """The root called `name`, after checking that `tool` may run there and that it is still there."""
        root = self._roots.get(name)
        if root is None:
            raise Failure(Kind.UNKNOWN_ROOT, name=name, roots=", ".join(self._roots))
        root.check_tool(tool)
        root.check_available()
        return root

    def close(self) -> None:
        for root in self._roots.values():
            root.close()
