"""The PPPP door's vocabulary, sans-I/O: its bounds, what it stores, where it reads the
log, and the label values of its counts (ADR 0006). Used by :mod:`zbus.eventbus.core.pppp`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from zbus.eventbus.core.pppp_cache import Payload

MiB = 1024 * 1024

#: Commands counted on the way in ("malformed": a message that does not decode).
COMMANDS = ("SUBSCRIBE", "ACK/NACK", "HEARTBEAT", "CUSTOM", "malformed")
#: Why a message was dropped: bounded label values.
REASONS = (
    "frame_count",
    "unknown_command",
    "bad_value",
    "out_of_range",
    "malformed",
    "no_conversation",
    "not_subscribed",
    "ack_above_sent",
    "too_many_channels",
    "too_many_subscribers",
    "custom_too_large",
    "channel_too_long",
    "too_many_ranges",
)
MAX_CHANNEL_BYTES = 1024
QUEUE_MARGIN = 256  # messages beyond a window in ZeroMQ's queue: HEARTBEATs, SYNC
SENT = ("publish", "resend", "sync", "heartbeat")

#: ``send(identity, frames) -> bool``: False when ZeroMQ's queue for it is full.
Send = Callable[[bytes, list[bytes]], bool]


class EventSource(Protocol):
    """The log, for messages older than the cache and for SYNC."""

    def read(
        self, channel: str, after_seq: int, skip: int, count: int
    ) -> list[tuple[int, Payload]]:
        """Up to ``count`` events of ``channel`` (by prefix) above global ``after_seq``,
        in log order, after skipping ``skip`` of them: ``(global seq, payload)``."""
        ...

    def sync_page(
        self, channel: str, after: str | None, through: int, limit: int
    ) -> tuple[list[Payload], str | None]:
        """The latest event of up to ``limit`` topics of ``channel`` after the topic
        ``after``, in topic order, those at global sequence ``through`` or below; and the
        cursor of the next page (None: the last page)."""
        ...


@dataclass(frozen=True, slots=True)
class Limits:
    """Bounds of the door (settings ``ZBUS_PPPP_*``; ``max_custom_bytes`` is
    ``ZBUS_MAX_EVENT_BYTES``)."""

    window: int = 10_000
    peer_bytes: int = 64 * MiB
    cache_bytes: int = 64 * MiB
    max_channels: int = 64
    max_subscribers: int = 10_000
    max_custom_bytes: int = MiB

    @property
    def queue_messages(self) -> int:
        """ZeroMQ's queue towards one subscriber, in messages (the ROUTER's send HWM): a
        window, and room for HEARTBEATs and a SYNC page."""
        return self.window + QUEUE_MARGIN


@dataclass(frozen=True, slots=True)
class Changes:
    """What to store: ``positions[(identity, channel)]`` is the ACKed sequence (None: the
    conversation is gone); ``checkpoints[channel]`` is ``(cseq, seq)`` (None: gone)."""

    positions: dict[tuple[bytes, str], int | None]
    checkpoints: dict[str, tuple[int, int] | None]

    def __bool__(self) -> bool:
        return bool(self.positions or self.checkpoints)


__all__ = [
    "COMMANDS",
    "MAX_CHANNEL_BYTES",
    "QUEUE_MARGIN",
    "REASONS",
    "SENT",
    "Changes",
    "EventSource",
    "Limits",
    "Send",
]
