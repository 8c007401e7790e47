"""The Event BUS door's core alone, its PUBLISHER and COLLECTOR halves: XPUB
subscriptions, BROADCAST, HUGZ on a passed-in clock; what a PUB or ZB-PUB adds to the
group commit, refusals counted by reason with their ERROR, confirms. No sockets."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from tests.support.logged import TS, UUID, logged
from zbus.common.protocols import eventbus as eb
from zbus.common.protocols import eventbus_ext as ext
from zbus.eventbus.core.spec import Confirm, SpecCollector, SpecPublisher, Subscriptions, matches

A, B = b"\x00client-a", b"\x00client-b"


# ------------------------------------------------------------------ publisher
def test_subscriptions_follow_xpub_messages() -> None:
    subs = Subscriptions()
    assert not subs.active and not subs.wants("/a")
    assert subs.update(b"\x01/a/")
    assert subs.active and subs.wants("/a/b") and not subs.wants("/b")
    assert subs.update(b"\x01")
    assert subs.wants("/b")
    assert subs.update(b"\x00") and not subs.wants("/b")
    assert subs.update(b"\x00/a/") and not subs.active
    assert not subs.update(b"") and not subs.update(b"\x02/a")


def test_matches_is_a_prefix_match_and_no_subtree_matches_all() -> None:
    assert matches("/a/b", ())
    assert matches("/a/b", ("/x", "/a/"))
    assert not matches("/a/b", ("/x",))


def test_broadcasts_are_the_wanted_events_in_order() -> None:
    pub = SpecPublisher(eb.SPEC, 1.0, hugz=True)
    stored = [logged(1, "/a/1"), logged(2, "/b/1"), logged(3, "/a/2")]
    assert list(pub.broadcasts(stored)) == []  # no subscriber: no work
    pub.subscribe(b"\x01/a/")
    assert list(pub.broadcasts(stored)) == [
        eb.encode(eb.Broadcast(e.topic, e.seq, e.producer, e.ts, e.uuid, e.data))
        for e in (stored[0], stored[2])
    ]
    assert not pub.subscribe(b"garbage")


def test_hugz_are_due_an_interval_after_the_last_send() -> None:
    pub = SpecPublisher(eb.SPEC, 2.0, hugz=True)
    pub.beat.sent(10.0)
    assert pub.next_deadline() == 12.0
    assert not pub.beat.is_due(11.9) and pub.beat.timeout(11.0) == 1.0
    assert pub.beat.is_due(12.0) and pub.beat.timeout(13.0) == 0.0
    assert pub.heartbeat(5, 12.0) == eb.encode(eb.Heartbeat(5))
    assert pub.next_deadline() == 14.0
    node = SpecPublisher(eb.NODE_REFERENCE, 2.0, hugz=False)
    assert node.heartbeat(5, 1.0) is None and node.next_deadline() == 3.0


# ------------------------------------------------------------------ collector
@dataclass(frozen=True)
class New:
    topic: str
    producer: str
    ts: str
    uuid: str
    data: bytes


def new_collector(max_batch_events: int = 3) -> SpecCollector[New]:
    return SpecCollector(eb.SPEC, New, max_event_bytes=64, max_batch_events=max_batch_events)


def uid(i: int) -> str:
    return f"00000000-0000-4000-8000-{i:012d}"


def zb_pub(n: int, confirm: bool = True) -> list[bytes]:
    events = tuple(ext.EventData(f"/t/{i}", "p", TS, uid(i), b"x") for i in range(n))
    return ext.encode(ext.PubBatch(events, confirm))


def test_a_spec_pub_adds_one_event_and_no_confirm() -> None:
    collector = new_collector()
    batch: list[New] = []
    confirms: list[Confirm] = []
    frames = eb.encode(eb.Pub("/a", None, "p", TS, UUID, b"data"))
    assert collector.take(A, frames, batch, confirms) == 1
    assert batch == [New("/a", "p", TS, UUID, b"data")] and confirms == []
    assert collector.refusals == []


def test_a_zb_pub_adds_its_events_and_its_confirm() -> None:
    collector = new_collector()
    batch: list[New] = []
    confirms: list[Confirm] = []
    assert collector.take(A, zb_pub(2), batch, confirms) == 2
    assert collector.take(B, zb_pub(1, confirm=False), batch, confirms) == 1
    assert [e.topic for e in batch] == ["/t/0", "/t/1", "/t/0"]
    assert confirms == [(A, [uid(0), uid(1)])]


def test_confirms_give_each_uuid_its_sequence_stored_now_or_before() -> None:
    collector = new_collector()
    stored = [logged(10, "/t/0", uuid=uid(0))]
    replies = collector.confirmations(stored, [(uid(1), 4)], [(A, [uid(0), uid(1)]), (B, [uid(9)])])
    assert [(who, ext.decode_collector_reply(frames)) for who, frames in replies] == [
        (A, ext.Confirm(((uid(0), 10), (uid(1), 4)))),
        (B, ext.Confirm(())),
    ]
    assert collector.confirmations(stored, [], []) == []
    ((who, frames),) = collector.failures("disk full", [(A, [uid(0)])])
    assert who == A and ext.decode_collector_reply(frames) == ext.Error("storage failed: disk full")


@pytest.mark.parametrize(
    ("frames", "reason", "answered"),
    [
        (zb_pub(4), "too_large", True),
        ([ext.PUB_BATCH, b"\xc1", b""], "bad_value", True),
        ([b"\0ZB-NOPE", b"", b""], "unknown_command", True),
        (eb.encode(eb.Pub("/a", None, "p", TS, UUID, bytes(65))), "bad_data", False),
        ([b"", *eb.encode(eb.Pub("/a", None, "p", TS, UUID, b""))[1:]], "bad_topic", False),
        ([b"/a", b"x"], "frame_count", False),
    ],
)
def test_a_refused_message_adds_nothing_and_is_counted_by_reason(
    frames: list[bytes], reason: str, answered: bool
) -> None:
    collector = new_collector()
    batch: list[New] = []
    confirms: list[Confirm] = []
    assert collector.take(A, frames, batch, confirms) == 0
    assert batch == [] and confirms == []
    (refusal,) = collector.refusals
    assert (refusal.identity, refusal.reason) == (A, reason)
    if answered:
        assert refusal.reply is not None
        assert isinstance(ext.decode_collector_reply(refusal.reply), ext.Error)
    else:
        assert refusal.reply is None


def test_a_reserved_topic_is_refused_but_from_the_trusted_doors() -> None:
    collector = new_collector()
    collector.reserve("/zbus/pppp/state", b"door-token")
    batch: list[New] = []
    confirms: list[Confirm] = []
    state = ext.EventData("/zbus/pppp/state", "pppp:state", TS, uid(1), b"x")
    other = ext.EventData("/zbus/pppp/statement", "p", TS, uid(2), b"x")
    pub = eb.encode(eb.Pub("/zbus/pppp/state", None, "p", TS, UUID, b"x"))
    for frames in (ext.encode(ext.PubBatch((other, state), True)), pub):
        assert collector.take(A, frames, batch, confirms) == 0
    assert [r.reason for r in collector.refusals] == ["reserved_topic", "reserved_topic"]
    assert batch == [] and confirms == []
    # The doors' own identity starts with the token; other topics pass from anyone.
    assert (
        collector.take(b"door-tokenpppp", ext.encode(ext.PubBatch((state,), True)), batch, []) == 1
    )
    assert collector.take(A, zb_pub(2), batch, confirms) == 2
    assert [e.topic for e in batch] == ["/zbus/pppp/state", "/t/0", "/t/1"]
