"""The asyncio event bus client (``zmq.asyncio``): :class:`AsyncEventBusClient` and its
:class:`AsyncSubscription`.

A shell: the same logic and non-blocking moves as the blocking client
(:mod:`zbus.eventbus.client._shell`); this module awaits where they wait.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from typing import Any, Self

import zmq
import zmq.asyncio

from zbus.eventbus.client._iteration import AsyncItems
from zbus.eventbus.client._outbox import Item
from zbus.eventbus.client._shell import ClientShell, SubscriptionShell
from zbus.eventbus.client._waiting import run_async, wait_async
from zbus.eventbus.core.log import Event

__all__ = ["AsyncEventBusClient", "AsyncSubscription"]

_POLLIN = int(zmq.POLLIN)


class AsyncSubscription(SubscriptionShell, AsyncItems[Event]):
    """An async iterator of :class:`Event`; see :class:`Subscription`."""

    # The timeout parameters mirror the blocking client's API.
    async def next(self, timeout: float | None = None) -> Event | None:  # noqa: ASYNC109
        """The next event; None when ``timeout`` seconds pass first or once closed."""
        deadline = None if timeout is None else self._clock.monotonic() + timeout
        step = self._step(deadline, False)
        while type(step) is int:
            await wait_async(self._waiting(), _POLLIN, step)
            step = self._step(deadline, True)
        assert not isinstance(step, int)
        return step

    async def _finish(self) -> None:
        self.close()


class AsyncEventBusClient(ClientShell[zmq.asyncio.Context]):
    """The asyncio client: :class:`EventBusClient`'s API, awaited.

    Args:
        endpoints: one bus (a base endpoint ``tcp://host:P`` or :class:`BusEndpoints`),
            or several, tried in order.
        producer: the producer name stamped on every event published.
        heartbeat_interval: the bus's heartbeat interval, in seconds.
        misses: heartbeats missed before a subscription fails over.
        context: the ``zmq.asyncio`` context (default: a new one, terminated by
            :meth:`close`).
        curve: ``(this client's key pair, the bus's public key)`` to talk to a bus that
            runs CURVE; every socket of the client and of its subscriptions (re-created
            ones too) is then a CURVE client.
        compat: the wire, ``"zbus"``, ``"spec"`` or ``"node"``: see
            :class:`~zbus.eventbus.client.EventBusClient`.

    Raises:
        ValueError: bad endpoints or options.
        ConfigError: a ``curve`` key pair without its secret key.
    """

    @classmethod
    def _new_context(cls) -> zmq.asyncio.Context:
        return zmq.asyncio.Context()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self, linger: float = 5.0) -> None:
        """:meth:`close` without blocking the loop while queued events linger."""
        if self._shut(linger) and self._own_ctx:
            await asyncio.to_thread(self._ctx.term)

    async def subscribe(
        self,
        subtrees: Iterable[str] | str = (),
        since: int = 0,
        *,
        page_limit: int = 1000,
        on_reset: Callable[[], None] | None = None,
    ) -> AsyncSubscription:
        """See :meth:`EventBusClient.subscribe`."""
        core = self._subscription_core(subtrees, since, page_limit)
        return AsyncSubscription(self, core, on_reset)

    async def publish(
        self,
        topic: str,
        data: Any,
        *,
        confirm: bool = False,
        timeout: float = 5.0,  # noqa: ASYNC109
        uuid: str | None = None,
    ) -> int | None:
        """See :meth:`EventBusClient.publish`."""
        flow = self._publishing(self._protocol.items(topic, data, uuid), confirm, timeout)
        seqs = None if flow is None else await run_async(flow)
        return None if seqs is None else seqs[0]

    async def publish_many(
        self,
        items: Iterable[Item],
        *,
        confirm: bool = False,
        timeout: float = 5.0,  # noqa: ASYNC109
    ) -> list[int] | None:
        """See :meth:`EventBusClient.publish_many`."""
        flow = self._publishing(items, confirm, timeout)
        return None if flow is None else await run_async(flow)
