"""Pure logic of the event bus: no sockets, no SQLite, the time passed in."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field


def matches(topic: str, subtrees: tuple[str, ...]) -> bool:
    """Plain prefix match; no subtree (or an empty one) matches every topic."""
    return not subtrees or topic.startswith(subtrees)


@dataclass
class Subscriptions:
    """The prefixes spec subscribers hold on the PUBLISHER socket, from XPUB messages.

    XPUB reports a prefix when its first subscriber subscribes and again when its last
    one leaves, so a set is exact. With no prefix at all the bus skips the per-event
    BROADCAST work entirely.
    """

    prefixes: set[bytes] = field(default_factory=set)
    _tuple: tuple[str, ...] = ()
    everything: bool = False

    def update(self, message: bytes) -> bool:
        """Apply one XPUB message: 0x01 + prefix subscribes, 0x00 + prefix unsubscribes.

        Returns False for anything else (which a subscriber has no business sending).
        """
        if not message or message[0] not in (0, 1):
            return False
        prefix = message[1:]
        if message[0] == 1:
            self.prefixes.add(prefix)
        else:
            self.prefixes.discard(prefix)
        self.everything = b"" in self.prefixes
        self._tuple = tuple(p.decode("utf-8", "replace") for p in self.prefixes)
        return True

    @property
    def active(self) -> bool:
        return bool(self.prefixes)

    def wants(self, topic: str) -> bool:
        return self.everything or topic.startswith(self._tuple)


class RateMeter:
    """Events per second over a sliding window, from (time, running total) samples."""

    def __init__(self, window: float = 10.0) -> None:
        self.window = window
        self._samples: deque[tuple[float, float]] = deque()

    def sample(self, now: float, total: float) -> None:
        self._samples.append((now, total))
        while len(self._samples) > 2 and now - self._samples[0][0] > self.window:
            self._samples.popleft()

    def rate(self) -> float:
        if len(self._samples) < 2:
            return 0.0
        (t0, v0), (t1, v1) = self._samples[0], self._samples[-1]
        return (v1 - v0) / (t1 - t0) if t1 > t0 else 0.0


@dataclass
class HeartbeatSchedule:
    """When the bus is due to send HUGZ: ``interval`` after the last thing it sent."""

    interval: float
    due: float = 0.0

    def sent(self, now: float) -> None:
        self.due = now + self.interval

    def timeout(self, now: float) -> float:
        """Seconds until the next heartbeat is due (0 when overdue)."""
        return max(0.0, self.due - now)

    def is_due(self, now: float) -> bool:
        return now >= self.due
