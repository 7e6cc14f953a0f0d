"""`with scoped(var, value):` a context variable holds `value` for the length of the block.

`contextlib.contextmanager` does the same through a generator, at about three times the Python calls; three
such blocks open on every tool call's path (who calls, which journal records, whether it runs on the loop).
"""

from __future__ import annotations

from contextvars import ContextVar, Token
from typing import Generic, TypeVar

__all__ = ["scoped"]

T = TypeVar("T")


class scoped(Generic[T]):
    __slots__ = ("_token", "_value", "_var")

    def __init__(self, var: ContextVar[T], value: T) -> None:
        self._var, self._value = var, value

    def __enter__(self) -> None:
        self._token: Token[T] = self._var.set(self._value)

    def __exit__(self, *exc: object) -> None:
        self._var.reset(self._token)
