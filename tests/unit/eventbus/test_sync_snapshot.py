"""The subscription core from its start to live: parameters, the snapshot merged with the
stream without gap or duplicate, paging, ``since``, filtering by subtree, and the events
it delivers.
"""

from __future__ import annotations

from typing import Any

import msgpack
import pytest

from tests.support.subscription import TS, Driver, FakeLog, live, pairs, uid
from zbus.common.protocols import eventbus_ext as ext
from zbus.common.protocols.errors import ProtocolError
from zbus.eventbus.core.log import Event
from zbus.eventbus.core.sync import Phase, SubscriptionCore


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


# ---------------------------------------------------------------------- event
def test_event_data_unpacks_as_msgpack() -> None:
    event = Event(1, "/t", "p", TS, uid(1), msgpack.packb({"v": 1}))
    assert event.unpack() == {"v": 1}
    with pytest.raises(ProtocolError):
        Event(1, "/t", "p", TS, uid(1), b"\xc1").unpack()
