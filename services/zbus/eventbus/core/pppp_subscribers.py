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

from dataclasses import dataclass, field

from zbus.eventbus.core.pppp_channels import Channel


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


@dataclass(slots=True)
class Conversation:
    """One subscriber on one channel."""

    channel: Channel
    acked: int
    next: int
    resend: list[tuple[int, int]] = field(default_factory=list)  # sorted, disjoint
    sync: Sync | None = None
    inflight_bytes: int = 0
    live: bool = True
    grace_until: float | None = None
    saved: int = -1  # the acked position last handed out to be stored

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
        """Send again from the first message not ACKed (a new conversation)."""
        self.next = self.acked + 1
        self.resend.clear()
        self.inflight_bytes = 0
        self.live = True
        self.grace_until = None

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
        before = self.sent - self.acked
        self.acked = new_acked
        after = self.sent - self.acked
        self.inflight_bytes = 0 if after <= 0 else self.inflight_bytes * after // before
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


def identity_text(identity: bytes) -> str:
    """A subscriber's name: its identity as text when it is printable UTF-8, else hex."""
    try:
        name = identity.decode("utf-8")
    except UnicodeDecodeError:
        return identity.hex()
    if name and name.isprintable():
        return name
    return identity.hex()


__all__ = ["Conversation", "Subscriber", "Sync", "Times", "identity_text"]
