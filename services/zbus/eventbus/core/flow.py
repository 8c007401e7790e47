"""What one peer can make the bus hold, in bytes, and the message sizes that bound it.

ZeroMQ bounds a peer's queue in messages (its high-water mark, HWM), not in bytes. The
bus turns a byte bound into a message count by capping the size of every message a socket
carries: a peer then holds at most ``(HWM + 1) x largest message`` (the queue and the one
message its connection is writing or reading), and the HWM is chosen as
``peer_bytes // largest message - 1`` (ADR 0002, docs/eventbus.md "Slow peers and memory"):

- STREAM: a group commit is cut into messages of at most ``message_bytes``;
- PUBLISHER: one event per BROADCAST, at most ``record_bytes``;
- SNAPSHOT: pages of at most ``message_bytes``, one event per SYNC; requests of at most
  ``SNAPSHOT_REQUEST_BYTES``;
- COLLECTOR: requests of at most ``max_message_bytes``; confirms of at most
  ``confirm_bytes``.

Pure arithmetic, no I/O: the server applies the numbers to its sockets.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from zbus.common.protocols.eventbus_limits import (
    MAX_SUBTREES,
    MAX_TOPIC_BYTES,
    RECORD_OVERHEAD,
    UUID_CHARS,
)

MIN_MESSAGE_BYTES = 256 * 1024  # stream messages and pages may hold this much, whatever
# the largest event: batching is what makes the stream fast (DESIGN.md)
SNAPSHOT_REQUEST_BYTES = MAX_SUBTREES * (MAX_TOPIC_BYTES + 8) + 64 * 1024
_CONFIRM_ROW_BYTES = UUID_CHARS + 12  # [uuid, seq] in msgpack


def hwm_for(peer_bytes: int, message_bytes: int) -> int:
    """The HWM that keeps ``(HWM + 1)`` messages of ``message_bytes`` within ``peer_bytes``;
    0 when not even two fit (a configuration to refuse)."""
    return max(0, peer_bytes // message_bytes - 1)


def row_bytes(topic: str, producer: str, ts: str, data: bytes) -> int:
    """At least what one event takes in a stream message or a page (msgpack): text is
    counted at 4 bytes a character, the most UTF-8 takes, plus every header."""
    return len(data) + 4 * (len(topic) + len(producer) + len(ts)) + UUID_CHARS + 32


@dataclass(frozen=True, slots=True)
class QueueBound:
    """What bounds the queue of one direction of one socket: its HWM and the largest
    message it carries."""

    hwm: int
    message_bytes: int

    @property
    def bound(self) -> int:
        """What one peer can hold here: the queue and the message in flight."""
        return (self.hwm + 1) * self.message_bytes


@dataclass(frozen=True, slots=True)
class PeerBounds:
    """The bounds of every socket direction of the bus's spec ports, from its settings."""

    record_bytes: int  # the largest event in any one message
    message_bytes: int  # the largest stream message or page
    stream: QueueBound
    publisher: QueueBound
    snapshot_out: QueueBound
    snapshot_in: QueueBound
    collector_in: QueueBound
    collector_out: QueueBound

    @classmethod
    def from_settings(
        cls,
        *,
        max_event_bytes: int,
        max_message_bytes: int,
        max_batch_events: int,
        stream_peer_bytes: int,
        publisher_peer_bytes: int,
        snapshot_peer_bytes: int,
        collector_peer_bytes: int,
    ) -> PeerBounds:
        record = max_event_bytes + RECORD_OVERHEAD
        message = max(MIN_MESSAGE_BYTES, record)
        confirm = max_batch_events * _CONFIRM_ROW_BYTES + 1024

        def bound(peer_bytes: int, size: int) -> QueueBound:
            return QueueBound(hwm_for(peer_bytes, size), size)

        return cls(
            record_bytes=record,
            message_bytes=message,
            stream=bound(stream_peer_bytes, message),
            publisher=bound(publisher_peer_bytes, record),
            snapshot_out=bound(snapshot_peer_bytes, message),
            snapshot_in=bound(snapshot_peer_bytes, SNAPSHOT_REQUEST_BYTES),
            collector_in=bound(collector_peer_bytes, max_message_bytes),
            collector_out=bound(collector_peer_bytes, confirm),
        )

    def queues(self) -> list[tuple[str, str, QueueBound]]:
        """Each socket direction's bound: ``(its name in the admin API, the setting that
        bounds it, its bound)``."""
        return [
            ("stream", "stream_peer_bytes", self.stream),
            ("publisher", "publisher_peer_bytes", self.publisher),
            ("snapshot_replies", "snapshot_peer_bytes", self.snapshot_out),
            ("snapshot_requests", "snapshot_peer_bytes", self.snapshot_in),
            ("collector_requests", "collector_peer_bytes", self.collector_in),
            ("collector_replies", "collector_peer_bytes", self.collector_out),
        ]

    def problems(self) -> list[str]:
        """Why these numbers cannot be used (each queue must hold two messages), by setting."""
        return [
            f"{setting} must be at least {2 * queue.message_bytes} bytes: two messages "
            f"of up to {queue.message_bytes} bytes"
            for _, setting, queue in self.queues()
            if queue.hwm < 1
        ]

    def table(self) -> dict[str, dict[str, int]]:
        """The numbers by socket direction, as the admin API shows them."""
        return {
            name: {"hwm": queue.hwm, "message_bytes": queue.message_bytes, "bound": queue.bound}
            for name, _, queue in self.queues()
        }


def stream_messages(
    first: int, rows: Sequence[Any], cap: int, pack: Callable[[Any], bytes]
) -> list[tuple[int, bytes]]:
    """A group commit's stream payloads ``(first sequence, packed [first, rows])``, each
    at most ``cap`` bytes unless it is a single event.

    The whole commit is packed once; only when it is over ``cap`` is it cut, into a few
    more parts than its size needs, and a part still over ``cap`` is cut again.
    """
    payload = pack([first, rows])
    if len(payload) <= cap or len(rows) <= 1:
        return [(first, payload)]
    parts = -(-len(payload) // cap) + 1
    size = -(-len(rows) // parts)
    out: list[tuple[int, bytes]] = []
    for start in range(0, len(rows), size):
        out += stream_messages(first + start, rows[start : start + size], cap, pack)
    return out
