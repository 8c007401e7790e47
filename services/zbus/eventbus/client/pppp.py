"""The blocking PPPP subscriber (seed 003, ADR 0006): :class:`PPPPSubscriber`.

It subscribes to channels (topic prefixes) of the event bus's PPPP door and hands the
application every message of each channel exactly once, in order: it drops
duplicates, NACKs what is missing, ACKs in batches what the application is done with,
heartbeats, and subscribes again when the bus goes silent (a restart). The rules are
those of the sans-I/O :class:`~zbus.eventbus.core.pppp_subscriber.SubscriberCore`.

A subscriber belongs to one thread at a time, and talks to the bus only while one of
its methods runs: an application that keeps a message longer than ``misses x idle``
(4 s by default) is taken for gone by the bus, which keeps its place for the grace
period; the next call subscribes again and the bus resumes from the last ACK.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator
from typing import Any, Self

import zmq

from zbus.common.positions import PositionStore
from zbus.common.security import KeyPair
from zbus.eventbus.client.pppp_base import _READS_PER_WAKE, PPPPError, _PPPPBase
from zbus.eventbus.core.pppp_channel import PPPPMessage
from zbus.eventbus.core.pppp_subscriber import NOTHING, Actions, SubscriberSettings

__all__ = ["PPPPError", "PPPPMessage", "PPPPSubscriber"]

_NOBLOCK = int(zmq.NOBLOCK)
_RCVMORE = int(zmq.RCVMORE)


class PPPPSubscriber(_PPPPBase["zmq.Socket[Any]"]):
    """A blocking PPPP subscriber: an iterator of :class:`PPPPMessage`.

    Args:
        endpoint: the bus's PPPP door, e.g. ``tcp://127.0.0.1:5560``.
        channels: the channels to subscribe to: topic prefixes (``""``: every topic).
        name: who the subscriber is, its socket identity (1 to 255 bytes of UTF-8). The
            bus knows a subscriber by it: one that comes back under the same name
            within the bus's grace period gets what it missed; without a name, or after
            the grace period, a SYNC (the latest event of each topic) comes first.
        ack_every: ACK after this many messages are done (and within ``first_idle`` of
            the first message owed in any case).
        first_idle, idle, misses: the bus's times (``ZBUS_PPPP_FIRST_IDLE``,
            ``ZBUS_PPPP_IDLE``, ``ZBUS_PPPP_MISSES``), in seconds.
        store: a position store: its positions are loaded now, and messages at or
            below them are dropped as duplicates. The application saves to it.
        max_held, max_held_bytes: what the subscriber holds that the application has
            not finished with, at most (beyond: dropped, and sent again by the bus).
        max_sync_bytes: the largest SYNC it takes (beyond: :class:`PPPPError`).
        curve: ``(this client's key pair, the bus's public key)`` for a bus that runs
            CURVE. A key the bus's allow-list does not hold gets no answer.
        context: the ZeroMQ context (default: a new one, terminated by :meth:`close`).

    Raises:
        ValueError: bad channels, name or settings.
        ConfigError: a ``curve`` key pair without its secret key.
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
        context: zmq.Context[Any] | None = None,
    ) -> None:
        settings = SubscriberSettings(
            ack_every, first_idle, idle, misses, max_held, max_held_bytes, max_sync_bytes
        )
        ctx = context if context is not None else zmq.Context()
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
        self._act(self._core.start(self._now()))

    def __iter__(self) -> Iterator[PPPPMessage]:
        return self

    def __next__(self) -> PPPPMessage:
        msg = self.next()
        if msg is None:
            raise StopIteration
        return msg

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def next(self, timeout: float | None = None) -> PPPPMessage | None:
        """The next message; None when ``timeout`` seconds pass first or once closed.

        Calling it again says the application is done with the message it returned
        last, which an ACK may then name.

        Raises:
            PPPPError: the subscription cannot go on.
        """
        now = self._now()
        self._act(self._finish_taken(now))
        core = self._core
        deadline = None if timeout is None else now + timeout
        while True:
            if now >= core.wake:
                self._read()
                self._act(core.tick(now))
            if self._ready:
                return self._take()
            self._check_failure()
            if self._closed:
                return None
            if deadline is not None and now >= deadline:
                return None
            if not self._read():
                self._sock.poll(self._wait_ms(deadline, now), zmq.POLLIN)
                self._read()
            now = self._now()

    def custom(self, *frames: bytes) -> None:
        """Send CUSTOM with ``frames`` as its payload: the bus publishes it as an event on
        ``/zbus/pppp/custom/<name>`` (ADR 0006).

        Raises:
            TimeoutError: the bus takes nothing from this subscriber now.
            RuntimeError: the subscriber is closed.
        """
        if self._closed:
            raise RuntimeError("the subscriber is closed")
        payload = [bytes(f) for f in frames]
        try:
            self._sock.send_multipart(self._core.custom(payload, self._now()), zmq.NOBLOCK)
        except zmq.Again:
            raise TimeoutError("the bus takes nothing from this subscriber now") from None

    def close(self) -> None:
        """ACK what the application is done with (the last message taken included), then
        close the socket, and the context if it is ours."""
        if self._closed:
            return
        now = self._now()
        self._act(self._finish_taken(now))
        self._act(self._core.flush(now))
        self._closed = True
        self._sock.close(linger=200)  # the last ACK gets a moment to leave
        if self._own_ctx:
            self._ctx.term()

    def _read(self) -> bool:
        """Take what has arrived, without waiting; True if anything did."""
        sock, core = self._sock, self._core
        # recv and RCVMORE by hand, with plain int flags: a fifth less per message than
        # recv_multipart (PUBLISH has eight frames).
        recv, get = sock.recv, sock.get
        for n in range(_READS_PER_WAKE):
            try:
                frames = [recv(_NOBLOCK)]
            except zmq.Again:
                return n > 0
            while get(_RCVMORE):
                frames.append(recv(_NOBLOCK))
            actions = core.on_frames(frames, self._now())
            if actions is not NOTHING:
                self._act(actions)
        return True

    def _act(self, actions: Actions) -> None:
        if actions is NOTHING:
            return
        for frames in self._queue(actions):
            # A frame the bus does not take now is as good as lost: the protocol
            # repairs both (an ACK comes again, a SUBSCRIBE is sent again).
            with contextlib.suppress(zmq.Again):
                self._sock.send_multipart(frames, zmq.NOBLOCK)
