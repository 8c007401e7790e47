"""The blocking event bus client: :class:`EventBusClient` and its :class:`Subscription`."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Self

import zmq

from zbus.common.security import KeyPair
from zbus.eventbus.client.base import _READS_PER_WAKE, _Base, _SubscriptionBase
from zbus.eventbus.client.common import Compat, EndpointsArg, Item
from zbus.eventbus.core.sync import NOTHING, Actions, Event, SubscriptionLogic

__all__ = ["EventBusClient", "Subscription"]


class Subscription(_SubscriptionBase["zmq.Socket[Any]"]):
    """An iterator of :class:`Event`: snapshot first, then live, with no gap or duplicate."""

    def __init__(
        self, client: EventBusClient, core: SubscriptionLogic, on_reset: Callable[[], None] | None
    ) -> None:
        super().__init__(client, core, on_reset)
        self._act(core.start(time.monotonic()))

    def __iter__(self) -> Iterator[Event]:
        return self

    def __next__(self) -> Event:
        event = self.next()
        if event is None:
            raise StopIteration
        return event

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def next(self, timeout: float | None = None) -> Event | None:
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
            if not self._read():
                socks = [self._stream, self._snap]
                if self._monitor is not None:
                    socks.append(self._monitor)
                zmq.select(socks, [], [], self._wait_ms(deadline, now) / 1000)
                self._read()
            self._act(self._core.tick(time.monotonic()))

    def _read(self) -> bool:
        """Take what has arrived on both sockets, without waiting; True if anything."""
        got = False
        stream = self._stream
        for _ in range(_READS_PER_WAKE):
            try:
                frames = stream.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                break
            got = True
            self._act(self._stream_actions(frames, time.monotonic()))
            if stream is not self._stream:
                return True  # failed over: these sockets are gone
        monitor = self._monitor
        while monitor is not None:
            try:
                frames = monitor.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                break
            self._act(self._connected_actions(frames, time.monotonic()))
            if monitor is not self._monitor:
                return True
        snap = self._snap
        while True:
            try:
                frames = snap.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return got
            got = True
            self._act(self._reply_actions(frames, time.monotonic()))
            if snap is not self._snap:
                return True

    def _act(self, actions: Actions) -> None:
        if actions is NOTHING:
            return
        self._queue(actions)
        if actions.query is not None:
            # Unanswered, a query times out and the subscription fails over.
            with contextlib.suppress(zmq.Again):
                self._snap.send_multipart(self._encode_query(actions.query), zmq.NOBLOCK)
        if actions.failover and not self._closed:
            self._act(self._fail_over())


class EventBusClient(_Base["zmq.Socket[Any]"]):
    """A blocking client of one bus, or of a primary and its backups in order.

    Args:
        endpoints: one bus (a base endpoint ``tcp://host:P`` or :class:`BusEndpoints`),
            or several, tried in order.
        producer: the producer name stamped on every event published.
        heartbeat_interval: the bus's heartbeat interval, in seconds.
        misses: heartbeats missed before a subscription fails over.
        context: the ZeroMQ context (default: a new one, terminated by :meth:`close`).
        curve: ``(this client's key pair, the bus's public key)`` to talk to a bus that
            runs CURVE; every socket of the client and of its subscriptions (re-created
            ones too) is then a CURVE client. A bus whose ZAP allow-list does not hold
            the key answers nothing: a confirmed publish times out, a subscription sees
            no heartbeat.
        compat: the wire. ``"zbus"`` (the default): zbus's extensions (batches,
            confirms, the stream, gap repair; a zbus bus). ``"spec"``: the plain Event
            BUS protocol of the RFC, and ``"node"``: the same in the Node.js reference
            bus's dialect (ASCII sequences, ',' subtree lists), for buses that speak
            nothing else. The plain protocol publishes one PUB per event, never
            confirmed (``confirm=True`` raises :class:`DialectError`), and subscribes
            with SYNCSTART and the PUBLISHER socket (docs/eventbus.md).

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
        context: zmq.Context[Any] | None = None,
        curve: tuple[KeyPair, bytes] | None = None,
        compat: Compat = "zbus",
    ) -> None:
        ctx = context if context is not None else zmq.Context()
        super().__init__(
            endpoints, producer, heartbeat_interval, misses, ctx, context is None, curve, compat
        )

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def subscribe(
        self,
        subtrees: Iterable[str] | str = (),
        since: int = 0,
        *,
        page_limit: int = 1000,
        on_reset: Callable[[], None] | None = None,
    ) -> Subscription:
        """Events under ``subtrees`` (topic prefixes; none: all) changed after ``since``.

        The latest event of each matching topic comes first, then every new one.
        ``on_reset`` runs, in the consuming thread and in order with the events, when the
        bus behind the subscription turned out to have another history: what follows is
        a full snapshot of it.

        In the plain protocol (``compat`` ``"spec"`` or ``"node"``) ``since`` > 0 resumes
        with every event after it, as the RFC's SYNCSTART does (not only the latest of
        each topic), and ``page_limit`` does not apply.
        """
        return Subscription(self, self._core(subtrees, since, page_limit), on_reset)

    def publish(
        self,
        topic: str,
        data: Any,
        *,
        confirm: bool = False,
        timeout: float = 5.0,
        uuid: str | None = None,
    ) -> int | None:
        """Publish one event; with ``confirm``, wait until it is in the log: its sequence.

        ``data`` that is not bytes is packed with msgpack. Publishing is idempotent by
        ``uuid`` (a new one when None): a confirm that times out is retried with the same
        uuid on the next endpoints, and an event already stored answers its old sequence.

        Raises:
            ValueError: an empty topic, one starting with NUL or over 1024 bytes, or a
                malformed uuid.
            TimeoutError: not sent, or not confirmed by any endpoint, within ``timeout``.
            PublishError: the bus refused the event.
            DialectError: ``confirm`` in the plain protocol (``compat`` not ``"zbus"``).
        """
        seqs = self._publish(self._items(topic, data, uuid), confirm, timeout)
        return None if seqs is None else seqs[0]

    def publish_many(
        self, items: Iterable[Item], *, confirm: bool = False, timeout: float = 5.0
    ) -> list[int] | None:
        """Publish ``(topic, data)`` or ``(topic, data, uuid)`` items in ZB-PUB batches.

        With ``confirm``, every batch is sent before any confirm is awaited, and the
        sequences come back in item order. ``timeout`` bounds each endpoint's turn.
        """
        return self._publish(items, confirm, timeout)

    def _publish(self, items: Iterable[Item], confirm: bool, wait: float) -> list[int] | None:
        outbox = self._outbox
        if self.dialect is not None:
            messages = self._plain_frames(items, confirm)
            sock = self._publisher(wait)
            try:
                for frames in messages:
                    sock.send_multipart(frames)
            except zmq.Again:
                raise TimeoutError(f"the bus took nothing for {wait:g} s") from None
            return None
        chunks = outbox.chunks(items)
        if not confirm:
            sock = self._publisher(wait)
            try:
                for rows in chunks:
                    sock.send_multipart(outbox.frames(rows, False))
            except zmq.Again:
                raise TimeoutError(f"the bus took nothing for {wait:g} s") from None
            return None
        seqs: dict[str, int] = {}
        for _ in self.endpoints:
            if self._confirm_round(outbox.unconfirmed(chunks, seqs), seqs, wait):
                return outbox.sequences(chunks, seqs)
            self._rotate_publisher()
        raise TimeoutError(f"no confirmation within {wait:g} s from any endpoint")

    def _confirm_round(
        self, chunks: list[list[list[Any]]], seqs: dict[str, int], wait: float
    ) -> bool:
        deadline = time.monotonic() + wait
        sock = self._publisher(wait)
        try:
            for rows in chunks:
                sock.send_multipart(self._outbox.frames(rows, True))
        except zmq.Again:
            return False
        wanted = {r[3] for rows in chunks for r in rows}
        while not wanted <= seqs.keys():
            left = deadline - time.monotonic()
            if left <= 0 or not sock.poll(int(left * 1000) + 1, zmq.POLLIN):
                return False
            self._outbox.take_reply(sock.recv_multipart(), seqs)
        return True
