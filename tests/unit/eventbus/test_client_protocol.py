"""The event bus client's sans-I/O core: what it publishes where, confirms, failover."""

from __future__ import annotations

import msgpack
import pytest

from zbus.common.event_ids import wire_stamp
from zbus.common.protocols import eventbus as eb
from zbus.common.protocols import eventbus_ext as ext
from zbus.eventbus.client import (
    CHUNK_EVENTS,
    BusEndpoints,
    DialectError,
    EventBusClient,
    PublishError,
)
from zbus.eventbus.client._protocol import ClientProtocol, ConfirmedPublish
from zbus.eventbus.client._subscription import SubscriptionProtocol
from zbus.eventbus.core.sync import NOTHING, Actions, SubscriptionCore

WALL = 1_700_000_000.123
BASES = ["tcp://127.0.0.1:5556", "tcp://127.0.0.1:6556", "tcp://127.0.0.1:7556"]


def protocol(compat: str = "zbus", endpoints: list[str] | None = None) -> ClientProtocol:
    return ClientProtocol(endpoints or BASES, "p", 1.0, 3, compat)  # type: ignore[arg-type]


def rows_of(frames: list[bytes]) -> list[list[object]]:
    assert frames[0] == ext.PUB_BATCH
    rows: list[list[object]] = msgpack.unpackb(frames[2], raw=False)
    return rows


def confirm(rows: list[list[object]], first: int) -> list[bytes]:
    return ext.encode(ext.Confirm(tuple((str(r[3]), first + i) for i, r in enumerate(rows))))


def test_failover_goes_through_the_endpoints_in_order_and_wraps() -> None:
    p = protocol()
    assert [p.next_endpoints(i) for i in range(3)] == [1, 2, 0]
    assert p.rotate_publisher() == p.endpoints[1]
    assert p.rotate_publisher() == p.endpoints[2]
    assert p.rotate_publisher() == p.endpoints[0]
    assert protocol(endpoints=BASES[:1]).next_endpoints(0) == 0


def test_an_endpoint_that_answered_nothing_is_passed_over_for_a_while() -> None:
    p = protocol()  # three endpoints; publishing to the first
    assert p.rotate_publisher(100.0, silent=True) == p.endpoints[1]  # the first was silent
    assert p.rotate_publisher(100.1) == p.endpoints[2]  # refused by the second
    assert p.rotate_publisher(100.2) == p.endpoints[1]  # the first passed over
    assert p.rotate_publisher(100.3, silent=True) == p.endpoints[2]
    # Every other one silent too: the next in order all the same.
    assert p.rotate_publisher(100.4, silent=True) == p.endpoints[0]
    assert p.rotate_publisher(106.0) == p.endpoints[1]  # after SILENT_SECONDS, in order


def test_an_unconfirmed_publish_is_batches_stamped_with_the_time_given() -> None:
    messages = protocol().publication([("/a", b"x"), ("/b", {"k": 1})], False, 5.0, WALL)
    assert isinstance(messages, list) and len(messages) == 1
    assert messages[0][1] == b"\x00"
    rows = rows_of(messages[0])
    assert [r[0] for r in rows] == ["/a", "/b"]
    assert {r[2] for r in rows} == {wire_stamp(WALL)}
    assert rows[1][4] == msgpack.packb({"k": 1})


def test_the_plain_protocol_publishes_pubs_and_refuses_a_confirm_before_sending() -> None:
    p = protocol("spec")
    messages = p.publication([("/a", b"x")], False, 5.0, WALL)
    assert isinstance(messages, list)
    pub = eb.decode_collector(messages[0], eb.SPEC)
    assert isinstance(pub, eb.Pub) and pub.topic == "/a" and pub.timestamp == wire_stamp(WALL)
    with pytest.raises(DialectError):
        p.publication([("/a", b"x")], True, 5.0, WALL)


def test_bad_items_are_refused_before_anything_is_sent() -> None:
    with pytest.raises(ValueError):
        protocol().publication([("/a", b"x"), ("", b"y")], True, 5.0, WALL)


def test_a_confirmed_publish_resends_only_what_is_unconfirmed_then_gives_up() -> None:
    items = [(f"/t/{i}", b"x") for i in range(CHUNK_EVENTS + 1)]  # two chunks
    pub = protocol().publication(items, True, 2.0, WALL)
    assert isinstance(pub, ConfirmedPublish)
    first = pub.begin(100.0)
    assert len(first) == 2 and pub.deadline == 102.0
    assert [f[1] for f in first] == [b"\x01", b"\x01"]
    rows = [rows_of(f) for f in first]
    pub.on_reply(confirm(rows[0], 1))
    assert not pub.confirmed and pub.rounds_left
    second = pub.begin(103.0)  # the next endpoints: the second chunk only
    assert [rows_of(f) for f in second] == [rows[1]]
    pub.on_reply(confirm(rows[1], 1001))
    assert pub.confirmed
    assert pub.sequences() == list(range(1, CHUNK_EVENTS + 2))
    pub.begin(104.0)
    assert not pub.rounds_left  # three endpoints, three rounds


def test_a_refusal_raises_and_a_malformed_reply_is_counted() -> None:
    p = protocol()
    pub = p.publication([("/a", b"x")], True, 2.0, WALL)
    assert isinstance(pub, ConfirmedPublish)
    pub.begin(0.0)
    pub.on_reply([ext.CONFIRM, b"\xc1"])
    assert p.outbox.malformed == 1 and not pub.confirmed
    with pytest.raises(PublishError, match="full"):
        pub.on_reply(ext.encode(ext.Error("full")))


def test_a_subscription_fails_over_through_the_client_and_encodes_its_queries() -> None:
    p = protocol()
    core = p.subscription_core("/a/", 0, 10)
    assert isinstance(core, SubscriptionCore)
    sub = SubscriptionProtocol(p, core, None)
    query = sub.take(core.start(0.0))
    assert query is not None and query[0] == ext.SNAPSHOT
    assert sub.endpoints == p.endpoints[0]
    silent = core.tick(10.0)  # no heartbeat for 1 s x 3: the core says fail over
    assert silent.failover
    resumed = sub.fail_over(10.0)
    assert sub.endpoints == p.endpoints[1]
    assert sub.take(resumed) is not None  # a new snapshot query, for the new server
    assert sub.wait_ms(None, 10.0) > 0
    assert sub.wait_ms(10.5, 10.0) == 501


def test_a_subscription_drops_and_counts_what_does_not_parse() -> None:
    p = protocol()
    sub = SubscriptionProtocol(p, p.subscription_core((), 0, 10), None)
    assert sub.on_stream([b"B", b"\xc1"], 0.0) is NOTHING
    assert sub.on_reply([b"junk"], 0.0) is NOTHING
    assert sub.malformed == 2


def test_resets_reach_the_user_in_order_with_the_events() -> None:
    p = protocol()
    calls: list[str] = []
    sub = SubscriptionProtocol(p, p.subscription_core((), 0, 10), lambda: calls.append("r"))
    sub.take(Actions(reset=True))
    assert sub.delivered == 0
    assert sub.pop() is None and calls == ["r"]


def test_a_confirmed_publish_fails_over_round_by_round_then_times_out() -> None:
    """The flow both shells drive: each unanswered round moves publishing to the next
    endpoints; after the last, TimeoutError. (Driven by hand: no bus, no waiting.)"""
    client = EventBusClient(BASES, producer="p")
    try:
        flow = client._publishing([("/a", b"x")], True, 1.0)
        assert flow is not None
        rounds: list[str] = []
        with pytest.raises(TimeoutError, match="from any endpoint"):
            wait = next(flow)
            while True:
                assert wait.ms > 0
                rounds.append(client.endpoints[client._protocol.publishing].collector)
                wait = flow.send(False)  # the wait timed out
        assert rounds == [BusEndpoints.from_base(b).collector for b in BASES]
        assert client._protocol.publishing == 0  # round the ring, back to the first
    finally:
        client.close(0)


def test_an_unconfirmed_publish_sends_at_once_without_a_flow() -> None:
    client = EventBusClient(BASES[:1], producer="p")
    try:
        assert client._publishing([("/a", b"x")], False, 1.0) is None
    finally:
        client.close(0)
