"""The subscription core fails over: silence and unanswered queries, then resuming on the
same history or resetting on another bus; and any interleaving of publishing, losses,
heartbeats and failovers delivers every event once and in order.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.subscription import TS, Driver, FakeLog, fail_over, live, pairs, seqs, uid
from zbus.common.protocols import eventbus_ext as ext
from zbus.eventbus.core.sync import NOTHING, Actions, Phase, SubscriptionCore


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
