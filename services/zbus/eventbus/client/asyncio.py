"""The asyncio event bus client (``zmq.asyncio``): :class:`AsyncEventBusClient`."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable, Iterable
from typing import Any, Self

import zmq
import zmq.asyncio

from zbus.common.security import KeyPair
from zbus.eventbus.client.base import _READS_PER_WAKE, _Base, _SubscriptionBase
from zbus.eventbus.client.common import Compat, EndpointsArg, Item
from zbus.eventbus.core.sync import NOTHING, Actions, Event

__all__ = ["AsyncEventBusClient", "AsyncSubscription"]


class AsyncSubscription(_SubscriptionBase[zmq.asyncio.Socket]):
    """An async iterator of :class:`Event`; see :class:`Subscription`."""

    def __aiter__(self) -> AsyncIterator[Event]:
        return self

    async def __anext__(self) -> Event:
        event = await self.next()
        if event is None:
            raise StopAsyncIteration
        return event

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()

    async def _start(self) -> None:
        await self._act(self._core.start(time.monotonic()))

    # The timeout parameters mirror the blocking client's API.
    async def next(self, timeout: float | None = None) -> Event | None:  # noqa: ASYNC109
        """The next event; None when ``timeout`` seconds pass first or once closed."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            if self._ready:
                event = self._pop()
                if event is not None:
                    return event
            if self._closed:
                return None
            now = time.monotonic()
            if deadline is not None and now >= deadline:
                return None
            if not await self._read():
                poller = zmq.asyncio.Poller()
                poller.register(self._stream, zmq.POLLIN)
                poller.register(self._snap, zmq.POLLIN)
                if self._monitor is not None:
                    poller.register(self._monitor, zmq.POLLIN)
                await poller.poll(self._wait_ms(deadline, now))
                await self._read()
            await self._act(self._core.tick(time.monotonic()))

    async def _read(self) -> bool:
        got = False
        stream = self._stream
        for _ in range(_READS_PER_WAKE):
            try:
                frames = await stream.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                break
            got = True
            await self._act(self._stream_actions(frames, time.monotonic()))
            if stream is not self._stream:
                return True
        monitor = self._monitor
        while monitor is not None:
            try:
                frames = await monitor.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                break
            await self._act(self._connected_actions(frames, time.monotonic()))
            if monitor is not self._monitor:
                return True
        snap = self._snap
        while True:
            try:
                frames = await snap.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return got
            got = True
            await self._act(self._reply_actions(frames, time.monotonic()))
            if snap is not self._snap:
                return True

    async def _act(self, actions: Actions) -> None:
        if actions is NOTHING:
            return
        self._queue(actions)
        if actions.query is not None:
            with contextlib.suppress(zmq.Again):
                await self._snap.send_multipart(self._encode_query(actions.query), zmq.NOBLOCK)
        if actions.failover and not self._closed:
            await self._act(self._fail_over())


class AsyncEventBusClient(_Base[zmq.asyncio.Socket]):
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

    def __init__(
        self,
        endpoints: EndpointsArg,
        *,
        producer: str,
        heartbeat_interval: float = 1.0,
        misses: int = 3,
        context: zmq.asyncio.Context | None = None,
        curve: tuple[KeyPair, bytes] | None = None,
        compat: Compat = "zbus",
    ) -> None:
        ctx = context if context is not None else zmq.asyncio.Context()
        super().__init__(
            endpoints, producer, heartbeat_interval, misses, ctx, context is None, curve, compat
        )

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
        sub = AsyncSubscription(self, self._core(subtrees, since, page_limit), on_reset)
        await sub._start()
        return sub

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
        seqs = await self._publish(self._items(topic, data, uuid), confirm, timeout)
        return None if seqs is None else seqs[0]

    async def publish_many(
        self,
        items: Iterable[Item],
        *,
        confirm: bool = False,
        timeout: float = 5.0,  # noqa: ASYNC109
    ) -> list[int] | None:
        """See :meth:`EventBusClient.publish_many`."""
        return await self._publish(items, confirm, timeout)

    async def _publish(self, items: Iterable[Item], confirm: bool, wait: float) -> list[int] | None:
        outbox = self._outbox
        if self.dialect is not None:
            messages = self._plain_frames(items, confirm)
            sock = self._publisher(wait)
            try:
                for frames in messages:
                    await sock.send_multipart(frames)
            except zmq.Again:
                raise TimeoutError(f"the bus took nothing for {wait:g} s") from None
            return None
        chunks = outbox.chunks(items)
        if not confirm:
            sock = self._publisher(wait)
            try:
                for rows in chunks:
                    await sock.send_multipart(outbox.frames(rows, False))
            except zmq.Again:
                raise TimeoutError(f"the bus took nothing for {wait:g} s") from None
            return None
        seqs: dict[str, int] = {}
        for _ in self.endpoints:
            if await self._confirm_round(outbox.unconfirmed(chunks, seqs), seqs, wait):
                return outbox.sequences(chunks, seqs)
            self._rotate_publisher()
        raise TimeoutError(f"no confirmation within {wait:g} s from any endpoint")

    async def _confirm_round(
        self, chunks: list[list[list[Any]]], seqs: dict[str, int], wait: float
    ) -> bool:
        deadline = time.monotonic() + wait
        sock = self._publisher(wait)
        try:
            for rows in chunks:
                await sock.send_multipart(self._outbox.frames(rows, True))
        except zmq.Again:
            return False
        wanted = {r[3] for rows in chunks for r in rows}
        while not wanted <= seqs.keys():
            left = deadline - time.monotonic()
            if left <= 0 or not await sock.poll(int(left * 1000) + 1):
                return False
            self._outbox.take_reply(await sock.recv_multipart(), seqs)
        return True
