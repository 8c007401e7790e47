"""The subscription core repairs the stream: gaps replayed from the log, overlaps and
buffers trimmed, a stream that goes back, and input it ignores when not connected.
"""

from __future__ import annotations

import pytest

from tests.support.subscription import TS, Driver, FakeLog, live, pairs, row, seqs, uid
from zbus.common.protocols import eventbus_ext as ext
from zbus.eventbus.core.sync import NOTHING, Actions, Phase, SubscriptionCore


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
