"""The PPPP door's bytes in flight and its deadlines, time passed in (ADR 0006, "Backlogs
are positions"; docs/protocols/pppp.md, "Memory bound").

Every message sent to a subscriber is counted (its frames, its identity and ZeroMQ's own
cost of a message) until an ACK covers it; a SYNC's messages until the SYNC's ACK or until
ZeroMQ's queue has provably passed them. Nothing is sent past ``peer_bytes``.
"""

from __future__ import annotations

from tests.unit.eventbus.pppp_harness import Door
from zbus.common.protocols.pppp import AckNack, Heartbeat, Subscribe, encode
from zbus.eventbus.core.pppp import MESSAGE_OVERHEAD, QUEUE_MARGIN, Deadlines

A, B = b"sub-a", b"sub-b"


def counted(identity: bytes, frames: list[bytes]) -> int:
    """What one message sent to ``identity`` counts in flight."""
    return sum(map(len, frames)) + len(identity) + MESSAGE_OVERHEAD


def sent_bytes(door: Door, identity: bytes) -> dict[int, int]:
    """Counted bytes of each PUBLISH (by sequence) sent to ``identity`` since the last
    take; the messages are taken."""
    out: dict[int, int] = {}
    for i, frames in door.out:
        if i == identity and len(frames) > 3:
            out[int.from_bytes(frames[1], "big")] = counted(identity, frames)
    door.out = [(i, f) for i, f in door.out if i != identity]
    return out


def message_bytes(topic: str, identity: bytes = A, channel: str = "/a/") -> int:
    door = Door()
    door.subscribe(identity, channel)
    door.publish(topic)
    door.pump()
    return sent_bytes(door, identity)[1]


def test_bytes_in_flight_are_what_was_sent_and_not_acked() -> None:
    door = Door()
    door.subscribe(A, "/a/")
    door.publish(*[f"/a/{i}" for i in range(1, 6)])
    door.pump()
    each = sent_bytes(door, A)
    sub = door.core.subscribers[A]
    assert sorted(each) == [1, 2, 3, 4, 5]
    assert sub.inflight == sum(each.values())
    door.receive(A, AckNack("/a/", 3))
    assert sub.inflight == each[4] + each[5]
    door.receive(A, AckNack("/a/", 5))
    assert sub.inflight == 0
    assert not sub.conversations["/a/"].flight


def test_nothing_is_sent_past_the_peer_bytes() -> None:
    size = message_bytes("/a/1")
    door = Door(peer_bytes=3 * size + size // 2)
    door.subscribe(A, "/a/")
    door.publish(*[f"/a/{i}" for i in range(1, 10)])  # same size each: one digit
    door.pump()
    assert sorted(sent_bytes(door, A)) == [1, 2, 3]
    sub = door.core.subscribers[A]
    assert sub.inflight == 3 * size and not sub.blocked  # waits for an ACK, not ZeroMQ
    door.receive(A, AckNack("/a/", 1))
    door.pump()
    assert sorted(sent_bytes(door, A)) == [4]  # exactly the room one ACK made
    door.receive(A, AckNack("/a/", 4))
    door.pump()
    assert sorted(sent_bytes(door, A)) == [5, 6, 7]
    assert sub.inflight <= door.core.limits.peer_bytes


def test_one_message_goes_whatever_its_size() -> None:
    door = Door(peer_bytes=10)  # less than any message: one at a time, never none
    door.subscribe(A, "/a/")
    door.publish("/a/1", "/a/2")
    door.pump()
    assert sorted(sent_bytes(door, A)) == [1]
    door.receive(A, AckNack("/a/", 1))
    door.pump()
    assert sorted(sent_bytes(door, A)) == [2]


def test_a_resend_counts_again_until_an_ack_covers_it() -> None:
    door = Door()
    door.subscribe(A, "/a/")
    door.publish("/a/1", "/a/2", "/a/3")
    door.pump()
    each = sent_bytes(door, A)
    door.receive(A, AckNack("/a/", 3, ((2, 2),)))  # 2 is missing
    door.pump()
    assert sent_bytes(door, A) == {2: each[2]}
    sub = door.core.subscribers[A]
    # 1 is ACKed; 2 was sent twice (both copies may be queued) and 3 once.
    assert sub.inflight == 2 * each[2] + each[3]
    door.receive(A, AckNack("/a/", 3))
    assert sub.inflight == 0


def test_a_subscribe_again_on_the_same_connection_keeps_what_was_sent_counted() -> None:
    size = message_bytes("/a/1")
    door = Door(peer_bytes=4 * size)
    door.core.receive(A, encode(Subscribe("/a/")), 0.0, connection=1)
    door.pump()
    door.core.receive(A, encode(AckNack("/a/", 0)), 0.0, connection=1)
    door.publish("/a/1", "/a/2", "/a/3")
    door.pump()
    assert sorted(sent_bytes(door, A)) == [1, 2, 3]
    # The same connection: 1..3 are still ahead in ZeroMQ's queue, so one more fits.
    door.core.receive(A, encode(Subscribe("/a/")), 0.1, connection=1)
    door.pump()
    assert sorted(sent_bytes(door, A)) == [1]
    sub = door.core.subscribers[A]
    assert sub.inflight == 4 * size
    for seq in (1, 2):  # each ACK frees one message's room (the oldest copy sent)
        door.core.receive(A, encode(AckNack("/a/", seq)), 0.2, connection=1)
        assert sub.inflight == 3 * size
        door.pump()
        assert sorted(sent_bytes(door, A)) == [seq + 1]
    door.core.receive(A, encode(AckNack("/a/", 3)), 0.3, connection=1)
    assert sub.inflight == 0  # both copies of each ACKed


def test_a_new_connection_forgets_what_the_old_one_had_queued() -> None:
    size = message_bytes("/a/1")
    door = Door(peer_bytes=4 * size)
    door.core.receive(A, encode(Subscribe("/a/")), 0.0, connection=1)
    door.pump()
    door.core.receive(A, encode(AckNack("/a/", 0)), 0.0, connection=1)
    door.publish("/a/1", "/a/2", "/a/3", "/a/4", "/a/5")
    door.pump()
    assert sorted(sent_bytes(door, A)) == [1, 2, 3, 4]
    # Handed over to a new connection (its first word a HEARTBEAT, not a SUBSCRIBE):
    # the old queue went with the old connection, and what it held goes again.
    door.core.receive(A, encode(Heartbeat()), 0.1, connection=2)
    assert door.core.subscribers[A].inflight == 0
    door.pump()
    assert sorted(sent_bytes(door, A)) == [1, 2, 3, 4]
    door.core.receive(A, encode(AckNack("/a/", 4)), 0.2, connection=2)
    door.pump()
    assert sorted(sent_bytes(door, A)) == [5]


def test_an_unreachable_subscriber_counts_nothing_in_flight() -> None:
    door = Door()
    door.subscribe(A, "/a/")
    door.publish("/a/1", "/a/2")
    door.pump()
    door.receive(A, AckNack("/a/", 1))
    door.out.clear()
    door.core.gone(A)  # a send found its connection gone
    sub = door.core.subscribers[A]
    assert sub.inflight == 0 and sub.conversations["/a/"].next == 2
    door.pump()
    assert sorted(sent_bytes(door, A)) == [2]  # from its first message not ACKed


def test_a_sync_larger_than_the_room_goes_on_as_the_queue_passes_it() -> None:
    peer_bytes = 50 * message_bytes("/a/0000")  # a SYNC item counts as much
    door = Door(window=4, peer_bytes=peer_bytes)  # ZeroMQ's queue: 4 + QUEUE_MARGIN
    for i in range(600):
        door.log.append(f"/a/{i:04}")  # the state: 600 topics
    door.core.advance(600)
    door.receive(A, Subscribe("/a/"))
    sub = door.core.subscribers[A]
    highest = 0
    for _ in range(100):
        door.pump()
        highest = max(highest, sub.inflight)
        if sub.conversations["/a/"].sync.ended:  # type: ignore[union-attr]
            break
    sync = door.messages(A)
    assert len(sync) == 601 and sync[-1] == (0, "<end 0 600>")
    assert highest <= peer_bytes
    # HEARTBEATs pushed the queue on: once ZeroMQ takes a message, every one sent
    # a queue's length before it has left the queue.
    assert door.core.sent["heartbeat"] >= QUEUE_MARGIN
    door.receive(A, AckNack("/a/", 0))
    assert sub.inflight == 0


def test_a_sync_to_a_subscriber_that_does_not_read_stops_at_its_bytes() -> None:
    door = Door(window=4, peer_bytes=50 * message_bytes("/a/0000"))
    for i in range(600):
        door.log.append(f"/a/{i:04}")
    door.core.advance(600)
    sent = 0

    def queue(identity: bytes, frames: list[bytes]) -> bool:
        nonlocal sent
        sent += 1
        return sent <= 4 + QUEUE_MARGIN  # ZeroMQ's queue, never read

    door.queue = queue
    door.core.receive(A, encode(Subscribe("/a/")), 0.0)
    for _ in range(20):
        door.pump()
    sub = door.core.subscribers[A]
    assert sub.inflight <= door.core.limits.peer_bytes
    assert sub.blocked and sub.sends == 4 + QUEUE_MARGIN  # the queue took no more
    assert door.core.sent["sync"] == 50  # the bytes' worth of items, then HEARTBEATs


# ------------------------------------------------------------------ deadlines
def test_a_tick_looks_only_at_the_subscribers_due() -> None:
    door = Door()
    for i in range(100):
        door.subscribe(b"s%d" % i, "/a/")
    door.at(0.1)  # every one's first HEARTBEAT
    looked: list[bytes] = []
    tick_one = door.core.tick_one

    def spy(sub, now):  # type: ignore[no-untyped-def]
        looked.append(sub.identity)
        tick_one(sub, now)

    door.core.tick_one = spy  # type: ignore[method-assign]
    door.now = 0.5
    door.subscribe(B, "/b/")
    door.at(0.6)  # B's first HEARTBEAT; the others' next one is at 1.1
    assert looked == [B]
    assert sum(isinstance(c, Heartbeat) for c in door.take(B)) == 1
    looked.clear()
    door.at(1.1)
    assert len(looked) == 100 and door.core.next_deadline() == 1.6


def test_deadlines_come_earliest_first_each_once() -> None:
    d = Deadlines()
    d.set(A, 5.0)
    d.set(B, 3.0)
    d.earlier(A, 4.0)
    d.earlier(B, 6.0)  # later: kept at 3
    assert d.next() == 3.0
    assert d.due(3.5) == [B]
    assert d.next() == 4.0 and d.at(A) == 4.0
    assert d.due(10.0) == [A]  # the stale 5.0 entry is skipped
    assert d.next() is None and len(d) == 0


def test_stale_deadlines_do_not_pile_up() -> None:
    d = Deadlines()
    for i in range(100_000):
        d.earlier(A, 1e9 - i)  # earlier and earlier: a new entry each time
    assert len(d._heap) <= 2 + 1024 + 1
    assert d.due(1e9) == [A]
