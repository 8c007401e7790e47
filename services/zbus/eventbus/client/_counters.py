"""Counters a shell reads through from its core, declared in one line each."""

from __future__ import annotations

from operator import attrgetter
from typing import Any, Self, overload

__all__ = ["Counter"]


class Counter:
    """A read-only attribute that is a count kept elsewhere on the object, at ``path``
    (dotted, e.g. ``"_core.duplicates"``)."""

    def __init__(self, path: str, doc: str | None = None) -> None:
        self._get = attrgetter(path)
        self.__doc__ = doc

    @overload
    def __get__(self, obj: None, owner: type[Any]) -> Self: ...

    @overload
    def __get__(self, obj: object, owner: type[Any] | None = None) -> int: ...

    def __get__(self, obj: object, owner: type[Any] | None = None) -> int | Self:
        if obj is None:
            return self
        count: int = self._get(obj)
        return count
