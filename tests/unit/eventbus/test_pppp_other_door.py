"""The PPPP subscriber's core moved to another door (a replica): its position carries
over where the door numbers the channel as the last one did, and where it does not the
core fails instead of dropping or repeating events. And the doors a client takes."""

from __future__ import annotations

import uuid as uuidlib

import pytest

from zbus.common.protocols import pppp
from zbus.common.protocols.pppp_event import EventPayload, SyncEnd, encode_event, encode_sync_end
from zbus.eventbus.client.endpoints import door_list
from zbus.eventbus.core.pppp_subscriber import SubscriberCore, SubscriberSettings

CH = "/t/"
FAST = SubscriberSettings(ack_every=100, first_idle=0.1, idle=1.0, misses=4)


def pub(seq: int, bus_seq: int, topic: str = "/t/a") -> list[bytes]:
    """Channel message ``seq``, the bus's event ``bus_seq``."""
    payload = EventPayload(
        topic, str(uuidlib.UUID(int=bus_seq)), "2026-01-01T00:00:00Z", "p", b"x", bus_seq
    )
    return pppp.encode(encode_event(CH, seq, payload))


def item(bus_seq: int, topic: str = "/t/a") -> list[bytes]:
    return pub(0, bus_seq, topic)


def end(head: int, items: int) -> list[bytes]:
    return pppp.encode(encode_sync_end(CH, SyncEnd(head, items)))


def at_ten() -> SubscriberCore:
    """A core at channel message 10 = the bus's event 110, done with it, then silent
    until it SUBSCRIBEs again (at t=5) and moves to another door."""
    core = SubscriberCore(CH, FAST)
    core.start(0.0)
    core.on_frames(end(0, 0), 0.0)
    for seq in range(1, 11):
        for msg in core.on_frames(pub(seq, 100 + seq), 0.1).deliver:
            core.done(msg, 0.1)
    assert core.channel(CH).position == 10 and core.silences == 0
    again = core.tick(5.0)
    assert pppp.decode_from_subscriber(again.send[0]) == pppp.Subscribe(CH)
    assert core.silences == 1
    core.other_door()
    return core


def test_the_same_numbering_goes_on_with_no_gap_and_no_duplicate() -> None:
    core = at_ten()
    # The door knows the subscriber: its backlog from its ACK (8), then live.
    assert core.on_frames(pub(9, 109), 5.1).deliver == ()
    assert core.on_frames(pub(10, 110), 5.1).deliver == ()
    got = core.on_frames(pub(11, 111), 5.1).deliver
    assert [m.sequence for m in got] == [11]
    # The check ended with that message: a later duplicate is only a duplicate.
    assert core.on_frames(pub(11, 111), 5.2).deliver == ()
    assert core.failure is None and core.duplicates == 3


def test_a_sync_no_newer_than_the_position_then_live_messages_carry_over() -> None:
    core = at_ten()
    assert core.on_frames(item(104, "/t/b"), 5.1).deliver == ()
    assert core.on_frames(end(9, 1), 5.1).deliver == ()  # nothing new: dropped
    assert core.on_frames(pub(10, 110), 5.1).deliver == ()
    assert [m.sequence for m in core.on_frames(pub(11, 111), 5.1).deliver] == [11]
    assert core.failure is None


def test_a_duplicate_newer_than_the_position_means_another_numbering() -> None:
    core = at_ten()
    # This door numbers from its own first SUBSCRIBE: its message 3 is an event after 110.
    got = core.on_frames(pub(3, 140), 5.1)
    assert got.deliver == () and got.problem is not None
    assert core.failure is not None and "numbered differently" in core.failure
    assert core.channel(CH).position == 10


def test_a_next_message_not_newer_than_the_position_means_another_numbering() -> None:
    core = at_ten()
    # This door's message 11 is the bus's event 105: delivered already.
    got = core.on_frames(pub(11, 105), 5.1)
    assert got.deliver == () and core.failure is not None
    assert core.held == 0 and core.channel(CH).position == 10


def test_a_held_next_message_is_checked_too() -> None:
    core = at_ten()
    assert core.on_frames(pub(12, 102), 5.1).deliver == ()  # held: 11 missing
    assert core.on_frames(pub(11, 101), 5.1).deliver == ()
    assert core.failure is not None


def test_a_sync_newer_than_the_position_at_a_lower_head_means_another_numbering() -> None:
    core = at_ten()
    core.on_frames(item(150), 5.1)
    got = core.on_frames(end(2, 1), 5.1)
    assert got.deliver == () and core.failure is not None


def test_a_sync_ahead_of_the_position_is_taken_and_the_new_numbering_followed() -> None:
    core = at_ten()
    core.on_frames(item(150), 5.1)
    got = core.on_frames(end(40, 1), 5.1).deliver
    assert [(m.sync, m.position) for m in got] == [(True, 40)]
    assert [m.sequence for m in core.on_frames(pub(41, 120), 5.2).deliver] == [41]
    assert core.failure is None


def test_without_another_door_nothing_is_checked() -> None:
    core = SubscriberCore(CH, FAST, {CH: 10})  # a stored position: no bus sequence
    core.start(0.0)
    core.other_door()
    assert core.on_frames(pub(3, 140), 0.1).deliver == ()
    assert core.failure is None and core.duplicates == 1


def test_doors_one_a_list_or_comma_separated() -> None:
    assert door_list("tcp://a:1") == ("tcp://a:1",)
    assert door_list("tcp://a:1, tcp://b:2,") == ("tcp://a:1", "tcp://b:2")
    assert door_list(["tcp://a:1", "tcp://b:2"]) == ("tcp://a:1", "tcp://b:2")
    with pytest.raises(ValueError, match="at least one"):
        door_list(" , ")
    with pytest.raises(ValueError, match="at least one"):
        door_list([])
    with pytest.raises(TypeError):
        door_list([b"tcp://a:1"])  # type: ignore[list-item]


def test_a_door_not_heard_from_yet_is_left_after_misses_first_idles() -> None:
    core = at_ten()  # moved at t=5 to a door it has not heard from
    assert core.deadline() <= 5.0 + 4 * 0.1
    core.tick(5.39)
    assert core.silences == 1
    core.tick(5.41)
    assert core.silences == 2  # that door said nothing: the next one
    # A door that speaks is given the usual misses x idle from then on.
    core.on_frames(pppp.encode(pppp.Heartbeat()), 5.5)
    core.tick(5.5 + 4 * 0.1 + 0.01)
    assert core.silences == 2
    core.tick(5.5 + 4 * 1.0 + 0.01)
    assert core.silences == 3


def test_one_door_keeps_the_usual_silence() -> None:
    core = SubscriberCore(CH, FAST)
    core.start(0.0)
    core.tick(0.5)
    assert core.silences == 0
    core.tick(4.01)
    assert core.silences == 1
