"""The PPPP door's vocabulary, sans-I/O: its bounds, what it stores, the reads of the log
it asks its shell for, and the label values of its counts (ADR 0006).
"""

from __future__ import annotations

from dataclasses import dataclass

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
    conversation is gone); ``checkpoints[channel]`` is ``(cseq, seq)`` (None: gone).

    ``hold`` is the global sequence retention must keep everything above once these are
    stored (the lowest checkpoint; None: no hold), ``held`` the hold handed out before.
    A hold that goes down (a new channel) is set before the write, one that goes up after
    it succeeded (:attr:`hold_first`).
    """

    positions: dict[tuple[bytes, str], int | None]
    checkpoints: dict[str, tuple[int, int] | None]
    hold: int | None = None
    held: int | None = None

    def __bool__(self) -> bool:
        """Something to write (positions or checkpoints)."""
        return bool(self.positions or self.checkpoints)

    @property
    def hold_moves(self) -> bool:
        return self.hold != self.held

    @property
    def hold_first(self) -> bool:
        """The hold goes down: set it before the checkpoints that need it are stored."""
        return self.hold is not None and (self.held is None or self.hold < self.held)


# ---------------------------------------------------------------------- reads of the log
@dataclass(frozen=True, slots=True)
class MessagesRead:
    """Read messages of a channel older than the cache, from channel sequence ``cseq``:
    the log's events of ``channel`` (by prefix) above global ``after_seq``, in log order,
    skipping ``skip`` of them, ``count`` at most. Answer with
    :meth:`~zbus.eventbus.core.pppp.PpppCore.on_messages`."""

    channel: str
    uid: int
    cseq: int
    after_seq: int
    skip: int
    count: int


@dataclass(frozen=True, slots=True)
class SyncRead:
    """Read one page of a SYNC: the latest event of up to ``limit`` topics of ``channel``
    after the topic ``after``, in topic order, keeping those at global sequence
    ``through`` or below. Answer with
    :meth:`~zbus.eventbus.core.pppp.PpppCore.on_sync_page`."""

    channel: str
    identity: bytes
    token: int
    after: str | None
    through: int
    limit: int


@dataclass(frozen=True, slots=True)
class CatchUpRead:
    """Read the log above global ``after_seq`` for ``channels`` (none: only the log's last
    sequence), ``limit`` events and ``max_bytes`` at most: after a restart or a gap in the
    stream. Answer with :meth:`~zbus.eventbus.core.pppp.PpppCore.on_log_page`, or
    :meth:`~zbus.eventbus.core.pppp.PpppCore.read_failed`."""

    channels: tuple[str, ...]
    after_seq: int
    limit: int
    max_bytes: int


Read = MessagesRead | SyncRead | CatchUpRead


__all__ = [
    "COMMANDS",
    "MAX_CHANNEL_BYTES",
    "QUEUE_MARGIN",
    "REASONS",
    "SENT",
    "CatchUpRead",
    "Changes",
    "Limits",
    "MessagesRead",
    "Read",
    "SyncRead",
]
