"""What a zbus PPPP PUBLISH carries: an event, a SYNC item or a SYNC's end (ADR 0006).

The PPPP codec (:mod:`zbus.common.protocols.pppp`) leaves the payload opaque; the event
bus fills it so that a subscriber in any language can read it:

==========  ========  =====================================================================
kind        sequence  payload frames
==========  ========  =====================================================================
event       1..2⁶⁴-1  topic, uuid, timestamp, producer, data, bus sequence
SYNC item   0         topic, uuid, timestamp, producer, data, bus sequence
SYNC end    0         one frame of 16 bytes: the channel's sequence ``h`` the SYNC brings
                      the subscriber to, then the number of items sent, each 8 bytes
==========  ========  =====================================================================

Text frames are strict UTF-8: the topic, the uuid (36-character canonical form), the
producer's timestamp (ISO-8601) and the producer. ``data`` is bytes (msgpack by zbus
convention). The bus sequence is the event's place in the whole bus's log, 8 bytes
big-endian, as in every zbus protocol; channel sequences are per channel.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from zbus.common.protocols.errors import FrameCountError, FrameValueError, check_uint64, text
from zbus.common.protocols.pppp import Publish

__all__ = [
    "EVENT_FRAMES",
    "EventPayload",
    "SyncEnd",
    "decode_payload",
    "encode_event",
    "encode_sync_end",
]

PROTOCOL = "pppp"
EVENT_FRAMES = 6  # payload frames of an event or a SYNC item
_UUID_CHARS = 36


@dataclass(frozen=True, slots=True)
class EventPayload:
    """An event as a PUBLISH carries it (``sequence`` 0: a SYNC item)."""

    topic: str
    uuid: str
    timestamp: str
    producer: str
    data: bytes
    bus_sequence: int


@dataclass(frozen=True, slots=True)
class SyncEnd:
    """The end of a SYNC: the subscriber is at ``head`` if it holds ``items`` items."""

    head: int
    items: int


def encode_event(channel: str, sequence: int, event: EventPayload) -> Publish:
    """The PUBLISH of ``event`` as message ``sequence`` of ``channel`` (0: a SYNC item)."""
    check_uint64(PROTOCOL, "PUBLISH", "bus sequence", event.bus_sequence)
    return Publish(
        channel,
        sequence,
        (
            event.topic.encode("utf-8"),
            event.uuid.encode("ascii"),
            event.timestamp.encode("utf-8"),
            event.producer.encode("utf-8"),
            event.data,
            event.bus_sequence.to_bytes(8, "big"),
        ),
    )


def encode_sync_end(channel: str, end: SyncEnd) -> Publish:
    """The PUBLISH that ends a SYNC of ``channel``."""
    check_uint64(PROTOCOL, "PUBLISH", "SYNC head", end.head)
    check_uint64(PROTOCOL, "PUBLISH", "SYNC item count", end.items)
    return Publish(channel, 0, (end.head.to_bytes(8, "big") + end.items.to_bytes(8, "big"),))


def decode_payload(publish: Publish) -> EventPayload | SyncEnd:
    """Read what ``publish`` carries.

    Raises:
        ProtocolError: the payload is neither an event (six frames) nor, with sequence
            0, a SYNC end (one frame of 16 bytes).
    """
    frames = publish.payload
    if publish.sequence == 0 and len(frames) == 1:
        raw = frames[0]
        if len(raw) != 16:
            raise FrameValueError(
                PROTOCOL,
                "a SYNC end of 16 bytes (head, item count)",
                command="PUBLISH",
                frame=2,
                got=raw,
            )
        return SyncEnd(int.from_bytes(raw[:8], "big"), int.from_bytes(raw[8:], "big"))
    if len(frames) != EVENT_FRAMES:
        raise FrameCountError(
            PROTOCOL,
            f"{EVENT_FRAMES} payload frames (topic, uuid, timestamp, producer, data, "
            "bus sequence), or 1 for a SYNC end",
            command="PUBLISH",
            got=f"{len(frames)} payload frames",
        )
    return _event(frames)


def _event(payload: Sequence[bytes]) -> EventPayload:
    # Indexed as on the wire (frames 0 and 1 are the channel and the sequence), so that
    # an error names the frame a peer sent.
    frames = (b"", b"", *payload)
    uuid = text(PROTOCOL, "PUBLISH", frames, 3, "uuid")
    if len(uuid) != _UUID_CHARS or not uuid.isascii():
        raise FrameValueError(
            PROTOCOL, "a 36-character ASCII uuid", command="PUBLISH", frame=3, got=frames[3]
        )
    raw_seq = frames[7]
    if len(raw_seq) != 8:
        raise FrameValueError(
            PROTOCOL, "an 8-byte bus sequence", command="PUBLISH", frame=7, got=raw_seq
        )
    return EventPayload(
        topic=text(PROTOCOL, "PUBLISH", frames, 2, "topic"),
        uuid=uuid,
        timestamp=text(PROTOCOL, "PUBLISH", frames, 4, "timestamp"),
        producer=text(PROTOCOL, "PUBLISH", frames, 5, "producer"),
        data=bytes(frames[6]),
        bus_sequence=int.from_bytes(raw_seq, "big"),
    )
