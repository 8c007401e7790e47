"""The PPPP door's core hands out what to send and what to read; what ZeroMQ does not
take comes back to it (ADR 0006, "The door as served"): a message refused stays a
position, is sent later, exactly once, and counts in flight only once it went."""

from __future__ import annotations

from tests.unit.eventbus.pppp_harness import Door
from zbus.common.protocols.pppp import AckNack, Subscribe
from zbus.eventbus.core.pppp import HEARTBEAT, MessagesRead, SyncRead

A = b"sub-a"


def taking(door: Door, count: int) -> None:
    """ZeroMQ's queue takes ``count`` more messages, then is full."""
    left = count

    def queue(identity: bytes, frames: list[bytes]) -> bool:
        nonlocal left
        left -= 1
        return left >= 0

    door.queue = queue


def test_a_batch_taken_in_part_goes_on_from_the_first_message_refused() -> None:
    door = Door()
    door.subscribe(A, "/a/")
    door.publish(*[f"/a/{i}" for i in range(1, 6)])
    taking(door, 2)
    door.pump()
    assert door.messages(A) == [(1, "/a/1"), (2, "/a/2")]
    sub = door.core.subscribers[A]
    conv = sub.conversations["/a/"]
    assert sub.blocked and conv.next == 3 and [c for c, _ in conv.flight] == [1, 2]
    assert sub.inflight == conv.inflight_bytes == sum(size for _, size in conv.flight)
    assert door.core.sent["publish"] == 2 and sub.sends == 2 + 1  # and the SYNC's end
    door.queue = None
    door.pump()
    assert door.messages(A) == [(3, "/a/3"), (4, "/a/4"), (5, "/a/5")]
    door.receive(A, AckNack("/a/", 5))
    assert sub.inflight == 0 and door.core.sent["publish"] == 5


def test_a_refused_resend_is_resent_later() -> None:
    door = Door()
    door.subscribe(A, "/a/")
    door.publish("/a/1", "/a/2", "/a/3")
    door.pump()
    door.messages(A)
    door.receive(A, AckNack("/a/", 3, ((1, 2),)))
    taking(door, 1)
    door.pump()
    assert door.messages(A) == [(1, "/a/1")]
    conv = door.core.subscribers[A].conversations["/a/"]
    assert conv.resend == [(2, 2)] and door.core.sent["resend"] == 1
    door.queue = None
    door.pump()
    assert door.messages(A) == [(2, "/a/2")]
    assert door.core.sent["resend"] == 2 and door.core.nacks == 2


def test_a_sync_refused_in_part_goes_on_after_its_last_item_taken() -> None:
    door = Door()
    for i in range(10):
        door.log.append(f"/a/{i}")
    door.core.advance(10)
    door.receive(A, Subscribe("/a/"))
    taking(door, 4)
    door.pump()
    first = door.messages(A)
    assert first == [(0, f"/a/{i}") for i in range(4)]
    sync = door.core.subscribers[A].conversations["/a/"].sync
    assert sync is not None and sync.items == 4 and sync.cursor == "/a/3" and not sync.ended
    door.queue = None
    door.pump()
    rest = door.messages(A)
    assert rest == [(0, f"/a/{i}") for i in range(4, 10)] + [(0, "<end 0 10>")]
    assert door.core.sent["sync"] == 11


def test_heartbeats_the_queue_refused_are_not_counted_as_sent() -> None:
    door = Door()
    door.subscribe(A, "/a/")
    door.at(0.1)  # the first HEARTBEAT
    assert door.core.sent["heartbeat"] == 1
    sub = door.core.subscribers[A]
    door.full.add(A)
    door.at(1.1)
    assert door.core.sent["heartbeat"] == 1 and sub.sent_at == 0.1 and sub.sends == 2
    door.full.clear()
    door.at(1.11)  # due since 1.1: sent at the next tick
    assert door.core.sent["heartbeat"] == 2 and sub.sent_at == 1.11


def test_a_connection_gone_mid_batch_starts_again_from_the_first_message_not_acked() -> None:
    door = Door()
    door.subscribe(A, "/a/")
    door.publish(*[f"/a/{i}" for i in range(1, 5)])
    door.gone.add(A)
    door.pump()
    sub = door.core.subscribers[A]
    assert door.messages(A) == [] and sub.inflight == 0
    door.gone.clear()
    door.pump()
    assert [s for s, _ in door.messages(A)] == [1, 2, 3, 4]


def test_the_core_reads_nothing_itself_it_asks_and_waits() -> None:
    door = Door(cache_bytes=2000)
    door.subscribe(A, "/a/")
    door.publish(*[f"/a/{i}" for i in range(1, 40)])  # most fall out of the cache
    core = door.core
    core.pump(0.0)
    sends, reads, _ = core.take()
    assert sends == [] and [type(r) for r in reads] == [MessagesRead]
    read = reads[0]
    assert isinstance(read, MessagesRead) and read.cseq == 1
    core.pump(0.0)  # asked once: waits for the answer
    assert core.take().reads == []
    door.answer(read)
    door.pump()
    assert [s for s, _ in door.messages(A)] == list(range(1, 40))


def test_a_sync_page_is_asked_for_and_an_answer_for_an_older_sync_is_ignored() -> None:
    door = Door()
    door.log.append("/a/x")
    door.core.advance(1)
    door.receive(A, Subscribe("/a/"))
    door.core.pump(0.0)
    reads = door.core.take().reads
    assert len(reads) == 1 and isinstance(reads[0], SyncRead)
    door.receive(A, Subscribe("/a/"))  # again, before the page came: a new SYNC
    door.core.on_sync_page(reads[0], [], None)  # the old SYNC's (empty, last) page
    door.pump()
    assert door.messages(A) == [(0, "/a/x"), (0, "<end 0 1>")]  # the new SYNC's own


def test_a_heartbeat_is_one_shared_message() -> None:
    door = Door()
    door.subscribe(A, "/a/")
    door.core.tick(0.1)
    (batch,) = door.core.take().sends
    assert batch.messages == [HEARTBEAT] and batch.messages[0] is HEARTBEAT
