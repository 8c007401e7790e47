"""Messages waiting for an mc0 connection whose ZeroMQ queue is full, bounded in bytes.

ZeroMQ bounds a connection's queue in messages (its high-water mark), not bytes. The
mc0 door keeps that mark low enough that the largest messages stay within half of
``mc0_peer_bytes``; a burst of small messages (a thousand OKs to a stress client) fills
it long before that. What does not fit waits here, counted in bytes (every frame with
ZeroMQ's bookkeeping of it) up to the other half, in order, and is sent as the queue
drains; a message past the bound is dropped and counted. So a connection that stops
reading holds at most ``mc0_peer_bytes`` of the bus's memory (docs/eventbus.md, "mc0").
"""

from __future__ import annotations

from collections import deque

from zbus.eventbus.core.mc0._core import Mc0Limits

FRAME_OVERHEAD = 64  # what ZeroMQ keeps per frame beyond its bytes (zmq_msg_t)


def message_bytes(limits: Mc0Limits) -> int:
    """The largest message one mc0 connection exchanges with the bus, either way, with
    ZeroMQ's bookkeeping of its frames: a PUT or MESSAGE of the largest data and topic,
    or a SUB of the most topics."""
    payload = max(
        limits.max_data_bytes + limits.max_topic_bytes,
        limits.max_topics_per_message * limits.max_topic_bytes,
    )
    return payload + FRAME_OVERHEAD * limits.max_frames + 1024


def smallest_peer_bytes(limits: Mc0Limits) -> int:
    """The least ``mc0_peer_bytes`` that works: ZeroMQ's half holds two of the largest
    messages, and so does the outbox's."""
    return 4 * message_bytes(limits)


def message_size(frames: list[bytes]) -> int:
    """The bytes a message holds while it waits, its bookkeeping included."""
    return sum(map(len, frames)) + FRAME_OVERHEAD * len(frames)


class Outbox:
    """Per connection, in order: what could not be handed to ZeroMQ yet."""

    def __init__(self, peer_bytes: int) -> None:
        self.peer_bytes = peer_bytes
        self._queues: dict[bytes, deque[list[bytes]]] = {}
        self._bytes: dict[bytes, int] = {}
        self.held = 0  # bytes waiting, every connection together

    def __bool__(self) -> bool:
        return bool(self._queues)

    def waiting(self, identity: bytes) -> bool:
        """True when messages for ``identity`` wait (a new one must queue behind them)."""
        return identity in self._queues

    def push(self, identity: bytes, frames: list[bytes]) -> bool:
        """Queue a message; False (and nothing queued) when it would pass the bound."""
        size = message_size(frames)
        held = self._bytes.get(identity, 0)
        if held + size > self.peer_bytes:
            return False
        queue = self._queues.get(identity)
        if queue is None:
            queue = self._queues[identity] = deque()
        queue.append(frames)
        self._bytes[identity] = held + size
        self.held += size
        return True

    def identities(self) -> list[bytes]:
        return list(self._queues)

    def first(self, identity: bytes) -> list[bytes]:
        return self._queues[identity][0]

    def pop(self, identity: bytes) -> None:
        """The first message of ``identity`` was sent."""
        queue = self._queues[identity]
        size = message_size(queue.popleft())
        self._bytes[identity] -= size
        self.held -= size
        if not queue:
            del self._queues[identity]
            del self._bytes[identity]

    def discard(self, identity: bytes) -> int:
        """Drop every message of ``identity`` (gone); returns how many."""
        queue = self._queues.pop(identity, None)
        if queue is None:
            return 0
        self.held -= self._bytes.pop(identity)
        return len(queue)

    def bytes_for(self, identity: bytes) -> int:
        return self._bytes.get(identity, 0)


__all__ = [
    "FRAME_OVERHEAD",
    "Outbox",
    "message_bytes",
    "message_size",
    "smallest_peer_bytes",
]
