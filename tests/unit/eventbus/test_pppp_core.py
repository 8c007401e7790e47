"""The PPPP door's core, time passed in: every rule of ADR 0006 on an in-memory log."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import FUZZ_EXAMPLES
from tests.unit.eventbus.pppp_harness import TIMES, Door
from tests.unit.protocols.strategies import frame_lists
from zbus.common.protocols.pppp import AckNack, Custom, Heartbeat, Subscribe
from zbus.eventbus.core.pppp import MARK_EVERY, Times

A, B = b"sub-a", b"sub-b"


# ------------------------------------------------------------------ SYNC and numbering
def test_a_new_subscriber_gets_the_state_then_live_messages_numbered_per_channel() -> None:
    door = Door()
    door.publish("/a/1", "/a/2", "/a/1", "/b/1")
    door.core.advance(4)
    # The state: the latest event of each topic of the channel, as sequence-0 PUBLISHes,
    # then the end marker with the head (0: the channel is new) and the item count.
    assert door.subscribe(A, "/a/") == [(0, "/a/1"), (0, "/a/2"), (0, "<end 0 2>")]
    door.publish("/a/3", "/b/2", "/a/1")
    door.pump()
    assert door.messages(A) == [(1, "/a/3"), (2, "/a/1")]
    # Another channel over the same events numbers them its own way.
    door.subscribe(B, "")
    door.publish("/b/3", "/a/4")
    door.pump()
    assert door.messages(B) == [(1, "/b/3"), (2, "/a/4")]
    assert door.messages(A) == [(3, "/a/4")]


def test_a_sync_item_newer_than_the_head_comes_as_a_live_message_instead() -> None:
    door = Door()
    door.publish("/a/1")
    door.subscribe(A, "/a/")
    door.log.append("/a/1")  # committed; not yet taken in by the door
    door.receive(B, Subscribe("/a/"))
    door.pump()
    # B's SYNC is at head 1 (bus sequence 1): the topic's latest is 2, not part of it.
    assert door.messages(B) == [(0, "<end 0 0>")]


def test_subscribe_while_the_sync_is_not_acked_sends_the_sync_again() -> None:
    door = Door()
    door.publish("/a/1")
    door.receive(A, Subscribe("/a/"))
    door.pump()
    assert door.messages(A) == [(0, "/a/1"), (0, "<end 0 1>")]
    door.publish("/a/2")
    door.receive(A, Subscribe("/a/"))  # it counted fewer items than the end says
    door.pump()
    assert door.messages(A) == [(0, "/a/1"), (0, "/a/2"), (0, "<end 1 2>")]


# ------------------------------------------------------------------ ACK, NACK, window
def test_nack_ranges_are_resent_and_acks_move_the_checkpoint() -> None:
    door = Door()
    door.subscribe(A, "/a/")
    door.publish(*[f"/a/{i}" for i in range(1, 11)])
    door.pump()
    assert [s for s, _ in door.messages(A)] == list(range(1, 11))
    door.receive(A, AckNack("/a/", 10, ((3, 4), (7, 7))))
    door.pump()
    assert [s for s, _ in door.messages(A)] == [3, 4, 7]
    assert door.core.nacks == 3
    changes = door.core.take_changes()
    assert changes.positions == {(A, "/a/"): 2}
    assert changes.checkpoints["/a/"] == (2, 2)  # message 2 is bus sequence 2
    door.receive(A, AckNack("/a/", 10))
    changes = door.core.take_changes()
    assert changes.positions == {(A, "/a/"): 10}
    assert changes.checkpoints == {"/a/": (10, 10)}


@pytest.mark.parametrize(
    ("ack", "reason"),
    [
        (AckNack("/a/", 4), "ack_above_sent"),  # only 3 were sent
        (AckNack("/b/", 1), "not_subscribed"),
    ],
)
def test_an_impossible_ack_is_dropped_and_counted(ack: AckNack, reason: str) -> None:
    door = Door()
    door.subscribe(A, "/a/")
    door.publish("/a/1", "/a/2", "/a/3")
    door.pump()
    door.messages(A)
    door.receive(A, ack)
    assert door.core.malformed[reason] == 1
    assert door.core.subscribers[A].conversations["/a/"].acked == 0
    door.receive(A, AckNack("/a/", 3))  # and the conversation goes on
    assert door.core.subscribers[A].conversations["/a/"].acked == 3


def test_no_more_than_a_window_is_unacked() -> None:
    door = Door(window=3)
    door.subscribe(A, "/a/")
    door.publish(*[f"/a/{i}" for i in range(1, 8)])
    door.pump()
    assert [s for s, _ in door.messages(A)] == [1, 2, 3]
    door.receive(A, AckNack("/a/", 2))
    door.pump()
    assert [s for s, _ in door.messages(A)] == [4, 5]


def test_a_full_queue_keeps_the_position_and_sends_later() -> None:
    door = Door()
    door.subscribe(A, "/a/")
    door.full.add(A)
    door.publish("/a/1", "/a/2")
    door.pump()
    assert door.messages(A) == []
    assert door.core.subscribers[A].blocked
    door.full.clear()
    door.pump()
    assert door.messages(A) == [(1, "/a/1"), (2, "/a/2")]


# ------------------------------------------------------------------ backlog from the log
def test_messages_older_than_the_cache_are_read_from_the_log_by_marks() -> None:
    door = Door(cache_bytes=64 * 1024, window=100_000)
    door.subscribe(A, "/a/")
    topics = [f"/a/{i % 7}" if i % 3 else "/b/x" for i in range(3 * MARK_EVERY * 3)]
    door.publish(*topics)
    assert len(door.core.cache) < 200  # most fell out
    door.full.add(A)
    door.pump()
    door.full.clear()
    for _ in range(20):
        door.pump()
    got = door.messages(A)
    want = [t for t in topics if t.startswith("/a/")]
    assert got == list(enumerate(want, 1))
    assert door.log.reads > 0
    assert door.core.channels.get("/a/").marks  # type: ignore[union-attr]


# ------------------------------------------------------------------ the first-idle rule
@pytest.mark.parametrize(
    ("silence", "resent"),
    [(0.39, False), (0.40, True), (0.41, True)],  # misses (4) x first idle (0.1 s)
)
def test_a_silent_subscriber_that_owes_an_ack_gets_its_last_message_again(
    silence: float, resent: bool
) -> None:
    door = Door()
    door.subscribe(A, "/a/")
    door.publish("/a/1", "/a/2", "/a/3")
    door.pump()
    door.messages(A)
    door.receive(A, Heartbeat())  # a heartbeat is no ACK
    door.at(silence)
    sent = [s for s, _ in door.messages(A)]
    assert (3 in sent) is resent  # the last one, one message whatever the backlog
    assert sent.count(3) <= 1 and 1 not in sent and 2 not in sent
    assert door.core.first_idle_resends == int(resent)
    if resent:  # its ACK tells the rest
        door.receive(A, AckNack("/a/", 3, ((1, 2),)))
        door.pump()
        assert door.messages(A) == [(1, "/a/1"), (2, "/a/2")]


def test_no_resend_to_a_subscriber_that_acked() -> None:
    door = Door()
    door.subscribe(A, "/a/")
    door.publish("/a/1")
    door.pump()
    assert door.messages(A) == [(1, "/a/1")]
    door.receive(A, AckNack("/a/", 1))
    door.at(0.5)
    assert door.messages(A) == []


def test_a_lost_sync_end_is_sent_again_by_the_first_idle_rule() -> None:
    door = Door()
    door.receive(A, Subscribe("/a/"))
    door.pump()
    assert door.messages(A) == [(0, "<end 0 0>")]
    door.at(0.4)
    assert door.messages(A) == [(0, "<end 0 0>")]


# ------------------------------------------------------------------ heartbeats, liveness
@pytest.mark.parametrize(
    ("times", "beats"),
    [
        ((0.09,), 0),
        ((0.1,), 1),  # the first after the first idle time
        ((0.1, 0.5), 1),
        ((0.1, 1.1), 2),  # then every idle time
        ((0.1, 1.1, 2.1), 3),
    ],
)
def test_heartbeats_go_after_the_first_idle_then_every_idle(
    times: tuple[float, ...], beats: int
) -> None:
    door = Door()
    door.subscribe(A, "/a/")
    door.out.clear()
    for t in times:
        door.receive(A, Heartbeat())  # alive, silent towards nobody
        door.at(t)
    assert sum(isinstance(c, Heartbeat) for c in door.take(A)) == beats


def test_traffic_counts_as_a_heartbeat() -> None:
    door = Door()
    door.subscribe(A, "/a/")
    door.out.clear()
    door.at(0.05)
    door.publish("/a/1")
    door.pump()
    door.at(0.12)  # 0.07 s after the PUBLISH
    assert not any(isinstance(c, Heartbeat) for c in door.take(A))


def test_a_silent_subscriber_is_disconnected_kept_for_the_grace_then_dropped() -> None:
    times = Times(first_idle=0.1, idle=1.0, misses=3, grace=10.0)
    door = Door(times=times)
    door.subscribe(A, "/a/")
    door.at(2.9)
    assert door.core.subscribers[A].live
    door.at(3.0)  # misses x idle of silence
    assert not door.core.subscribers[A].live and door.core.disconnects == 1
    door.out.clear()
    door.publish("/a/1")
    door.at(4.0)
    assert door.take(A) == []  # nothing more is sent to it
    door.receive(A, AckNack("/a/", 0))
    assert door.core.malformed["no_conversation"] == 1
    door.at(12.9)
    assert A in door.core.subscribers
    door.at(13.0)  # the grace period after the disconnect
    assert A not in door.core.subscribers and door.core.grace_expiries == 1
    changes = door.core.take_changes()
    assert changes.positions[(A, "/a/")] is None
    assert changes.checkpoints["/a/"] is None  # its last subscriber: the channel goes


def test_a_subscriber_back_within_the_grace_gets_its_backlog_after_it_the_state() -> None:
    door = Door(times=Times(first_idle=0.1, idle=1.0, misses=4, grace=10.0))
    door.subscribe(A, "/a/")
    door.subscribe(B, "/a/")
    door.publish("/a/1", "/a/2")
    door.pump()
    door.out.clear()
    door.receive(A, AckNack("/a/", 1))
    door.receive(B, AckNack("/a/", 1))
    door.at(4.0)  # both disconnected
    door.publish("/a/3")
    door.receive(A, Subscribe("/a/"))
    door.pump()
    assert door.messages(A) == [(2, "/a/2"), (3, "/a/3")]  # no SYNC, from acked + 1
    door.at(14.0)  # B's grace ran out; A is silent too, disconnected at 12
    door.receive(B, Subscribe("/a/"))
    door.pump()
    assert door.messages(B) == [(0, "/a/1"), (0, "/a/2"), (0, "/a/3"), (0, "<end 3 3>")]


# ------------------------------------------------------------------ restart
def test_after_a_restart_a_subscriber_continues_with_no_gap_and_no_duplicate() -> None:
    door = Door()
    door.subscribe(A, "/a/")
    door.publish("/b/0", "/a/1", "/a/2", "/b/1", "/a/3")
    door.pump()
    door.receive(A, AckNack("/a/", 2))
    stored = door.core.take_changes()
    door.publish("/a/4")  # numbered 4, not stored anywhere
    # A new core over the same log, from what was stored.
    again = Door()
    again.log = door.log
    channels = [(n, c[0], c[1]) for n, c in stored.checkpoints.items() if c is not None]
    positions = [(i, n, a) for (i, n), a in stored.positions.items() if a is not None]
    again.core.load(min(s for _, _, s in channels), channels, positions, 0.0)
    again.core.add_sequenced((s, door.log.row(s)) for s, _, _ in door.log.events)
    again.receive(A, Subscribe("/a/"))
    again.pump()
    assert again.messages(A) == [(3, "/a/3"), (4, "/a/4")]


# ------------------------------------------------------------------ refusals and bounds
@pytest.mark.parametrize(
    ("frames", "reason"),
    [
        ([], "frame_count"),
        ([b"\x09"], "unknown_command"),
        ([b"\x03", b"x"], "frame_count"),
        ([b"\x02/a/", b"\x00" * 7], "bad_value"),
        ([b"\x02/a/", (5).to_bytes(8, "big"), b"\x00" * 15], "bad_value"),
        ([b"\x01\xff"], "bad_value"),
        ([b"\x01" + b"x" * 1025], "channel_too_long"),
        ([b"\x03"], "no_conversation"),
        ([b"\x04", b"hello"], "no_conversation"),
    ],
)
def test_malformed_commands_are_dropped_and_counted(frames: list[bytes], reason: str) -> None:
    door = Door()
    door.receive(b"stranger", frames)
    assert door.core.malformed[reason] == 1
    assert door.core.refusals and door.core.refusals[0][1] == reason
    assert door.take(b"stranger") == []


def test_subscribers_and_channels_are_bounded() -> None:
    door = Door(max_subscribers=2, max_channels=2)
    door.subscribe(A, "/1")
    door.subscribe(A, "/2")
    door.receive(A, Subscribe("/3"))
    assert door.core.malformed["too_many_channels"] == 1
    door.subscribe(B, "/1")
    door.receive(b"third", Subscribe("/1"))
    assert door.core.malformed["too_many_subscribers"] == 1
    assert set(door.core.subscribers) == {A, B}


def test_custom_is_handed_out_to_publish_within_the_event_bound() -> None:
    door = Door(max_custom_bytes=100)
    door.subscribe(A, "/a/")
    door.receive(A, Custom((b"x", b"y")))
    door.receive(A, Custom((b"z" * 200,)))
    assert door.core.customs == [(A, (b"x", b"y"))]
    assert door.core.malformed["custom_too_large"] == 1


@settings(max_examples=FUZZ_EXAMPLES, deadline=None)
@given(frame_lists, st.booleans())
def test_any_frames_are_taken_or_counted_never_raise(frames: list[bytes], known: bool) -> None:
    door = Door()
    if known:
        door.subscribe(A, "")
        door.publish("/x")
        door.pump()
    door.receive(A, frames)
    door.at(TIMES.first_idle)
    total = sum(door.core.received.values())
    assert total == (3 if known else 1)
