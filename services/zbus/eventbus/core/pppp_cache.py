"""The PPPP door's recent events, bounded in bytes, sans-I/O (ADR 0006, "Backlogs are
positions").

Messages are not copied per subscriber: an event the door numbered is kept once, as the
payload frames of its PUBLISH (:func:`zbus.common.protocols.pppp_event.encode_event`),
keyed by its global sequence, and evicted oldest first once the cache passes its bound.
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


class EventCache:
    """Recent events by global sequence, oldest first, within ``max_bytes``."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._events: OrderedDict[int, Payload] = OrderedDict()
        self.held = 0

    def __len__(self) -> int:
        return len(self._events)

    def add(self, seq: int, payload: Payload) -> None:
        self._events[seq] = payload
        self.held += payload_bytes(payload)
        events = self._events
        while self.held > self.max_bytes and events:
            _, old = events.popitem(last=False)
            self.held -= payload_bytes(old)

    def get(self, seq: int) -> Payload | None:
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


__all__ = ["ENTRY_OVERHEAD", "EventCache", "Payload", "ReadBuffer", "payload_bytes"]
