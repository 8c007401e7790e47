"""An mc0 client's side of the TTL heartbeat (seed 001, CONNECT's TTL), sans-I/O.

The client sends NOOP after ``0.95 x TTL`` of its own silence, so that the bus, which
drops a connection after ``1.05 x TTL`` of silence, keeps its session; and it takes the
session for lost after ``1.05 x TTL`` without hearing the bus, which sends NOOP after
``0.95 x TTL`` of its silence. A lost session is opened again (CONNECT, SUB).
"""

from __future__ import annotations

from dataclasses import dataclass

from zbus.eventbus.core.mc0._core import DROP_AFTER, NOOP_AFTER


@dataclass
class Liveness:
    """When a client last sent and last heard, and what that calls for. Times are
    monotonic seconds; ``ttl`` is in seconds."""

    ttl: float
    sent_at: float = 0.0
    heard_at: float = 0.0

    def reset(self, now: float) -> None:
        self.sent_at = self.heard_at = now

    def sent(self, now: float) -> None:
        self.sent_at = now

    def heard(self, now: float) -> None:
        self.heard_at = now

    def noop_due(self, now: float) -> bool:
        return now >= self.sent_at + NOOP_AFTER * self.ttl

    def lost(self, now: float) -> bool:
        return now >= self.heard_at + DROP_AFTER * self.ttl

    def next_deadline(self) -> float:
        return min(self.sent_at + NOOP_AFTER * self.ttl, self.heard_at + DROP_AFTER * self.ttl)


__all__ = ["Liveness"]
