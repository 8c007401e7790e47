"""One channel of a PPPP subscriber: what arrived, what the application has done, what
to ACK and NACK (ADR 0006). The rules are in :mod:`zbus.eventbus.core.pppp_subscriber`.

Positions of a channel, all channel sequences:

- ``position``: every sequence up to it has been handed out in order (delivered), or
  covered by a SYNC. ``None`` before the first SYNC of a subscriber that has no
  position yet: until then nothing can be delivered.
- ``done``: every sequence up to it the application has finished with (the ACK's
  basis: nothing the application has not taken is ever ACKed as taken).
- ``acked``: the ``highest`` of the last ACK/NACK sent in this conversation.
- ``sent_max``: the highest sequence the bus has sent in this conversation (a PUBLISH,
  or a SYNC's head). An ACK above it would be malformed, so an ACK never exceeds it.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from zbus.common.protocols import eventbus as eb

# What one held message costs beyond its data and topic (the tuple, its strings' headers).
MESSAGE_OVERHEAD = 400


class PPPPMessage(NamedTuple):
    """A message of a channel, as the application takes it.

    Attributes:
        channel: the channel (a topic prefix) it came through.
        sequence: its sequence in the channel; 0 for an item of a SYNC.
        topic: the event's topic.
        uuid: the event's UUID.
        timestamp: the producer's timestamp (ISO-8601).
        producer: who published it.
        data: the event's data (msgpack by zbus convention: :meth:`unpack`).
        bus_sequence: the event's sequence in the whole bus's log.
        sync: True for an item of a SYNC (the latest event of a topic, sent to a
            subscriber the bus does not know before its live messages).
        position: where the channel is once the application is done with this message:
            ``sequence`` for a live message; for a SYNC's items 0, except the last
            one's, which is the sequence the SYNC brings the channel to. A position
            store saves it (0 means nothing to save yet).
    """

    channel: str
    sequence: int
    topic: str
    uuid: str
    timestamp: str
    producer: str
    data: bytes
    bus_sequence: int
    sync: bool
    position: int

    def unpack(self) -> Any:
        """``data`` unpacked as msgpack.

        Raises:
            ProtocolError: ``data`` is not one msgpack object.
        """
        return eb.unpack_data(self.data)

    @property
    def size(self) -> int:
        """The bytes it holds in memory, about."""
        return len(self.data) + len(self.topic) + len(self.producer) + MESSAGE_OVERHEAD


_new_message = tuple.__new__  # half the cost of NamedTuple's __new__ on the hot path


def make_message(
    channel: str,
    sequence: int,
    topic: str,
    uuid: str,
    timestamp: str,
    producer: str,
    data: bytes,
    bus_sequence: int,
    sync: bool,
    position: int,
) -> PPPPMessage:
    return _new_message(
        PPPPMessage,
        (channel, sequence, topic, uuid, timestamp, producer, data, bus_sequence, sync, position),
    )


class ChannelState:
    """What a subscriber knows of one channel; the core changes it, nothing else does."""

    __slots__ = (
        "acked",
        "adopt_at",
        "bus",
        "channel",
        "done",
        "dup_owed",
        "guard",
        "heard",
        "nack_at",
        "owed_at",
        "pending",
        "position",
        "received_max",
        "retry_wait",
        "sent_max",
        "subscribed_at",
        "sync_bytes",
        "sync_heard_at",
        "sync_items",
    )

    def __init__(self, channel: str, position: int | None) -> None:
        self.channel = channel
        self.position = position
        self.done = position or 0
        self.acked = 0
        self.sent_max = 0
        self.received_max = 0  # highest sequence received in this conversation
        self.pending: dict[int, PPPPMessage] = {}  # received above position + 1, by sequence
        self.owed_at: float | None = None  # when an ACK became owed (first-idle rule)
        self.dup_owed = False  # a duplicate came: the bus waits for an answer
        self.nack_at: float | None = None  # when the current holes were last NACKed
        self.sync_items: list[PPPPMessage] = []
        self.sync_bytes = 0
        self.heard = False  # a PUBLISH of this channel since the last SUBSCRIBE
        self.subscribed_at = 0.0
        self.sync_heard_at = 0.0  # the SUBSCRIBE, or the latest SYNC item since
        self.retry_wait = 0.0  # how long an unanswered SUBSCRIBE waits before another
        self.adopt_at: float | None = None  # resumed without a SYNC: take the position then
        self.bus = 0  # the bus sequence of the live message at ``position`` (0: unknown)
        self.guard = False  # another door: check that its numbering agrees (``bus``)

    def new_conversation(self, now: float, retry_wait: float) -> None:
        """A SUBSCRIBE went out: the bus counts what it sends (and what we may ACK) anew."""
        self.acked = 0
        self.sent_max = 0
        self.received_max = 0
        self.dup_owed = False
        self.owed_at = None
        self.nack_at = None
        self.sync_items = []
        self.sync_bytes = 0
        self.heard = False
        self.adopt_at = None
        self.subscribed_at = self.sync_heard_at = now
        self.retry_wait = retry_wait

    def ack_target(self) -> int:
        """The ``highest`` an ACK may name now: done, and sent in this conversation."""
        done = self.done
        sent = self.sent_max
        return done if done < sent else sent

    def holes(self) -> list[tuple[int, int]]:
        """The missing ranges between ``position`` and the highest message held."""
        if not self.pending or self.position is None:
            return []
        out = []
        expected = self.position + 1
        for seq in sorted(self.pending):
            if seq > expected:
                out.append((expected, seq - 1))
            expected = seq + 1
        return out
