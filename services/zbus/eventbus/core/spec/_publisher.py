"""The PUBLISHER door of the Event BUS, apart from its socket: which events spec
subscribers want, as BROADCAST, and when the bus is due to send HUGZ.

The pipeline (:mod:`zbus.eventbus.server.pipeline`) hands :meth:`SpecPublisher.subscribe`
every message its XPUB socket reads, sends what :meth:`SpecPublisher.broadcasts` yields
for each group of stored events, and asks :meth:`SpecPublisher.heartbeat` once the
:class:`HeartbeatSchedule` is due. ``now`` is monotonic seconds.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from zbus.common.protocols import eventbus as eb
from zbus.eventbus.core.log import Event


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
    topics: tuple[str, ...] = ()  # the prefixes as text, for str.startswith
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
        self.topics = tuple(p.decode("utf-8", "replace") for p in self.prefixes)
        return True

    @property
    def active(self) -> bool:
        """Some spec subscriber holds a prefix."""
        return bool(self.prefixes)

    def wants(self, topic: str) -> bool:
        """Some spec subscriber's prefix matches ``topic``."""
        return self.everything or topic.startswith(self.topics)


@dataclass
class HeartbeatSchedule:
    """When the bus is due to send HUGZ: ``interval`` after the last thing it sent."""

    interval: float
    due: float = 0.0

    def sent(self, now: float) -> None:
        """Something went out at ``now``: the next heartbeat is an interval later."""
        self.due = now + self.interval

    def timeout(self, now: float) -> float:
        """Seconds until the next heartbeat is due (0 when overdue)."""
        return max(0.0, self.due - now)

    def is_due(self, now: float) -> bool:
        """A heartbeat is due at ``now``."""
        return now >= self.due


class SpecPublisher:
    """What the PUBLISHER socket sends: BROADCAST for the events spec subscribers want,
    HUGZ when the bus has been silent for the heartbeat interval."""

    def __init__(self, dialect: eb.Dialect, heartbeat_interval: float, *, hugz: bool) -> None:
        """``hugz``: False for the Node.js dialect, whose client knows no HUGZ."""
        self.dialect = dialect
        self.hugz = hugz
        self.subscriptions = Subscriptions()
        self.beat = HeartbeatSchedule(heartbeat_interval)

    def subscribe(self, message: bytes) -> bool:
        """Apply one XPUB message; False when it is none (count it as refused)."""
        return self.subscriptions.update(message)

    def broadcasts(self, stored: Sequence[Event]) -> Iterator[list[bytes]]:
        """The BROADCAST of each stored event some spec subscriber wants, in order."""
        subs = self.subscriptions
        if not subs.active:
            return
        encode, dialect, wants, broadcast = eb.encode, self.dialect, subs.wants, eb.Broadcast
        for e in stored:
            if wants(e.topic):
                yield encode(broadcast(e.topic, e.seq, e.producer, e.ts, e.uuid, e.data), dialect)

    def heartbeat(self, sequence: int, now: float) -> list[bytes] | None:
        """HUGZ with the log's last ``sequence`` (None: the dialect has none); the
        schedule starts over from ``now``."""
        self.beat.sent(now)
        return eb.encode(eb.Heartbeat(sequence), self.dialect) if self.hugz else None

    def next_deadline(self) -> float:
        """When the next heartbeat is due."""
        return self.beat.due
