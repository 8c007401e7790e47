"""The asyncio PPPP subscriber (``zmq.asyncio``): :class:`AsyncPPPPSubscriber`."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterable
from typing import Self

import zmq
import zmq.asyncio

from zbus.common.positions import PositionStore
from zbus.common.security import KeyPair
from zbus.eventbus.client.pppp_base import _READS_PER_WAKE, _PPPPBase
from zbus.eventbus.core.pppp_channel import PPPPMessage
from zbus.eventbus.core.pppp_subscriber import NOTHING, Actions, SubscriberSettings

__all__ = ["AsyncPPPPSubscriber"]


class AsyncPPPPSubscriber(_PPPPBase[zmq.asyncio.Socket]):
    """The asyncio PPPP subscriber: :class:`~zbus.eventbus.client.pppp.PPPPSubscriber`'s
    API, awaited. Create it with :meth:`open` (it subscribes at once)::

        async with await AsyncPPPPSubscriber.open(endpoint, "/sensors/", name="n") as sub:
            async for msg in sub:
                ...

    Args: as :class:`~zbus.eventbus.client.pppp.PPPPSubscriber`; ``context`` is a
    ``zmq.asyncio`` context.
    """

    def __init__(
        self,
        endpoint: str,
        channels: Iterable[str] | str,
        *,
        name: str | None = None,
        ack_every: int = 100,
        first_idle: float = 0.1,
        idle: float = 1.0,
        misses: int = 4,
        store: PositionStore | None = None,
        max_held: int = 10_000,
        max_held_bytes: int = 64 * 1024 * 1024,
        max_sync_bytes: int = 256 * 1024 * 1024,
        curve: tuple[KeyPair, bytes] | None = None,
        context: zmq.asyncio.Context | None = None,
    ) -> None:
        settings = SubscriberSettings(
            ack_every, first_idle, idle, misses, max_held, max_held_bytes, max_sync_bytes
        )
        ctx = context if context is not None else zmq.asyncio.Context()
        try:
            super().__init__(
                endpoint,
                channels,
                name=name,
                settings=settings,
                store=store,
                curve=curve,
                ctx=ctx,
                own_ctx=context is None,
            )
        except BaseException:
            if context is None:
                ctx.term()
            raise
        self._started = False

    @classmethod
    async def open(cls, endpoint: str, channels: Iterable[str] | str, **options: object) -> Self:
        """A subscriber that has sent its SUBSCRIBEs (options as for the constructor)."""
        sub = cls(endpoint, channels, **options)  # type: ignore[arg-type]
        await sub.start()
        return sub

    async def start(self) -> None:
        """Send the SUBSCRIBEs (once; :meth:`next` does it if it was not done)."""
        if not self._started:
            self._started = True
            await self._act(self._core.start(self._now()))

    def __aiter__(self) -> AsyncIterator[PPPPMessage]:
        return self

    async def __anext__(self) -> PPPPMessage:
        msg = await self.next()
        if msg is None:
            raise StopAsyncIteration
        return msg

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # The timeout parameter mirrors the blocking client's API.
    async def next(self, timeout: float | None = None) -> PPPPMessage | None:  # noqa: ASYNC109
        """See :meth:`PPPPSubscriber.next`."""
        await self.start()
        now = self._now()
        await self._act(self._finish_taken(now))
        core = self._core
        deadline = None if timeout is None else now + timeout
        while True:
            if now >= core.wake:
                await self._read()
                await self._act(core.tick(now))
            if self._ready:
                return self._take()
            self._check_failure()
            if self._closed:
                return None
            if deadline is not None and now >= deadline:
                return None
            if not await self._read():
                await self._sock.poll(self._wait_ms(deadline, now))
                await self._read()
            now = self._now()

    async def custom(self, *frames: bytes) -> None:
        """See :meth:`PPPPSubscriber.custom`."""
        if self._closed:
            raise RuntimeError("the subscriber is closed")
        payload = [bytes(f) for f in frames]
        try:
            await self._sock.send_multipart(self._core.custom(payload, self._now()), zmq.NOBLOCK)
        except zmq.Again:
            raise TimeoutError("the bus takes nothing from this subscriber now") from None

    async def aclose(self) -> None:
        """See :meth:`PPPPSubscriber.close`; the context is terminated off the loop."""
        if self._closed:
            return
        now = self._now()
        await self._act(self._finish_taken(now))
        await self._act(self._core.flush(now))
        self._closed = True
        self._sock.close(linger=200)
        if self._own_ctx:
            await asyncio.to_thread(self._ctx.term)

    async def _read(self) -> bool:
        sock, core = self._sock, self._core
        for n in range(_READS_PER_WAKE):
            try:
                frames = await sock.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return n > 0
            actions = core.on_frames(frames, self._now())
            if actions is not NOTHING:
                await self._act(actions)
        return True

    async def _act(self, actions: Actions) -> None:
        if actions is NOTHING:
            return
        for frames in self._queue(actions):
            with contextlib.suppress(zmq.Again):
                await self._sock.send_multipart(frames, zmq.NOBLOCK)
