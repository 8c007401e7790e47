"""A subscription core driven through whole conversations, for its unit tests.

A ``FakeLog`` answers ZB-SNAPSHOT queries the way the bus's store does (latest value per
topic in topic order with a topic cursor; the log in sequence order with a sequence
cursor); a ``Driver`` feeds the core, answers its queries from the log and collects what
it delivers, with a fake clock.
"""

from __future__ import annotations

from typing import Any

from zbus.common.protocols import eventbus_ext as ext
from zbus.eventbus.core.log import Event
from zbus.eventbus.core.sync import Actions, Phase, SubscriptionCore

TS = "2026-11-22T08:35:32.862Z"


def uid(seq: int, bus: int = 0) -> str:
    """A uuid that names the event and the bus it was logged by."""
    return f"{bus:08x}-0000-4000-8000-{seq:012x}"


class FakeLog:
    """An event log with the store's query semantics; events are (seq, topic)."""

    def __init__(self, bus: int = 0) -> None:
        self.bus = bus
        self.events: list[ext.SequencedEvent] = []

    @property
    def seq(self) -> int:
        return self.events[-1].sequence if self.events else 0

    def publish(self, *topics: str) -> tuple[int, list[list[Any]]]:
        """Log events; returns them as one stream batch (first_seq, rows)."""
        first = self.seq + 1
        for topic in topics:
            seq = self.seq + 1
            self.events.append(ext.SequencedEvent(seq, topic, "p", TS, uid(seq, self.bus), b"d"))
        return first, [row(e) for e in self.events[first - 1 :]]

    def answer(self, q: ext.SnapshotQuery) -> ext.SnapshotPage:
        match = [e for e in self.events if not q.subtrees or e.topic.startswith(q.subtrees)]
        if q.mode == "latest":
            latest: dict[str, ext.SequencedEvent] = {}
            for e in match:
                latest[e.topic] = e
            rows = sorted(
                (e for e in latest.values() if e.sequence > q.since), key=lambda e: e.topic
            )
            if q.after is not None:
                rows = [e for e in rows if e.topic > q.after]
            if len(rows) > q.limit:
                return ext.SnapshotPage(tuple(rows[: q.limit]), rows[q.limit - 1].topic, self.seq)
            return ext.SnapshotPage(tuple(rows), None, self.seq)
        start = q.since if q.after is None else int(q.after)
        rows = [e for e in match if e.sequence > start][: q.limit]
        nxt = str(rows[-1].sequence) if len(rows) == q.limit else None
        return ext.SnapshotPage(tuple(rows), nxt, self.seq)


def row(e: ext.SequencedEvent) -> list[Any]:
    return [e.topic, e.producer, e.timestamp, e.uuid, e.data]


def seqs(actions: Actions) -> list[int]:
    return [e.seq for e in actions.events]


def pairs(events: list[Event]) -> list[tuple[int, str]]:
    return [(e.seq, e.topic) for e in events]


class Driver:
    """Feeds a core and answers its queries from a FakeLog; collects what it delivers."""

    def __init__(self, core: SubscriptionCore, log: FakeLog) -> None:
        self.core = core
        self.log = log
        self.now = 0.0
        self.out: list[Event] = []
        self.query: ext.SnapshotQuery | None = None
        self.resets = 0
        self.failovers = 0

    def take(self, actions: Actions) -> Actions:
        self.out += actions.events
        if actions.reset:
            self.resets += 1
        if actions.failover:
            self.failovers += 1
        self.query = actions.query
        return actions

    def start(self) -> Actions:
        return self.take(self.core.start(self.now))

    def answer(self) -> Actions:
        assert self.query is not None, "no query outstanding"
        page = self.log.answer(self.query)
        return self.take(self.core.on_page(page, self.now))

    def answer_all(self) -> None:
        while self.query is not None:
            self.answer()

    def batch(self, batch: tuple[int, list[list[Any]]]) -> Actions:
        actions = self.core.on_batch(batch[0], batch[1], self.now)
        if actions.query is not None or actions.failover:
            return self.take(actions)
        self.out += actions.events
        return actions

    def heartbeat(self, seq: int | None = None) -> Actions:
        actions = self.core.on_heartbeat(self.log.seq if seq is None else seq, self.now)
        if actions.query is not None or actions.failover:
            return self.take(actions)
        self.out += actions.events
        return actions


def live(subtrees: tuple[str, ...] = (), log: FakeLog | None = None) -> Driver:
    """A driver whose core has read the (possibly empty) snapshot and is live."""
    d = Driver(SubscriptionCore(subtrees, heartbeat_interval=1.0, misses=3), log or FakeLog())
    d.start()
    d.answer_all()
    assert d.core.phase is Phase.LIVE
    return d


def fail_over(d: Driver, log: FakeLog) -> Actions:
    d.now += d.core.timeout
    assert d.take(d.core.tick(d.now)).failover
    d.log = log
    return d.take(d.core.reconnect(d.now))
