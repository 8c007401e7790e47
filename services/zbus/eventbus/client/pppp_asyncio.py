"""The asyncio PPPP subscriber (``zmq.asyncio``): :class:`AsyncPPPPSubscriber`.

The same steps as the blocking subscriber (:mod:`zbus.eventbus.client._pppp_shell`);
this module awaits where they wait.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence
from typing import Self

import zmq
import zmq.asyncio

from zbus.eventbus.client._iteration import AsyncItems
from zbus.eventbus.client._pppp_shell import SubscriberShell
from zbus.eventbus.client._waiting import wait_async
from zbus.eventbus.core.pppp_channel import PPPPMessage

__all__ = ["AsyncPPPPSubscriber"]

_POLLIN = int(zmq.POLLIN)


class AsyncPPPPSubscriber(SubscriberShell[zmq.asyncio.Context], AsyncItems[PPPPMessage]):
    """The asyncio PPPP subscriber: :class:`~zbus.eventbus.client.pppp.PPPPSubscriber`'s
    API, awaited. Like it, it subscribes when it is made::

        async with zbus.AsyncPPPPSubscriber(endpoint, "/sensors/", name="n") as sub:
            async for msg in sub:
                ...

    Args: as :class:`~zbus.eventbus.client.pppp.PPPPSubscriber` (``endpoint`` one door or
    the replicas' doors, a list or comma-separated); ``context`` is a ``zmq.asyncio``
    context.
    """

    @classmethod
    def _new_context(cls) -> zmq.asyncio.Context:
        return zmq.asyncio.Context()

    @classmethod
    async def open(
        cls, endpoint: str | Sequence[str], channels: Iterable[str] | str, **options: object
    ) -> Self:
        """A new subscriber (options as for the constructor, which subscribes): the
        same as calling the class."""
        return cls(endpoint, channels, **options)  # type: ignore[arg-type]

    async def start(self) -> None:
        """Nothing left to do: the SUBSCRIBEs went out when the subscriber was made."""

    # The timeout parameter mirrors the blocking client's API.
    async def next(self, timeout: float | None = None) -> PPPPMessage | None:  # noqa: ASYNC109
        """See :meth:`PPPPSubscriber.next`."""
        deadline = self._begin(timeout)
        step = self._step(deadline, False)
        while type(step) is int:
            await wait_async((self._sock,), _POLLIN, step)
            step = self._step(deadline, True)
        assert not isinstance(step, int)
        return step

    async def custom(self, *frames: bytes) -> None:
        """See :meth:`PPPPSubscriber.custom`."""
        self._custom(frames)

    async def aclose(self) -> None:
        """See :meth:`PPPPSubscriber.close`; the context is terminated off the loop."""
        if self._shut() and self._own_ctx:
            await asyncio.to_thread(self._ctx.term)

    async def _finish(self) -> None:
        await self.aclose()
