"""The blocking PPPP subscriber (seed 003, ADR 0006): :class:`PPPPSubscriber`.

It subscribes to channels (topic prefixes) of the event bus's PPPP door and hands the
application every message of each channel exactly once, in order: it drops
duplicates, NACKs what is missing, ACKs in batches what the application is done with,
heartbeats, and subscribes again when the bus goes silent (a restart). The rules are
those of the sans-I/O :class:`~zbus.eventbus.core.pppp_subscriber.SubscriberCore`; the
steps around them are shared with the asyncio subscriber
(:mod:`zbus.eventbus.client._pppp_shell`), and this module blocks where they wait.

A subscriber belongs to one thread at a time, and talks to the bus only while one of
its methods runs: an application that keeps a message longer than ``misses x idle``
(4 s by default) is taken for gone by the bus, which keeps its place for the grace
period; the next call subscribes again and the bus resumes from the last ACK.
"""

from __future__ import annotations

from typing import Any

import zmq

from zbus.eventbus.client._iteration import Items
from zbus.eventbus.client._pppp_shell import SubscriberShell
from zbus.eventbus.client._waiting import wait
from zbus.eventbus.client.errors import PPPPError
from zbus.eventbus.core.pppp_channel import PPPPMessage

__all__ = ["PPPPError", "PPPPMessage", "PPPPSubscriber"]

_POLLIN = int(zmq.POLLIN)


class PPPPSubscriber(SubscriberShell["zmq.Context[Any]"], Items[PPPPMessage]):
    """A blocking PPPP subscriber: an iterator of :class:`PPPPMessage`. It subscribes
    when it is made.

    Args:
        endpoint: the bus's PPPP door, e.g. ``tcp://127.0.0.1:5560``; or the doors of
            a replicated bus's replicas, as a list or comma-separated
            (``"tcp://h1:5560,tcp://h2:5570,tcp://h3:5580"``). The subscriber talks to
            the first; when the door it talks to goes silent (no HEARTBEAT or message
            for ``misses x idle``) it subscribes at the next one, in turn, keeping its
            positions (:attr:`failovers` counts the moves, :attr:`endpoint` is the door
            now). A position carries over only if the next door numbers the channel
            as the last one did; the subscriber checks that with the bus sequences and
            raises :class:`PPPPError` where it sees a difference, rather than drop or
            repeat events. A replicated bus's doors share one numbering and the ACK
            positions, and only the leader's answers (docs/protocols/pppp.md, "Several
            doors"): with a ``name`` and a ``store``, every message comes once across a
            failover.
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

    @classmethod
    def _new_context(cls) -> zmq.Context[Any]:
        return zmq.Context()

    def next(self, timeout: float | None = None) -> PPPPMessage | None:
        """The next message; None when ``timeout`` seconds pass first or once closed.

        Calling it again says the application is done with the message it returned
        last, which an ACK may then name.

        Raises:
            PPPPError: the subscription cannot go on.
        """
        deadline = self._begin(timeout)
        step = self._step(deadline, False)
        while type(step) is int:
            wait((self._sock,), _POLLIN, step)
            step = self._step(deadline, True)
        assert not isinstance(step, int)
        return step

    def custom(self, *frames: bytes) -> None:
        """Send CUSTOM with ``frames`` as its payload: the bus publishes it as an event on
        ``/zbus/pppp/custom/<name>`` (ADR 0006).

        Raises:
            TimeoutError: the bus takes nothing from this subscriber now.
            RuntimeError: the subscriber is closed.
        """
        self._custom(frames)

    def close(self) -> None:
        """ACK what the application is done with (the last message taken included), then
        close the socket, and the context if it is ours."""
        if self._shut() and self._own_ctx:
            self._ctx.term()
