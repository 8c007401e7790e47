"""The PPPP door's recent events, bounded in bytes, sans-I/O (ADR 0006, "Backlogs are
positions").

Messages are not copied per subscriber: an event the door numbered is encoded once, as
the payload frames of its PUBLISH (:func:`payload_frames`, the frames of
:func:`zbus.common.protocols.pppp_event.encode_event`), kept with its size keyed by its
global sequence, and evicted oldest first once the cache passes its bound. Every
subscriber of every channel is sent those same frames after its own channel and sequence.
Older messages are read from the log again; what such a read brings back waits in a
smaller buffer of its own, keyed by channel and channel sequence, so that a backlog
being read does not push the live events out of the cache.
"""

from __future__ import annotations

from collections import OrderedDict

Payload = tuple[bytes, ...]

#: What one entry costs beyond its frames: the dict slot, the key and the tuple, the
#: frames' object headers, and the channels' ``recent`` entries pointing at it.
ENTRY_OVERHEAD = 400


def payload_bytes(payload: Payload) -> int:
    return sum(map(len, payload)) + ENTRY_OVERHEAD


def payload_frames(
    seq: int, topic: bytes, uuid: str, timestamp: str, producer: str, data: bytes
) -> Payload:
    """The PUBLISH payload of the logged event at global ``seq`` (``topic`` encoded): the
    frames :func:`~zbus.common.protocols.pppp_event.encode_event` gives, without the
    objects (the log's values are valid: no check again)."""
    return (
        topic,
        uuid.encode("ascii"),
        timestamp.encode("utf-8"),
        producer.encode("utf-8"),
        data,
        seq.to_bytes(8, "big"),
    )


class EventCache:
    """Recent events by global sequence, oldest first, within ``max_bytes``."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._events: OrderedDict[int, tuple[Payload, int]] = OrderedDict()
        self.held = 0

    def __len__(self) -> int:
        return len(self._events)

    def add(self, seq: int, payload: Payload, size: int = 0) -> None:
        """Keep ``payload`` of ``size`` bytes (:func:`payload_bytes`; 0: count them)."""
        size = size or payload_bytes(payload)
        self._events[seq] = (payload, size)
        self.held += size
        if self.held > self.max_bytes:
            events = self._events
            while self.held > self.max_bytes and events:
                self.held -= events.popitem(last=False)[1][1]

    def get(self, seq: int) -> Payload | None:
        entry = self._events.get(seq)
        return None if entry is None else entry[0]

    def entry(self, seq: int) -> tuple[Payload, int] | None:
        """The payload and its size (:func:`payload_bytes`), or None."""
        return self._events.get(seq)

    @property
    def oldest(self) -> int:
        """The lowest global sequence held (above every sequence ever added: empty)."""
        for seq in self._events:
            return seq
        return 1 << 64


class ReadBuffer:
    """Messages read back from the log: ``(channel uid, cseq) -> payload``, within
    ``max_bytes``, oldest out first."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._items: OrderedDict[tuple[int, int], Payload] = OrderedDict()
        self.held = 0

    def add(self, channel: int, cseq: int, payload: Payload) -> None:
        key = (channel, cseq)
        if key in self._items:
            return
        self._items[key] = payload
        self.held += payload_bytes(payload)
        while self.held > self.max_bytes and self._items:
            _, old = self._items.popitem(last=False)
            self.held -= payload_bytes(old)

    def get(self, channel: int, cseq: int) -> Payload | None:
        return self._items.get((channel, cseq))


__all__ = [
    "ENTRY_OVERHEAD",
    "EventCache",
    "Payload",
    "ReadBuffer",
    "payload_bytes",
    "payload_frames",
]
