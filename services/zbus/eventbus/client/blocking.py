"""The blocking event bus client: :class:`EventBusClient` and its :class:`Subscription`.

A shell: the logic is in :mod:`zbus.eventbus.client._protocol` and
:mod:`zbus.eventbus.client._subscription` (sans-I/O) and the non-blocking moves in
:mod:`zbus.eventbus.client._shell`; this module blocks where they wait.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Self

import zmq

from zbus.eventbus.client._iteration import Items
from zbus.eventbus.client._outbox import Item
from zbus.eventbus.client._shell import ClientShell, SubscriptionShell
from zbus.eventbus.client._waiting import run, wait
from zbus.eventbus.core.log import Event

__all__ = ["EventBusClient", "Subscription"]

_POLLIN = int(zmq.POLLIN)


class Subscription(SubscriptionShell, Items[Event]):
    """An iterator of :class:`Event`: snapshot first, then live, with no gap or duplicate."""

    def next(self, timeout: float | None = None) -> Event | None:
        """The next event; None when ``timeout`` seconds pass first or once closed."""
        deadline = None if timeout is None else self._clock.monotonic() + timeout
        step = self._step(deadline, False)
        while type(step) is int:
            wait(self._waiting(), _POLLIN, step)
            step = self._step(deadline, True)
        assert not isinstance(step, int)
        return step


class EventBusClient(ClientShell["zmq.Context[Any]"]):
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

    @classmethod
    def _new_context(cls) -> zmq.Context[Any]:
        return zmq.Context()

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
        return Subscription(self, self._subscription_core(subtrees, since, page_limit), on_reset)

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
        flow = self._publishing(self._protocol.items(topic, data, uuid), confirm, timeout)
        seqs = None if flow is None else run(flow)
        return None if seqs is None else seqs[0]

    def publish_many(
        self, items: Iterable[Item], *, confirm: bool = False, timeout: float = 5.0
    ) -> list[int] | None:
        """Publish ``(topic, data)`` or ``(topic, data, uuid)`` items in ZB-PUB batches.

        With ``confirm``, every batch is sent before any confirm is awaited, and the
        sequences come back in item order. ``timeout`` bounds each endpoint's turn.
        """
        flow = self._publishing(items, confirm, timeout)
        return None if flow is None else run(flow)
