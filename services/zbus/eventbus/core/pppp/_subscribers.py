"""PPPP subscribers and their conversations: positions and timers, sans-I/O (ADR 0006,
"Backlogs are positions" and "The conversation").

Per subscriber (a ROUTER identity) the door keeps when it last heard from it and last
sent to it; per subscriber and channel a :class:`Conversation` of positions: ``acked``
(every message up to it was received), ``next`` (the next new message to send), the
NACKed ranges to resend, and the SYNC under way. No message is copied here.

Times (monotonic seconds, passed in) follow :class:`Times`:

- HEARTBEAT to the subscriber after ``first_idle`` of the door's silence, then every
  ``idle`` (any message sent counts as one);
- the first-idle resend: a subscriber that owes an ACK, from which no ACK/NACK came for
  ``misses x first_idle`` while nothing was published to it, gets the last message sent
  again (its HEARTBEATs do not count: the spec asks for an ACK/NACK);
- disconnected after ``misses x idle`` of silence from the subscriber (anything it sends
  counts); its conversations are then kept for ``grace`` and dropped after.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from zbus.eventbus.core.pppp._channels import Channel

#: What one message in flight costs beyond its frames' bytes: in ZeroMQ's queue a 64-byte
#: ``msg_t`` per frame (nine for a PUBLISH with the identity) and the allocation of each
#: frame longer than 33 bytes (768 bytes), and the door's own ``(sequence, bytes)`` entry
#: (128). Every message sent is counted with it, so that the bytes the door counts bound
#: the memory a subscriber's messages in flight take, however small the events.
MESSAGE_OVERHEAD = 768 + 128


@dataclass(frozen=True, slots=True)
class Times:
    """The door's times in seconds (settings ``ZBUS_PPPP_FIRST_IDLE``, ``_IDLE``,
    ``_MISSES``, ``_GRACE``)."""

    first_idle: float = 0.1
    idle: float = 1.0
    misses: int = 4
    grace: float = 300.0

    @property
    def silent_resend(self) -> float:
        return self.misses * self.first_idle

    @property
    def dead_after(self) -> float:
        return self.misses * self.idle


@dataclass(slots=True)
class Sync:
    """A SYNC under way: the state of the channel at message ``head`` (global ``seq``)."""

    head: int
    seq: int
    cursor: str | None = None  # the last topic sent; None: from the start
    items: int = 0
    pages_done: bool = False  # every item sent
    ended: bool = False  # the end marker sent
    acked: bool = False
    reading: int = 0  # the token of the page read asked for (0: none)
    # The page read and not sent yet: its items and the cursor of the next page (None:
    # the last page). Kept only until the next pump: what it cannot send then is read again.
    page: tuple[list[tuple[bytes, ...]], str | None] | None = None


@dataclass(slots=True)
class Conversation:
    """One subscriber on one channel."""

    channel: Channel
    acked: int
    next: int
    resend: list[tuple[int, int]] = field(default_factory=list)  # sorted, disjoint
    sync: Sync | None = None
    # Messages sent and not ACKed, in the order sent: (sequence, bytes counted). A resend
    # is there again: both copies may be in ZeroMQ's queue until the ACK.
    flight: deque[tuple[int, int]] = field(default_factory=deque)
    inflight_bytes: int = 0
    # SYNC items (and ends) sent and not ACKed: (the subscriber's send count after it,
    # bytes). Released by the SYNC's ACK, or once ZeroMQ's queue has provably passed them.
    sync_flight: deque[tuple[int, int]] = field(default_factory=deque)
    sync_bytes: int = 0
    live: bool = True
    grace_until: float | None = None
    saved: int = -1  # the acked position last handed out to be stored
    # False while a replicated bus's in-sync replicas do not hold where it starts: the
    # door that takes over after a failover must know it (ADR 0010).
    settled: bool = True

    @property
    def sent(self) -> int:
        """The highest message sent."""
        return self.next - 1

    @property
    def owes_ack(self) -> bool:
        return self.acked < self.sent or (
            self.sync is not None and self.sync.ended and not self.sync.acked
        )

    def restart(self) -> None:
        """Send again from the first message not ACKed (a new conversation). What was
        sent stays counted: on the same connection it is still ahead in ZeroMQ's queue
        (a new connection forgets it, :meth:`forget`)."""
        self.next = self.acked + 1
        self.resend.clear()
        self.live = True
        self.grace_until = None

    def release(self) -> int:
        """Stop counting what the ACKs cover: the sent messages up to ``acked``, from the
        oldest sent on (a resend still in ZeroMQ's queue behind a newer message waits for
        the ACK that covers both). Returns the bytes released."""
        flight, acked, freed = self.flight, self.acked, 0
        while flight and flight[0][0] <= acked:
            freed += flight.popleft()[1]
        self.inflight_bytes -= freed
        return freed

    def release_sync(self) -> int:
        """Stop counting the SYNC's messages (its ACK came). Returns the bytes released."""
        freed, self.sync_bytes = self.sync_bytes, 0
        self.sync_flight.clear()
        return freed

    def forget(self) -> int:
        """The connection is gone, and ZeroMQ's queue with it: nothing is in flight any
        more. Returns the bytes released."""
        freed = self.inflight_bytes + self.sync_bytes
        self.flight.clear()
        self.sync_flight.clear()
        self.inflight_bytes = self.sync_bytes = 0
        return freed

    def apply_ack(self, highest: int, missing: tuple[tuple[int, int], ...]) -> tuple[bool, int]:
        """Take an ACK/NACK already checked to be within what was sent.

        ``highest`` ACKs every message up to it but those the NACK ranges name; those are
        resent. An ACK below what was sent leaves the rest in flight (a lost tail is
        found by the first-idle resend). Returns (``acked`` moved, messages NACKed).
        """
        floor = self.acked + 1
        wanted = [(max(first, floor), last) for first, last in missing if last >= floor]
        nacked = self.add_resend(wanted) if wanted else 0
        lowest_missing = min((first for first, _ in wanted), default=highest + 1)
        new_acked = min(highest, lowest_missing - 1)
        if new_acked <= self.acked:
            return False, nacked
        self.acked = new_acked
        self.resend = [(max(f, new_acked + 1), la) for f, la in self.resend if la > new_acked]
        return True, nacked

    def add_resend(self, ranges: list[tuple[int, int]]) -> int:
        """Merge inclusive ranges into those to resend; returns how many are new."""
        held = self.resend
        before = sum(b - a + 1 for a, b in held)
        merged: list[tuple[int, int]] = []
        for a, b in sorted(held + ranges):
            if merged and a <= merged[-1][1] + 1:
                if b > merged[-1][1]:
                    merged[-1] = (merged[-1][0], b)
            else:
                merged.append((a, b))
        self.resend = merged
        return sum(b - a + 1 for a, b in merged) - before


@dataclass(slots=True)
class Subscriber:
    """One ROUTER identity and its conversations."""

    identity: bytes
    heard_at: float
    sent_at: float
    published_at: float  # the last PUBLISH (not HEARTBEAT) sent
    answered_at: float  # the last ACK/NACK or SUBSCRIBE heard
    live: bool = True
    beat: bool = False  # the last message sent was a HEARTBEAT
    conversations: dict[str, Conversation] = field(default_factory=dict)
    blocked: bool = False  # its ZeroMQ queue was full at the last send
    inflight: int = 0  # bytes counted in flight over its conversations (<= peer bytes)
    sends: int = 0  # messages ZeroMQ took for it, all kinds
    connection: object = None  # the connection it last spoke on (None: unknown)

    def heard(self, now: float) -> None:
        self.heard_at = now

    def sent(self, now: float, *, publish: bool) -> None:
        self.sent_at = now
        self.beat = not publish
        if publish:
            self.published_at = now

    def heartbeat_due(self, times: Times) -> float:
        return self.sent_at + (times.idle if self.beat else times.first_idle)

    def dead_at(self, times: Times) -> float:
        return self.heard_at + times.dead_after

    def owes_ack(self) -> bool:
        return any(c.live and c.owes_ack for c in self.conversations.values())

    def resend_due(self, times: Times) -> float | None:
        """When the first-idle resend is due, or None when nothing is owed."""
        if not self.owes_ack():
            return None
        return max(self.answered_at, self.published_at) + times.silent_resend

    def grace_ends(self) -> float | None:
        ends = [c.grace_until for c in self.conversations.values() if c.grace_until is not None]
        return min(ends) if ends else None

    def next_due(self, times: Times) -> float | None:
        """When a timer of this subscriber is next due (None: none is)."""
        if self.live:
            due = min(self.heartbeat_due(times), self.dead_at(times))
            resend = self.resend_due(times)
            return due if resend is None else min(due, resend)
        return self.grace_ends()


def identity_text(identity: bytes) -> str:
    """A subscriber's name: its identity as text when it is printable UTF-8, else hex."""
    try:
        name = identity.decode("utf-8")
    except UnicodeDecodeError:
        return identity.hex()
    if name and name.isprintable():
        return name
    return identity.hex()


__all__ = ["MESSAGE_OVERHEAD", "Conversation", "Subscriber", "Sync", "Times", "identity_text"]
