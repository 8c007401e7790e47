"""The plain-protocol subscription core alone: SYNCSTART/SYNC/SYNCEND and BROADCASTs.

A ``PlainBus`` answers SYNCSTART as the bus does (the latest event of each topic for
sequence 0, every event above N otherwise) and hands out what its PUB socket sends to a
subscription that has reached it, so the tests drive whole conversations with a fake
clock, including a subscription that reaches the bus late.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zbus.common.protocols import eventbus as eb
from zbus.eventbus.core.log import Event
from zbus.eventbus.core.plain_sync import PlainSubscriptionCore
from zbus.eventbus.core.sync import NOTHING, Actions, Phase

TS = "2026-11-22T08:35:32.862Z"


def uid(seq: int) -> str:
    return f"00000000-0000-4000-8000-{seq:012x}"


class PlainBus:
    """Events as (seq, topic); SYNCSTART answered as zbus (and, for N > 0, Node.js) do."""

    def __init__(self) -> None:
        self.events: list[eb.Broadcast] = []

    @property
    def seq(self) -> int:
        return self.events[-1].sequence if self.events else 0

    def publish(self, *topics: str) -> list[eb.Broadcast]:
        out = []
        for topic in topics:
            seq = self.seq + 1
            event = eb.Broadcast(topic, seq, "p", TS, uid(seq), b"d")
            self.events.append(event)
            out.append(event)
        return out

    def answer(self, q: eb.SyncStart) -> list[eb.Sync | eb.SyncEnd]:
        match = [e for e in self.events if not q.subtrees or e.topic.startswith(q.subtrees)]
        if q.sequence == 0:
            latest = {e.topic: e for e in match}
            chosen = sorted(latest.values(), key=lambda e: e.topic)
        else:
            chosen = [e for e in match if e.sequence > q.sequence]
        out: list[eb.Sync | eb.SyncEnd] = [
            eb.Sync(e.topic, e.sequence, e.producer, e.timestamp, e.uuid, e.data) for e in chosen
        ]
        out.append(eb.SyncEnd(q.subtrees, self.seq))
        return out


class Client:
    """A core, what it delivered, and its outstanding SYNCSTART."""

    def __init__(self, core: PlainSubscriptionCore, bus: PlainBus) -> None:
        self.core = core
        self.bus = bus
        self.got: list[Event] = []
        self.query: eb.SyncStart | None = None
        self.resets = 0
        self.failovers = 0

    def act(self, actions: Actions) -> None:
        self.got += actions.events
        self.resets += actions.reset
        self.failovers += actions.failover
        if actions.query is not None:
            assert isinstance(actions.query, eb.SyncStart)
            self.query = actions.query

    def answer(self, now: float = 0.0) -> None:
        """The bus answers the outstanding SYNCSTART, all at once."""
        assert self.query is not None
        query, self.query = self.query, None
        for reply in self.bus.answer(query):
            if isinstance(reply, eb.SyncEnd):
                self.act(self.core.on_sync_end(reply, now))
            else:
                self.act(self.core.on_sync(reply, now))

    def live(self, events: list[eb.Broadcast], now: float = 0.0) -> None:
        for e in events:
            self.act(self.core.on_broadcast(e, now))

    def seqs(self) -> list[int]:
        return [e.seq for e in self.got]


def started(bus: PlainBus, subtrees: tuple[str, ...] = (), since: int = 0) -> Client:
    client = Client(PlainSubscriptionCore(subtrees, since, 1.0, 3), bus)
    client.act(client.core.start(0.0))
    return client


def test_state_then_live_events_once_the_connection_is_proven() -> None:
    bus = PlainBus()
    bus.publish("/a", "/b", "/a")
    c = started(bus, ("/a", "/b"))
    assert c.query == eb.SyncStart(("/a", "/b"), 0)
    c.answer()
    assert [(e.seq, e.topic) for e in c.got] == [(3, "/a"), (2, "/b")]
    assert c.core.last == 3 and c.core.phase is Phase.LIVE
    # The first BROADCAST follows the snapshot without a gap: nothing can be missing.
    c.live(bus.publish("/b"))
    assert c.seqs() == [3, 2, 4] and c.query is None
    c.live(bus.publish("/a", "/zzz"))  # a topic outside the subtrees is not delivered
    assert c.seqs() == [3, 2, 4, 5]


def test_a_subscription_that_reached_the_bus_late_is_caught_up_from_the_log() -> None:
    bus = PlainBus()
    bus.publish("/a")
    c = started(bus)
    c.answer()  # the state: sequence 1
    # Events 2 and 3 went out before the PUB subscription reached the bus; 4 came.
    missed = bus.publish("/a", "/b")
    c.live(bus.publish("/c"))
    assert c.seqs() == [1] and c.query == eb.SyncStart((), 1)  # held back, asking the log
    c.live(bus.publish("/d"))  # still held while the catch-up is answered
    c.answer()
    assert c.seqs() == [1, 2, 3, 4, 5] and c.core.repaired == 4
    assert [e.sequence for e in missed] == [2, 3]
    c.live(bus.publish("/e"))
    assert c.seqs() == [1, 2, 3, 4, 5, 6] and c.core.duplicates == 2


def test_a_heartbeat_at_or_below_the_snapshot_proves_the_connection() -> None:
    bus = PlainBus()
    bus.publish("/a", "/a")
    c = started(bus)
    c.answer()
    c.act(c.core.on_heartbeat(2, 0.0))
    assert c.query is None
    c.live(bus.publish("/a", "/b"))
    assert c.seqs() == [2, 3, 4]


def test_broadcasts_during_the_snapshot_are_held_and_merged() -> None:
    bus = PlainBus()
    bus.publish("/a")
    c = started(bus)
    early = bus.publish("/b")  # 2: sent before the snapshot's read point...
    c.live(early)  # ...and received: the connection is proven
    answer = bus.answer(c.query)  # type: ignore[arg-type]
    c.query = None
    c.live(bus.publish("/c"))  # 3, after the read point
    for reply in answer:
        c.act(
            c.core.on_sync_end(reply, 0.0)
            if isinstance(reply, eb.SyncEnd)
            else c.core.on_sync(reply, 0.0)
        )
    assert c.seqs() == [1, 2, 3] and c.core.duplicates == 1


def test_resuming_gets_every_event_above_since() -> None:
    bus = PlainBus()
    bus.publish("/a", "/a", "/b", "/a")
    c = started(bus, since=1)
    assert c.query == eb.SyncStart((), 1)
    c.answer()
    assert c.seqs() == [2, 3, 4] and c.core.last == 4 and c.core.repaired == 0


def test_failover_after_silence_of_a_bus_that_beats_then_resume_from_last() -> None:
    bus = PlainBus()
    bus.publish("/a")
    c = started(bus)
    c.answer()
    c.act(c.core.on_heartbeat(1, 1.0))
    assert c.core.deadline() == 4.0
    assert c.core.tick(3.9) is NOTHING
    c.act(c.core.tick(4.0))
    assert c.failovers == 1 and c.core.phase is Phase.DISCONNECTED
    bus.publish("/a", "/b")  # while the client was away
    c.act(c.core.reconnect(5.0))
    assert c.query == eb.SyncStart((), 1)
    c.answer()
    assert c.seqs() == [1, 2, 3] and c.core.repaired == 2


def test_a_quiet_bus_without_heartbeats_is_asked_again_until_a_message_proves_the_connection() -> (
    None
):
    bus = PlainBus()
    bus.publish("/a")
    c = started(bus)
    c.answer()
    assert c.core.deadline() == 1.0  # heartbeat_interval: no message came yet
    bus.publish("/a", "/b")  # went out before the subscription reached the bus
    assert c.core.tick(0.9) is NOTHING
    c.act(c.core.tick(1.0))
    assert c.query == eb.SyncStart((), 1) and c.failovers == 0
    c.answer(1.0)
    assert c.seqs() == [1, 2, 3] and c.core.deadline() == 2.0
    c.act(c.core.tick(2.0))
    c.answer(2.0)  # nothing new: asked again later, never declared dead by silence
    assert c.seqs() == [1, 2, 3] and c.failovers == 0
    c.live(bus.publish("/c"))  # the first message: proven, no more asking
    assert c.seqs() == [1, 2, 3, 4] and c.core.deadline() is None


def test_a_connection_made_again_is_proven_again_and_what_it_missed_comes_from_the_log() -> None:
    bus = PlainBus()
    bus.publish("/a")
    c = started(bus)
    c.answer()
    c.live(bus.publish("/a"))  # proven: 2 is live
    assert c.seqs() == [1, 2]
    bus.publish("/b", "/c")  # the bus restarted; ZeroMQ reconnects by itself, meanwhile
    c.act(c.core.on_connected(5.0))  # ... these never reached the subscription
    assert c.query == eb.SyncStart((), 2)
    c.live(bus.publish("/d"))  # held until the log has answered
    c.answer(5.0)
    assert c.seqs() == [1, 2, 3, 4, 5] and c.core.repaired == 3
    c.live(bus.publish("/e"))
    assert c.seqs() == [1, 2, 3, 4, 5, 6]


def test_an_unanswered_syncstart_fails_over() -> None:
    c = started(PlainBus())
    assert c.core.deadline() == 3.0
    c.act(c.core.tick(3.0))
    assert c.failovers == 1


def test_a_bus_behind_what_was_covered_is_another_history() -> None:
    bus = PlainBus()
    bus.publish("/a", "/b", "/c")
    c = started(bus)
    c.answer()
    c.act(c.core.fail())
    other = PlainBus()
    other.publish("/x")
    c.bus = other
    c.act(c.core.reconnect(1.0))
    c.answer()
    assert c.resets == 1 and c.query == eb.SyncStart((), 0)
    c.answer()
    assert [e.topic for e in c.got] == ["/a", "/b", "/c", "/x"] and c.core.last == 1


def test_held_broadcasts_past_the_buffer_come_from_the_log() -> None:
    bus = PlainBus()
    c = Client(PlainSubscriptionCore((), 0, 1.0, 3, max_buffer=3), bus)
    c.act(c.core.start(0.0))
    answer = bus.answer(c.query)  # type: ignore[arg-type]
    c.query = None
    c.live(bus.publish(*[f"/t{i}" for i in range(5)]))  # more than the buffer holds
    for reply in answer:
        c.act(c.core.on_sync_end(reply, 0.0))  # type: ignore[arg-type]
    assert c.query == eb.SyncStart((), 0)
    c.answer()
    assert c.seqs() == [1, 2, 3, 4, 5]


def test_subtrees_out_of_the_buses_range_are_refused() -> None:
    with pytest.raises(ValueError, match="at most 256 subtrees"):
        PlainSubscriptionCore([f"/{i}" for i in range(257)])
    with pytest.raises(ValueError, match="';' or ','"):
        PlainSubscriptionCore(["/a,b"])
    with pytest.raises(ValueError, match="since"):
        PlainSubscriptionCore(since=2**64)


@settings(max_examples=300)
@given(
    before=st.integers(0, 5),
    early=st.booleans(),
    between=st.integers(0, 4),
    after=st.integers(0, 4),
    beat=st.booleans(),
)
def test_whenever_the_subscription_reaches_the_bus_every_event_comes_once_in_order(
    before: int, early: bool, between: int, after: int, beat: bool
) -> None:
    """The PUB subscription reaches the bus before the snapshot's read point (``early``:
    the events between come as BROADCASTs too) or after it (they never do). Either way
    the state comes first, then every later event, once, in order. (One topic per
    event: the state is every event up to the read point.)"""
    bus = PlainBus()
    n = iter(range(100))

    def topics(count: int) -> list[str]:
        return [f"/t{next(n):02d}" for _ in range(count)]

    bus.publish(*topics(before))
    c = started(bus)
    if early:
        c.live(bus.publish(*topics(between)))
        c.answer()
    else:
        c.answer()
        bus.publish(*topics(between))  # broadcast before the subscription took: not seen
    if beat:
        c.act(c.core.on_heartbeat(bus.seq, 0.0))
    c.live(bus.publish(*topics(after)))
    while c.query is not None:
        c.answer()
    c.live(bus.publish(*topics(1)))
    while c.query is not None:
        c.answer()
    assert c.seqs() == list(range(1, bus.seq + 1))  # topic order is sequence order here
