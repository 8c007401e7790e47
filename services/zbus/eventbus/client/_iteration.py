"""Iteration and ``with`` for what the clients hand out, written once per shell kind:
an object with ``next()`` (None at the end) and ``close()`` (or ``aclose()``)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Generic, Self, TypeVar

__all__ = ["AsyncItems", "Items"]

_T = TypeVar("_T")


class Items(Generic[_T]):
    """An iterator of what :meth:`next` returns until it returns None; ``with`` closes."""

    def next(self, timeout: float | None = None) -> _T | None:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    def __iter__(self) -> Iterator[_T]:
        return self

    def __next__(self) -> _T:
        item = self.next()
        if item is None:
            raise StopIteration
        return item

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncItems(Generic[_T]):
    """:class:`Items` awaited: ``async for``, and ``async with`` (which closes)."""

    # The timeout parameter mirrors the blocking API.
    async def next(self, timeout: float | None = None) -> _T | None:  # noqa: ASYNC109
        raise NotImplementedError

    async def _finish(self) -> None:
        """What leaving ``async with`` does: close."""
        raise NotImplementedError

    def __aiter__(self) -> AsyncIterator[_T]:
        return self

    async def __anext__(self) -> _T:
        item = await self.next()
        if item is None:
            raise StopAsyncIteration
        return item

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._finish()
