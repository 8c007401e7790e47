"""One door's link to the bus's log: the collector DEALER and the stream SUB.

Every door that publishes into the log or follows it does it through a
:class:`LogLink`, owned by the door's thread (a socket belongs to one thread):

- **publishing**: events go to the pipeline's collector (its inproc endpoint) as
  ``ZB-PUB`` batches with a confirm, cut by event count and bytes, each event with the
  wall time of its batch and a uuid (:mod:`zbus.common.event_ids`). Each batch is
  answered once: confirmed, refused, or given up after ``timeout`` seconds. At most
  ``max_batches`` wait for their answer; past that, and when the collector's queue is
  full, a batch is not sent and comes back at once as refused (:data:`IN_FLIGHT`,
  :data:`COLLECTOR_FULL`), so that no event waits unanswered;
- **following**: the pipeline's stream (its inproc endpoint), every event the bus
  stored, from any door, in the stream's batches, decoded without per-event checks (the
  pipeline checked them), each with the events missed just before it. A door that
  follows the log's head too (``heartbeats=True``) also gets the stream's heartbeats, each
  as an empty batch from the sequence after the log's last: events below it that did
  not come are missed.

The bookkeeping is :mod:`zbus.eventbus.core.link`; this shell only moves bytes. It reads
the wall clock for the events' timestamps, nothing else: deadlines come in as ``now``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Generic

import msgpack
import zmq

from zbus.common.event_ids import StampCache, uuid4s
from zbus.common.protocols import eventbus_ext as ext
from zbus.common.protocols.errors import ProtocolError
from zbus.common.wire import send_frames
from zbus.eventbus.core.link import Confirms, StreamFollower, T, chunks
from zbus.eventbus.doors.wiring import DoorWiring

__all__ = ["COLLECTOR_FULL", "IN_FLIGHT", "LogLink"]

log = logging.getLogger(__name__)

#: Why a batch was not sent: too many batches wait for their answer.
IN_FLIGHT = "in_flight"
#: Why a batch was not sent: the collector's queue is full.
COLLECTOR_FULL = "collector_full"

#: ``(first sequence, rows, events missed just before it)`` of one stream batch; a row is
#: ``[topic, producer, ts, uuid, data]`` as the stream carries it.
StreamBatch = tuple[int, list[list[Any]], int]


class LogLink(Generic[T]):
    """The collector DEALER and the stream SUB of one door, and their bookkeeping.

    Args:
        wiring: the door's: the context and endpoints of the pipeline, the settings
            (``max_batch_events``, ``max_message_bytes``: what the collector takes in one
            batch), and the clock (its wall time stamps the events; nothing else is read).
        name: the door's name, for the log.
        max_batches: batches waiting for their answer, at most.
        timeout: seconds the collector has to answer a batch.
        follow: whether to read the stream (False: a door that only publishes).
        heartbeats: whether :meth:`batches` also yields the stream's heartbeats.
    """

    def __init__(
        self,
        wiring: DoorWiring,
        *,
        name: str,
        max_batches: int,
        timeout: float,
        follow: bool = True,
        heartbeats: bool = False,
    ) -> None:
        self.wiring = wiring
        self.name = name
        self.follow = follow
        self.heartbeats = heartbeats
        self.confirms: Confirms[T] = Confirms(max_batches=max_batches, timeout=timeout)
        self.follower = StreamFollower()
        self.stored = 0  # events the collector confirmed
        self._stamps = StampCache()
        self._pack = msgpack.Packer(use_bin_type=True).pack
        self.sockets: list[zmq.Socket[Any]] = []

    # ------------------------------------------------------------------ sockets
    def open(self) -> list[zmq.Socket[Any]]:
        """Connect both sockets; returns them, for the door's poller."""
        ctx = self.wiring.ctx
        self.collector = ctx.socket(zmq.DEALER)
        self.sockets.append(self.collector)
        self.collector.linger = 0
        self.collector.sndhwm = self.confirms.max_batches
        if self.wiring.token:
            self.collector.routing_id = self.wiring.token + self.name.encode()
        self.collector.connect(self.wiring.collector)
        if self.follow:
            self.stream = ctx.socket(zmq.SUB)
            self.sockets.append(self.stream)
            self.stream.linger = 0
            # Subscribed from the start, so that no SUB races the stream's subscription.
            # On inproc, the queue is the stream's high-water mark plus this one: the door
            # holds what any stream subscriber may (ZBUS_STREAM_PEER_BYTES), and one more.
            self.stream.rcvhwm = 1
            self.stream.setsockopt(zmq.SUBSCRIBE, ext.STREAM_BATCH)
            if self.heartbeats:
                self.stream.setsockopt(zmq.SUBSCRIBE, ext.STREAM_HEARTBEAT)
            self.stream.connect(self.wiring.stream)
        return list(self.sockets)

    def close(self) -> None:
        for sock in self.sockets:
            sock.close(linger=0)
        self.sockets = []

    # --------------------------------------------------------------- publishing
    def publish(self, items: Sequence[T], now: float) -> list[tuple[Sequence[T], str]]:
        """Send ``items`` as events, in batches; returns the batches not sent, with why
        (:data:`IN_FLIGHT` or :data:`COLLECTOR_FULL`). ``now`` is monotonic."""
        refused: list[tuple[Sequence[T], str]] = []
        confirms, collector, pack = self.confirms, self.collector, self._pack
        settings, stamp = self.wiring.settings, ""
        for chunk in chunks(items, settings.max_batch_events, settings.max_message_bytes):
            if confirms.full:
                refused.append((chunk, IN_FLIGHT))
                continue
            stamp = stamp or self._stamps.stamp(self.wiring.clock.time())
            uuids = uuid4s(len(chunk))
            rows = [
                [item.topic, item.producer, stamp, uuid, item.data]
                for item, uuid in zip(chunk, uuids, strict=True)
            ]
            try:
                send_frames(collector, [ext.PUB_BATCH, b"\x01", pack(rows)], block=False)
            except zmq.Again:
                refused.append((chunk, COLLECTOR_FULL))
                continue
            confirms.sent(uuids, chunk, now)
        return refused

    def answers(self) -> Iterator[tuple[Sequence[T], str | None]]:
        """The collector's answers, as they come: the items of the batch each answers and
        None when they are stored, or the reason the collector gave when they are not."""
        collector, confirms = self.collector, self.confirms
        while True:
            try:
                frames = collector.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return
            try:
                reply = ext.decode_collector_reply(frames)
            except ProtocolError as exc:
                log.error(
                    f"{self.name} door: unreadable collector reply", extra={"error": str(exc)}
                )
                continue
            if isinstance(reply, ext.Confirm):
                items = confirms.confirmed(reply.sequences)
                self.stored += len(items)
                yield items, None
            else:
                yield confirms.refused(), reply.reason

    def expired(self, now: float) -> list[T]:
        """The items of every batch unanswered past its deadline (given up)."""
        return self.confirms.expired(now)

    def next_deadline(self) -> float | None:
        """When the oldest batch in flight is given up; None when none is."""
        return self.confirms.next_deadline()

    # ---------------------------------------------------------------- following
    def raw(self, limit: int) -> Iterator[list[bytes]]:
        """Up to ``limit`` stream messages waiting now, as they came (for a door that
        decides itself what to decode)."""
        stream = self.stream
        for _ in range(limit):
            try:
                yield stream.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return

    def batches(self, limit: int, wanted: Callable[[], object]) -> Iterator[StreamBatch]:
        """Up to ``limit`` stream batches waiting now. While ``wanted()`` is false (the
        door has nobody to give events to) a batch is taken and not even decoded, and
        the next one starts over (no gap is counted across it). With ``heartbeats``, a
        heartbeat (the log's last sequence ``n``) comes as the empty batch ``(n + 1, [],
        missed)``."""
        stream, follower, heartbeats = self.stream, self.follower, self.heartbeats
        for _ in range(limit):
            try:
                frames = stream.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return
            if not wanted():
                follower.reset()
                continue
            try:
                got = ext.decode_stream_fast(frames)
            except ProtocolError as exc:
                log.error("%s door: unreadable stream batch", self.name, extra={"error": str(exc)})
                continue
            if isinstance(got, int):  # a heartbeat: the log's last sequence
                if heartbeats:
                    yield got + 1, [], follower.heartbeat(got + 1)
                continue
            first, rows = got
            yield first, rows, follower.batch(first, len(rows))
