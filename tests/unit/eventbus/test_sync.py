"""The subscription core alone: snapshot/stream merge, gap repair, failover, reset.

A ``FakeLog`` answers ZB-SNAPSHOT queries the way the bus's store does (latest value per
topic in topic order with a topic cursor; the log in sequence order with a sequence
cursor), so the tests drive the core through whole conversations with a fake clock.
"""

from __future__ import annotations

from typing import Any

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zbus.common.protocols import eventbus_ext as ext
from zbus.common.protocols.errors import ProtocolError
from zbus.eventbus.core.log import Event
from zbus.eventbus.core.sync import NOTHING, Actions, Phase, SubscriptionCore

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


# ------------------------------------------------------------------------ start
def test_start_asks_for_the_latest_snapshot_from_since() -> None:
    core = SubscriptionCore(["/a/", "/b/"], since=7, page_limit=50)
    actions = core.start(0.0)
    assert actions.query == ext.SnapshotQuery(("/a/", "/b/"), 7, None, "latest", 50)
    assert core.phase is Phase.SNAPSHOT
    with pytest.raises(RuntimeError):
        core.start(1.0)


def test_an_empty_subtree_means_every_topic() -> None:
    core = SubscriptionCore(["/a/", ""])
    assert core.subtrees == ()


@pytest.mark.parametrize(
    "kwargs",
    [
        {"since": -1},
        {"heartbeat_interval": 0},
        {"misses": 0},
        {"page_limit": 0},
        {"page_limit": ext.MAX_LIMIT + 1},
    ],
)
def test_bad_parameters_are_refused(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        SubscriptionCore(**kwargs)


def test_subtrees_must_be_text() -> None:
    with pytest.raises(TypeError):
        SubscriptionCore([b"/a"])  # type: ignore[list-item]


# ------------------------------------------------------------ snapshot -> live
def test_snapshot_then_live_without_gap_or_duplicate() -> None:
    log = FakeLog()
    log.publish("/a", "/b", "/a")  # 1, 2, 3
    d = Driver(SubscriptionCore(), log)
    d.start()
    assert d.query is not None
    page = log.answer(d.query)  # read point 3
    d.batch(log.publish("/c"))  # 4: published while the page travels, buffered
    assert d.out == []
    d.take(d.core.on_page(page, d.now))
    assert pairs(d.out) == [(3, "/a"), (2, "/b"), (4, "/c")]
    assert d.core.phase is Phase.LIVE and d.core.last == 4
    d.batch(log.publish("/a", "/d"))
    assert [e.seq for e in d.out] == [3, 2, 4, 5, 6]
    assert d.core.duplicates == 0 and d.core.repaired == 0 and d.core.delivered == 5


def test_buffered_events_at_or_below_the_read_point_are_dropped() -> None:
    log = FakeLog()
    d = Driver(SubscriptionCore(), log)
    d.start()
    d.batch(log.publish("/a", "/b"))
    d.batch(log.publish("/c"))
    d.answer()  # read point 3: the snapshot has all three
    assert pairs(d.out) == [(1, "/a"), (2, "/b"), (3, "/c")]
    assert d.core.duplicates == 3


def test_events_delivered_are_full_events() -> None:
    d = live()
    actions = d.batch(d.log.publish("/t"))
    assert actions.events == [Event(1, "/t", "p", TS, uid(1), b"d")]
    assert isinstance(actions.events[0], Event)


def test_snapshot_is_paged_to_its_end() -> None:
    log = FakeLog()
    log.publish(*(f"/t{i}" for i in range(5)))
    d = Driver(SubscriptionCore(page_limit=2), log)
    d.start()
    d.answer()
    assert d.query == ext.SnapshotQuery((), 0, "/t1", "latest", 2)
    assert d.core.phase is Phase.SNAPSHOT
    d.answer()
    assert d.query is not None and d.query.after == "/t3"
    d.answer()
    assert d.query is None and d.core.phase is Phase.LIVE
    assert [e.topic for e in d.out] == [f"/t{i}" for i in range(5)]


def test_pages_read_at_later_points_never_move_a_topic_backwards() -> None:
    log = FakeLog()
    log.publish("/a", "/b", "/c")  # 1 2 3
    d = Driver(SubscriptionCore(page_limit=1), log)
    d.start()
    d.answer()  # page 1 at read point 3: /a@1
    buffered = [log.publish("/c"), log.publish("/b"), log.publish("/a")]  # 4 5 6
    for b in buffered:
        d.batch(b)
    d.answer()  # page 2 read at 6: /b@5
    d.answer()  # page 3, the last: /c@4
    assert d.core.phase is Phase.LIVE
    # /c@4 and /b@5 came with the snapshot, so their stream copies are dropped; /a@6 is
    # newer than the /a@1 of the first page.
    assert pairs(d.out) == [(1, "/a"), (5, "/b"), (4, "/c"), (6, "/a")]
    d.batch(log.publish("/b", "/c"))
    assert pairs(d.out)[-2:] == [(7, "/b"), (8, "/c")]


def test_the_overlap_filter_also_holds_for_a_replay_after_the_snapshot() -> None:
    log = FakeLog()
    log.publish("/a", "/b")  # 1 2
    d = Driver(SubscriptionCore(page_limit=1), log)
    d.start()
    d.answer()  # /a@1 at read point 2
    log.publish("/b", "/a")  # 3 4: never seen on the stream
    d.answer()  # /b@3, read later, on the last page
    assert d.core.last == 2 and d.core.phase is Phase.LIVE
    d.heartbeat()  # 4 > 2: a gap, repaired from the log
    assert d.query is not None and d.query.mode == "log" and d.query.since == 2
    d.answer_all()
    assert pairs(d.out) == [(1, "/a"), (3, "/b"), (4, "/a")]
    assert d.core.repaired == 1


def test_since_reaches_the_snapshot_query_and_filters_its_events() -> None:
    log = FakeLog()
    log.publish("/a", "/b", "/c")
    d = Driver(SubscriptionCore(since=2), log)
    d.start()
    page = ext.SnapshotPage(tuple(log.events), None, log.seq)  # a server ignoring since
    d.take(d.core.on_page(page, 0.0))
    assert pairs(d.out) == [(3, "/c")]


def test_a_bus_behind_since_is_a_reset_to_a_full_snapshot() -> None:
    log = FakeLog()
    log.publish("/a", "/b")
    d = Driver(SubscriptionCore(since=10), log)
    d.start()
    actions = d.answer()
    assert actions.reset and actions.query == ext.SnapshotQuery((), 0, None, "latest", 1000)
    d.answer_all()
    assert pairs(d.out) == [(1, "/a"), (2, "/b")]
    assert d.core.resets == 1


# ------------------------------------------------------------------- filtering
def test_stream_events_are_filtered_by_plain_prefix() -> None:
    d = live(("/a/", "/c"))
    d.batch(d.log.publish("/a/1", "/b/1", "/a/2", "/cat", "/d", "/a"))
    assert pairs(d.out) == [(1, "/a/1"), (3, "/a/2"), (4, "/cat")]
    assert d.core.last == 6  # every sequence is covered, wanted or not


def test_filtered_out_events_do_not_make_a_gap() -> None:
    d = live(("/a/",))
    d.batch(d.log.publish("/b/1", "/b/2"))
    d.heartbeat()
    assert d.query is None and d.core.phase is Phase.LIVE
    d.batch(d.log.publish("/a/1"))
    assert pairs(d.out) == [(3, "/a/1")]


# ---------------------------------------------------------------- gap repair
def test_a_gap_in_the_stream_is_repaired_from_the_log_in_order() -> None:
    d = live()
    log = d.log
    d.batch(log.publish("/a"))  # 1
    log.publish("/b", "/c")  # 2 3: lost
    gap = log.publish("/d")  # 4
    actions = d.batch(gap)
    assert not actions.events and actions.query == ext.SnapshotQuery((), 1, None, "log", 1000)
    assert d.core.phase is Phase.REPLAY
    d.batch(log.publish("/e"))  # 5: buffered during the replay
    log.publish("/f")  # 6: in the log when the replay reads it, not yet on the stream
    d.answer()
    assert seqs(Actions(d.out)) == [1, 2, 3, 4, 5, 6]
    assert d.core.phase is Phase.LIVE and d.core.last == 6
    d.batch((6, [row(log.events[5])]))  # the stream's copy of 6 arrives late
    d.batch(log.publish("/g"))
    assert seqs(Actions(d.out)) == [1, 2, 3, 4, 5, 6, 7]
    assert d.core.repaired == 5 and d.core.duplicates == 3  # 4 and 5 buffered, 6 late


def test_a_replay_is_paged_by_sequence() -> None:
    d = Driver(SubscriptionCore(page_limit=2), FakeLog())
    d.start()
    d.answer()
    d.log.publish("/a", "/b", "/c")
    d.heartbeat()
    assert d.query == ext.SnapshotQuery((), 0, None, "log", 2)
    d.answer()
    assert d.query == ext.SnapshotQuery((), 2, "2", "log", 2)
    d.answer()
    assert d.query is None and seqs(Actions(d.out)) == [1, 2, 3]


def test_a_replay_only_brings_wanted_topics_but_covers_every_sequence() -> None:
    d = live(("/a/",))
    d.log.publish("/b/1", "/a/1", "/b/2")
    d.heartbeat()
    assert d.query is not None and d.query.subtrees == ("/a/",)
    d.answer()
    assert pairs(d.out) == [(2, "/a/1")] and d.core.last == 3


def test_a_gap_found_in_the_buffer_after_a_replay_starts_another() -> None:
    d = live()
    log = d.log
    log.publish("/a")  # 1: lost
    d.batch(log.publish("/b"))  # 2: gap -> replay from 0
    d.answer()  # replays 1 and 2
    assert d.core.phase is Phase.LIVE
    log.publish("/c")  # 3: lost
    d.batch(log.publish("/d"))  # 4: gap -> replay from 2
    log.publish("/e")  # 5: lost too
    d.batch(log.publish("/f"))  # 6: buffered
    # The replay reads only up to 3 (a page that ends there), so the buffer still has
    # a hole at 5 when it is replayed.
    assert d.query is not None
    page = ext.SnapshotPage((log.events[2],), None, 3)
    d.take(d.core.on_page(page, d.now))
    assert d.query is not None and d.query.since == 4 and d.core.phase is Phase.REPLAY
    d.answer()
    assert seqs(Actions(d.out)) == [1, 2, 3, 4, 5, 6]


def test_a_replay_page_reaching_below_last_is_trimmed() -> None:
    d = live()
    d.batch(d.log.publish("/a", "/b"))
    d.log.publish("/c")
    d.heartbeat()
    page = ext.SnapshotPage(tuple(d.log.events), None, 3)  # a server reading from 0
    d.take(d.core.on_page(page, d.now))
    assert seqs(Actions(d.out)) == [1, 2, 3] and d.core.repaired == 1


def test_a_heartbeat_above_last_is_a_gap() -> None:
    d = live()
    d.log.publish("/a", "/b")
    actions = d.heartbeat()
    assert actions.query == ext.SnapshotQuery((), 0, None, "log", 1000)
    d.answer()
    assert seqs(Actions(d.out)) == [1, 2]


def test_a_heartbeat_at_or_below_last_is_nothing() -> None:
    d = live()
    d.batch(d.log.publish("/a", "/b"))
    assert d.heartbeat(2) is NOTHING
    # A heartbeat sent before a replay moved last past it: below last, but not below
    # what the stream itself has said before.
    d.log.publish("/c", "/d")
    d.heartbeat(4)
    d.answer()
    assert d.core.last == 4
    assert d.core.on_heartbeat(4, 0.0) is NOTHING


def test_a_batch_overlapping_last_delivers_only_what_is_new() -> None:
    d = live()
    log = d.log
    log.publish("/a", "/b")  # 1 2: lost
    d.batch(log.publish("/c"))  # 3: a gap
    log.publish("/d")  # 4: the replay reads it before the stream brings it
    d.answer()
    assert d.core.last == 4
    d.batch((4, [row(log.events[3]), *log.publish("/e")[1]]))  # 4 again, and 5
    assert seqs(Actions(d.out)) == [1, 2, 3, 4, 5]
    assert d.core.duplicates == 2  # 3 (buffered, also replayed) and 4


def test_a_buffer_past_its_bound_is_dropped_and_repaired_from_the_log() -> None:
    log = FakeLog()
    d = Driver(SubscriptionCore(max_buffer=3), log)
    d.start()
    for _ in range(5):
        d.batch(log.publish("/a"))
    snap = FakeLog()
    d.take(d.core.on_page(snap.answer(d.query or ext.SnapshotQuery()), d.now))  # read point 0
    assert d.query is not None and d.query.mode == "log" and d.query.since == 0
    d.answer()
    assert seqs(Actions(d.out)) == [1, 2, 3, 4, 5]


# ------------------------------------------------------------------ failover
def test_silence_fails_over_at_exactly_interval_times_misses() -> None:
    core = SubscriptionCore(heartbeat_interval=0.25, misses=4)
    core.start(10.0)
    core.on_page(ext.SnapshotPage((), None, 0), 10.0)
    assert core.deadline() == 11.0
    assert core.tick(10.999) is NOTHING
    core.on_heartbeat(0, 10.5)  # a message moves the deadline
    assert core.tick(11.499) is NOTHING
    actions = core.tick(11.5)
    assert actions.failover and core.phase is Phase.DISCONNECTED and core.failovers == 1
    # Until it reconnects, the core waits and ignores stale input.
    assert core.tick(100.0) is NOTHING and core.deadline() is None
    assert core.on_batch(1, [["/a", "p", TS, uid(1), b""]], 100.0) is NOTHING
    assert core.on_page(ext.SnapshotPage((), None, 0), 100.0) is NOTHING


def test_an_unanswered_query_fails_over_even_with_a_live_stream() -> None:
    core = SubscriptionCore(heartbeat_interval=1.0, misses=3)
    core.start(0.0)
    core.on_heartbeat(0, 2.5)
    assert core.deadline() == 3.0
    assert core.tick(2.999) is NOTHING
    assert core.tick(3.0).failover


def test_silence_before_any_message_fails_over() -> None:
    core = SubscriptionCore()
    core.start(0.0)
    core.on_page(ext.SnapshotPage((), None, 0), 0.1)
    assert core.tick(2.99) is NOTHING
    assert core.tick(3.0).failover


def test_a_refused_query_fails_over_at_once() -> None:
    core = SubscriptionCore()
    core.start(0.0)
    assert core.fail().failover and core.failovers == 1
    assert core.fail() is NOTHING


def test_reconnect_only_after_a_failover() -> None:
    core = SubscriptionCore()
    with pytest.raises(RuntimeError):
        core.reconnect(0.0)
    core.start(0.0)
    with pytest.raises(RuntimeError):
        core.reconnect(0.0)


def fail_over(d: Driver, log: FakeLog) -> Actions:
    d.now += d.core.timeout
    assert d.take(d.core.tick(d.now)).failover
    d.log = log
    return d.take(d.core.reconnect(d.now))


def test_failover_to_the_same_history_resumes_from_last_through_the_log() -> None:
    d = live()
    log = d.log
    d.batch(log.publish("/a", "/b"))  # 1 2
    backup = FakeLog()
    backup.events = list(log.events)  # a mirror of the same log...
    backup.publish("/c", "/d")  # ...that went on while we were away
    actions = fail_over(d, backup)
    # First the probe: is the event at the anchor's sequence the one seen there?
    assert actions.query == ext.SnapshotQuery((), 1, None, "log", 1)
    d.answer()
    assert d.query == ext.SnapshotQuery((), 2, None, "log", 1000)
    d.answer()
    assert seqs(Actions(d.out)) == [1, 2, 3, 4]
    assert d.resets == 0 and d.core.repaired == 2 and d.core.phase is Phase.LIVE


def test_failover_to_a_bus_whose_sequence_is_below_last_resets() -> None:
    d = live()
    d.batch(d.log.publish("/a", "/b", "/c"))
    other = FakeLog(bus=1)
    other.publish("/x")
    actions = fail_over(d, other)
    d.batch(other.publish("/y"))  # buffered from the new connection
    actions = d.answer()
    assert actions.reset and actions.query == ext.SnapshotQuery((), 0, None, "latest", 1000)
    assert d.core.last is None and d.core.phase is Phase.SNAPSHOT
    d.answer_all()
    assert pairs(d.out)[3:] == [(1, "/x"), (2, "/y")]
    assert d.core.resets == 1 and d.core.phase is Phase.LIVE


def test_failover_to_another_bus_further_ahead_resets_by_the_anchor() -> None:
    d = live()
    d.batch(d.log.publish("/a", "/b"))
    other = FakeLog(bus=1)
    other.publish(*(f"/o{i}" for i in range(5)))
    fail_over(d, other)
    assert d.answer().reset
    d.answer_all()
    assert [e.topic for e in d.out[2:]] == [f"/o{i}" for i in range(5)]


def test_failover_without_an_anchor_checks_the_read_point() -> None:
    log = FakeLog()
    log.publish("/b/1", "/b/2")
    d = live(("/a/",), log)  # nothing delivered, nothing seen on the stream
    assert d.core.last == 2
    empty = FakeLog(bus=1)
    actions = fail_over(d, empty)
    assert actions.query == ext.SnapshotQuery(("/a/",), 2, None, "log", 1000)
    assert d.answer().reset


def test_failover_during_a_replay_resumes_from_what_was_replayed() -> None:
    d = Driver(SubscriptionCore(page_limit=2), FakeLog())
    d.start()
    d.answer()
    d.log.publish("/a", "/b", "/c", "/d")
    d.heartbeat()
    d.answer()  # 1 2 delivered, 3 4 still to come
    assert d.core.last == 2 and d.core.phase is Phase.REPLAY
    fail_over(d, d.log)
    d.answer_all()
    assert seqs(Actions(d.out)) == [1, 2, 3, 4]


def test_failover_before_the_snapshot_delivered_anything_just_starts_again() -> None:
    d = Driver(SubscriptionCore(since=1), FakeLog())
    d.start()
    actions = fail_over(d, FakeLog(bus=1))
    assert not actions.reset and actions.query == ext.SnapshotQuery((), 1, None, "latest", 1000)


def test_failover_in_the_middle_of_a_snapshot_to_the_same_history_goes_on() -> None:
    log = FakeLog()
    log.publish("/a", "/b")
    d = Driver(SubscriptionCore(page_limit=1), log)
    d.start()
    d.answer()  # /a@1 delivered
    actions = fail_over(d, log)
    assert actions.query == ext.SnapshotQuery((), 0, None, "log", 1)  # the probe
    d.answer()
    # The snapshot is read again; what it already delivered is not delivered twice.
    assert d.query == ext.SnapshotQuery((), 0, None, "latest", 1)
    log.publish("/b")
    d.answer_all()
    assert pairs(d.out) == [(1, "/a"), (3, "/b")] and d.resets == 0


def test_failover_in_the_middle_of_a_snapshot_to_another_bus_resets() -> None:
    log = FakeLog()
    log.publish("/a", "/b")
    d = Driver(SubscriptionCore(page_limit=1), log)
    d.start()
    d.answer()
    other = FakeLog(bus=1)
    other.publish("/a", "/b")
    fail_over(d, other)
    actions = d.answer()
    assert actions.reset and actions.query == ext.SnapshotQuery((), 0, None, "latest", 1)
    d.answer_all()
    assert pairs(d.out) == [(1, "/a"), (1, "/a"), (2, "/b")]
    assert d.out[1].uuid == uid(1, bus=1)


# --------------------------------------------------------- stream regression
def test_a_stream_that_goes_back_is_a_restarted_server_checked_by_the_anchor() -> None:
    d = live()
    d.batch(d.log.publish("/a", "/b", "/c"))
    restarted = FakeLog(bus=1)  # lost its log: the same endpoint, a new history
    d.log = restarted
    actions = d.batch(restarted.publish("/x"))
    assert actions.query == ext.SnapshotQuery((), 2, None, "log", 1)
    assert d.answer().reset
    d.answer_all()
    assert pairs(d.out)[3:] == [(1, "/x")]


def test_a_stream_that_goes_back_while_a_page_is_awaited_restarts_after_it() -> None:
    log = FakeLog()
    log.publish("/a")
    d = Driver(SubscriptionCore(), log)
    d.start()
    d.heartbeat(1)
    outstanding = d.query
    assert d.core.on_heartbeat(0, d.now) is NOTHING  # went back: 0 < 1
    # The page of the old history is dropped; the snapshot starts again.
    assert outstanding is not None
    actions = d.take(d.core.on_page(log.answer(outstanding), d.now))
    assert not actions.events and actions.query == ext.SnapshotQuery((), 0, None, "latest", 1000)


@pytest.mark.parametrize("phase", [Phase.IDLE, Phase.DISCONNECTED])
def test_a_core_not_connected_ignores_every_input(phase: Phase) -> None:
    core = SubscriptionCore()
    if phase is Phase.DISCONNECTED:
        core.start(0.0)
        core.fail()
    assert core.on_page(ext.SnapshotPage((), None, 0), 1.0) is NOTHING
    assert core.on_batch(1, [["/a", "p", TS, uid(1), b""]], 1.0) is NOTHING
    assert core.on_heartbeat(5, 1.0) is NOTHING
    assert core.tick(1e9) is NOTHING
    assert core.delivered == 0 and core.phase is phase


def test_a_page_nobody_asked_for_is_ignored() -> None:
    d = live()
    assert d.core.on_page(ext.SnapshotPage((), None, 99), 0.0) is NOTHING
    assert d.core.phase is Phase.LIVE


# ---------------------------------------------------------------------- event
def test_event_data_unpacks_as_msgpack() -> None:
    event = Event(1, "/t", "p", TS, uid(1), msgpack.packb({"v": 1}))
    assert event.unpack() == {"v": 1}
    with pytest.raises(ProtocolError):
        Event(1, "/t", "p", TS, uid(1), b"\xc1").unpack()


# ---------------------------------------------------------------- properties
@settings(max_examples=400)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["pub", "drop", "beat", "answer", "dup", "failover"]),
            st.lists(st.sampled_from(["/a/1", "/a/2", "/b/1", "/c"]), min_size=1, max_size=4),
        ),
        max_size=60,
    ),
    st.sampled_from([(), ("/a/",), ("/a/", "/c")]),
    st.integers(1, 3),
)
def test_any_interleaving_delivers_every_event_once_and_in_order(
    ops: list[tuple[str, list[str]]], subtrees: tuple[str, ...], page_limit: int
) -> None:
    """Publishing, stream losses and duplicates, heartbeats, failovers to the same log
    and query answers, in any order: per topic the subscriber never goes back and ends
    at the log's latest, and every event after the snapshot's newest is delivered
    exactly once, in sequence order."""
    log = FakeLog()
    log.publish("/a/1", "/b/1", "/c", "/a/2")
    d = Driver(SubscriptionCore(subtrees, page_limit=page_limit), log)
    d.start()
    snapshot_top = 0
    sent: list[tuple[int, list[list[Any]]]] = []
    for op, topics in ops:
        if op in ("pub", "drop"):
            batch = log.publish(*topics)
            if op == "pub":
                d.batch(batch)
                sent.append(batch)
        elif op == "dup" and sent:
            d.batch(sent[-1])
        elif op == "beat":
            d.heartbeat()
        elif op == "failover":
            fail_over(d, log)  # the same log again: resumes, never resets
        elif op == "answer" and d.query is not None:
            if d.query.mode == "latest":
                snapshot_top = max([snapshot_top, log.seq])
            d.answer()
    while d.core.phase is not Phase.LIVE or d.core.last != log.seq:
        if d.query is None:
            d.heartbeat()
        else:
            if d.query.mode == "latest":
                snapshot_top = max([snapshot_top, log.seq])
            d.answer()
    wanted = [e for e in log.events if not subtrees or e.topic.startswith(subtrees)]
    by_topic: dict[str, list[int]] = {}
    for e in d.out:
        by_topic.setdefault(e.topic, []).append(e.seq)
    for topic, got in by_topic.items():
        assert got == sorted(set(got)), f"{topic} went back or repeated: {got}"
    latest = {e.topic: e.sequence for e in wanted}
    assert {t: got[-1] for t, got in by_topic.items()} == latest
    after = [e.seq for e in d.out if e.seq > snapshot_top]
    assert after == [e.sequence for e in wanted if e.sequence > snapshot_top]
    assert d.core.delivered == len(d.out) and d.resets == 0
