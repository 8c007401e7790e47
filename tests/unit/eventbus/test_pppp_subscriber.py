"""The PPPP subscriber's core on a fake clock: order, duplicates, ACK/NACK, SYNC, silence."""

from __future__ import annotations

import random
import uuid as uuidlib

import pytest

from zbus.common.protocols import pppp
from zbus.common.protocols.pppp_event import EventPayload, SyncEnd, encode_event, encode_sync_end
from zbus.eventbus.core.pppp_channel import PPPPMessage
from zbus.eventbus.core.pppp_subscriber import (
    NOTHING,
    Actions,
    SubscriberCore,
    SubscriberSettings,
    check_channels,
)

CH = "/t/"
FAST = SubscriberSettings(ack_every=100, first_idle=0.1, idle=1.0, misses=4)


def event(seq: int, topic: str = "/t/a", data: bytes = b"x") -> EventPayload:
    return EventPayload(topic, str(uuidlib.UUID(int=seq)), "2026-01-01T00:00:00Z", "p", data, seq)


def pub(seq: int, channel: str = CH, data: bytes = b"x") -> list[bytes]:
    return pppp.encode(encode_event(channel, seq, event(seq, data=data)))


def item(topic: str, channel: str = CH) -> list[bytes]:
    return pppp.encode(encode_event(channel, 0, event(7, topic=topic)))


def end(head: int, items: int, channel: str = CH) -> list[bytes]:
    return pppp.encode(encode_sync_end(channel, SyncEnd(head, items)))


def sent(actions: Actions, heartbeats: bool = False) -> list[pppp.SubscriberCommand]:
    """The commands in ``actions`` (without heartbeats unless asked)."""
    cmds = [pppp.decode_from_subscriber(frames) for frames in actions.send]
    return [c for c in cmds if heartbeats or not isinstance(c, pppp.Heartbeat)]


def synced(head: int = 0, settings: SubscriberSettings = FAST, **kw: int) -> SubscriberCore:
    """A core that subscribed at t=0 and got an empty SYNC to ``head``, ACKed at t=0.1."""
    core = SubscriberCore(CH, settings, **kw)  # type: ignore[arg-type]
    core.start(0.0)
    core.on_frames(end(head, 0), 0.0)
    assert sent(core.tick(0.1)) == [pppp.AckNack(CH, head)]
    return core


def take(core: SubscriberCore, actions: Actions, now: float) -> tuple[list[int], list[Actions]]:
    """The application takes and finishes every delivered message."""
    out = []
    for msg in actions.deliver:
        out.append(core.done(msg, now))
    return [m.sequence for m in actions.deliver], out


# ------------------------------------------------------------------ starting, SYNC
def test_start_subscribes_to_every_channel_once() -> None:
    core = SubscriberCore(["/a", "/b", "/a"])
    assert sent(core.start(5.0)) == [pppp.Subscribe("/a"), pppp.Subscribe("/b")]
    assert core.channels == ("/a", "/b")


def test_an_empty_sync_sets_the_position_and_is_acked_within_first_idle() -> None:
    core = SubscriberCore(CH, FAST)
    core.start(0.0)
    assert core.on_frames(end(41, 0), 0.0) == NOTHING
    assert core.channel(CH).position == 41
    assert core.tick(0.09) == NOTHING
    assert core.wake <= 0.1
    assert sent(core.tick(0.1)) == [pppp.AckNack(CH, 41)]
    seqs, _ = take(core, core.on_frames(pub(42), 0.2), 0.2)
    assert seqs == [42]


def test_sync_items_are_held_until_the_end_then_delivered_flagged() -> None:
    core = SubscriberCore(CH, FAST)
    core.start(0.0)
    assert core.on_frames(item("/t/a"), 0.0) == NOTHING
    assert core.on_frames(item("/t/b"), 0.0) == NOTHING
    live = core.on_frames(pub(11), 0.01)  # live before the end marker: held
    assert live.deliver == ()
    got = core.on_frames(end(10, 2), 0.02)
    assert [(m.topic, m.sync, m.sequence, m.position) for m in got.deliver] == [
        ("/t/a", True, 0, 0),
        ("/t/b", True, 0, 10),
        ("/t/a", False, 11, 11),
    ]
    assert core.syncs == 1 and core.delivered == 3
    # Nothing is ACKed before the application is done with the items.
    assert sent(core.tick(0.5)) == []
    core.done(got.deliver[0], 0.5)
    assert sent(core.tick(0.7)) == []  # done with the first item only: position 0
    core.done(got.deliver[1], 0.7)
    assert sent(core.tick(0.8)) == [pppp.AckNack(CH, 10)]
    core.done(got.deliver[2], 0.8)
    assert sent(core.tick(0.9)) == [pppp.AckNack(CH, 11)]


def test_a_sync_missing_items_subscribes_again_and_the_next_one_counts_afresh() -> None:
    core = SubscriberCore(CH, FAST)
    core.start(0.0)
    core.on_frames(item("/t/a"), 0.0)
    again = core.on_frames(end(10, 2), 0.0)  # one item was lost
    assert sent(again) == [pppp.Subscribe(CH)] and again.deliver == ()
    assert again.problem is not None and "1 items of 2" in again.problem
    assert core.sync_retries == 1 and core.channel(CH).position is None
    core.on_frames(item("/t/a"), 0.1)
    core.on_frames(item("/t/b"), 0.1)
    assert len(core.on_frames(end(12, 2), 0.1).deliver) == 2


def test_live_messages_at_or_below_the_sync_head_are_dropped() -> None:
    core = SubscriberCore(CH, FAST)
    core.start(0.0)
    core.on_frames(item("/t/a"), 0.0)
    for seq in (9, 10, 12):
        core.on_frames(pub(seq), 0.0)
    got = core.on_frames(end(10, 1), 0.0)
    assert [m.sync for m in got.deliver] == [True]  # 11 is missing
    assert core.duplicates == 2
    assert core.channel(CH).holes() == [(11, 11)]
    nack = core.done(got.deliver[0], 0.0)  # caught up with the hole: NACK it
    assert sent(nack) == [pppp.AckNack(CH, 12, ((11, 11),))]


def test_a_subscriber_the_bus_knows_is_resumed_without_a_sync() -> None:
    core = SubscriberCore(CH, FAST)  # no position of its own (no store)
    core.start(0.0)
    # The last message sent before the bus read the SUBSCRIBE, resent; then the backlog
    # from the bus's ACK + 1. Held for first_idle, then the lowest one starts.
    assert core.on_frames(pub(305), 0.1) == NOTHING
    assert core.on_frames(pub(301), 0.12) == NOTHING
    assert core.tick(0.19).deliver == ()
    got = core.tick(0.2)
    assert [m.sequence for m in got.deliver] == [301] and core.syncs == 0
    assert sent(got) == [pppp.AckNack(CH, 300)]  # where the bus had it: first idle passed
    assert core.channel(CH).position == 301
    more = [core.on_frames(pub(n), 0.21).deliver for n in (302, 303, 304)]
    assert [m.sequence for d in more for m in d] == [302, 303, 304, 305]
    core.done(got.deliver[0], 0.3)
    assert sent(core.tick(0.41)) == [pppp.AckNack(CH, 301)]
    assert core.on_frames(pub(300), 0.5) == NOTHING  # below: a duplicate


def test_a_sync_after_all_is_not_mistaken_for_a_resume() -> None:
    core = SubscriberCore(CH, FAST)
    core.start(0.0)
    core.on_frames(pub(9), 0.01)  # in flight from an earlier conversation, say
    core.on_frames(item("/t/a"), 0.02)
    assert core.tick(0.15).deliver == ()  # past the time to take a position: a SYNC
    got = core.on_frames(end(10, 1), 0.16)
    assert [m.sync for m in got.deliver] == [True] and core.channel(CH).position == 10


def test_a_lost_sync_end_is_asked_for_again_with_backoff() -> None:
    core = SubscriberCore(CH, FAST)
    core.start(0.0)
    assert sent(core.tick(0.39)) == []
    assert sent(core.tick(0.4)) == [pppp.Subscribe(CH)]  # misses x first_idle
    assert sent(core.tick(1.19)) == []
    assert sent(core.tick(1.21)) == [pppp.Subscribe(CH)]  # then twice as long
    core.on_frames(item("/t/a"), 1.5)  # items coming: the SYNC is under way
    assert sent(core.tick(2.9)) == []
    assert core.resubscribes == 2


def test_the_end_of_a_sync_resent_after_it_was_taken_is_answered() -> None:
    core = synced(10)
    again = core.on_frames(end(10, 0), 1.0)
    assert again == NOTHING and core.duplicates == 1
    assert sent(core.tick(1.1)) == [pppp.AckNack(CH, 10)]


def test_a_sync_no_newer_than_a_loaded_position_is_dropped() -> None:
    core = SubscriberCore(CH, FAST, positions={CH: 50})
    core.start(0.0)
    core.on_frames(item("/t/a"), 0.0)
    assert core.on_frames(end(40, 1), 0.0) == NOTHING
    assert sent(core.tick(0.1)) == [pppp.AckNack(CH, 40)]  # what the bus sent, no more
    assert core.on_frames(pub(41), 0.2) == NOTHING  # a duplicate of the position
    got = core.on_frames(end(60, 0), 0.3)  # a SYNC beyond the position moves it on
    assert got == NOTHING and core.channel(CH).position == 60 and core.positions() == {CH: 60}


# ----------------------------------------------------------- order and duplicates
def test_in_order_delivery_and_duplicates_dropped_and_answered() -> None:
    core = synced(0)
    seqs, _ = take(core, core.on_frames(pub(1), 1.0), 1.0)
    assert seqs == [1]
    assert core.on_frames(pub(1), 1.01) == NOTHING
    assert core.duplicates == 1
    assert sent(core.tick(1.11)) == [pppp.AckNack(CH, 1)]


def test_a_hole_is_nacked_once_the_application_caught_up_and_then_filled() -> None:
    core = synced(0)
    got = core.on_frames(pub(1), 1.0)
    assert core.on_frames(pub(3), 1.0) == NOTHING
    assert core.on_frames(pub(5), 1.0) == NOTHING
    # The application has not finished 1: no NACK yet (it would name 1 as missing).
    assert all(not isinstance(c, pppp.AckNack) or not c.missing for c in sent(core.tick(1.0)))
    nack = core.done(got.deliver[0], 1.0)
    assert sent(nack) == [pppp.AckNack(CH, 5, ((2, 2), (4, 4)))]
    assert core.nacks == 1
    assert sent(core.tick(1.05)) == []  # at most every first_idle
    assert sent(core.tick(1.1)) == [pppp.AckNack(CH, 5, ((2, 2), (4, 4)))]
    assert [m.sequence for m in core.on_frames(pub(2), 1.12).deliver] == [2, 3]
    assert [m.sequence for m in core.on_frames(pub(4), 1.13).deliver] == [4, 5]
    assert core.channel(CH).nack_at is None and core.out_of_order == 2


def test_ack_every_n_done_messages_and_never_what_is_not_done() -> None:
    core = synced(0, SubscriberSettings(ack_every=10))
    delivered = [core.on_frames(pub(n), 1.0).deliver[0] for n in range(1, 26)]
    acks = [core.done(m, 1.0) for m in delivered[:19]]
    assert [sent(a) for a in acks if a.send] == [[pppp.AckNack(CH, 10)]]
    assert sent(core.tick(1.1)) == [pppp.AckNack(CH, 19)]  # first idle: what is done
    assert sent(core.tick(1.25)) == []  # nothing more done: nothing to ACK
    core.done(delivered[19], 1.3)
    assert sent(core.tick(1.39)) == []
    assert sent(core.tick(1.41)) == [pppp.AckNack(CH, 20)]


def test_heartbeats_after_first_idle_then_every_idle_and_traffic_counts() -> None:
    core = synced(0)  # the ACK went at 0.1
    assert core.tick(0.19) == NOTHING
    assert sent(core.tick(0.2), heartbeats=True) == [pppp.Heartbeat()]
    assert core.tick(1.19) == NOTHING
    assert sent(core.tick(1.2), heartbeats=True) == [pppp.Heartbeat()]
    core.custom([b"hi"], 1.5)  # traffic
    assert core.tick(1.59) == NOTHING
    assert sent(core.tick(1.6), heartbeats=True) == [pppp.Heartbeat()]
    assert core.heartbeats == 3


def test_a_silent_bus_gets_every_channel_subscribed_again_and_acks_restart() -> None:
    core = SubscriberCore(["/a", "/b"], FAST)
    core.start(0.0)
    for ch in ("/a", "/b"):
        core.on_frames(end(0, 0, ch), 0.0)
    msgs = [core.on_frames(pub(n, "/a"), 0.5).deliver[0] for n in (1, 2, 3)]
    for m in msgs:
        core.done(m, 0.5)
    assert sent(core.tick(0.6)) == [pppp.AckNack("/a", 3), pppp.AckNack("/b", 0)]
    # misses x idle after the last word from the bus, at 0.5
    assert sent(core.tick(4.49)) == []
    assert sent(core.tick(4.5)) == [pppp.Subscribe("/a"), pppp.Subscribe("/b")]
    assert core.resubscribes == 1
    # The restarted bus resends from its older position: duplicates, ACKed as far as
    # it has sent in this conversation, never beyond.
    assert core.on_frames(pub(2, "/a"), 4.6) == NOTHING
    assert sent(core.tick(4.7)) == [pppp.AckNack("/a", 2)]
    assert [m.sequence for m in core.on_frames(pub(4, "/a"), 4.8).deliver] == [4]


def test_a_channel_unheard_after_its_subscribe_subscribes_again() -> None:
    core = SubscriberCore(CH, FAST, positions={CH: 5})
    core.start(0.0)
    for t in range(1, 4):
        core.on_frames(pppp.encode(pppp.Heartbeat()), float(t))
    # Heard the bus, never this channel: its SUBSCRIBE may be lost.
    assert sent(core.tick(4.0)) == [pppp.Subscribe(CH)]
    core.on_frames(pub(6), 4.5)
    core.on_frames(pppp.encode(pppp.Heartbeat()), 8.0)
    assert pppp.Subscribe(CH) not in sent(core.tick(8.6))


# ------------------------------------------------------------------ bounds, errors
def test_held_messages_are_bounded_and_a_dropped_one_comes_again() -> None:
    core = synced(0, SubscriberSettings(max_held=3))
    first = core.on_frames(pub(1), 1.0).deliver
    core.on_frames(pub(3), 1.0)
    core.on_frames(pub(4), 1.0)
    assert core.on_frames(pub(5), 1.0) == NOTHING and core.overflows == 1
    assert core.held == 3
    core.done(first[0], 1.0)
    got = core.on_frames(pub(2), 1.1).deliver
    assert [m.sequence for m in got] == [2, 3, 4]
    for m in got:
        core.done(m, 1.1)
    # Caught up, nothing held: 5 must come again, so a new conversation.
    assert pppp.Subscribe(CH) in sent(core.tick(1.1))
    assert core.held == 0 and core.held_bytes == 0


def test_held_bytes_are_bounded() -> None:
    core = synced(0, SubscriberSettings(max_held_bytes=4000))
    assert core.on_frames(pub(1, data=bytes(1000)), 1.0).deliver
    assert core.on_frames(pub(2, data=bytes(1500)), 1.0).deliver
    assert core.on_frames(pub(3, data=bytes(1000)), 1.0) == NOTHING
    assert core.overflows == 1


def test_a_sync_over_its_bound_is_a_failure() -> None:
    core = SubscriberCore(CH, SubscriberSettings(max_sync_bytes=1000))
    core.start(0.0)
    core.on_frames(item("/t/a"), 0.0)
    core.on_frames(item("/t/a"), 0.0)
    got = core.on_frames(item("/t/a"), 0.0)
    assert core.failure is not None and got.problem == core.failure


@pytest.mark.parametrize(
    "frames",
    [
        [],
        [b"\x02x"],
        [b"\x03", b"x"],
        [CH.encode(), b"\x00" * 7],
        [CH.encode(), (1).to_bytes(8, "big"), b"only one frame"],
        [CH.encode(), (3).to_bytes(8, "big"), bytes(16)],  # a SYNC end with a sequence
        [CH.encode(), bytes(8), bytes(15)],
        [CH.encode(), (1).to_bytes(8, "big"), b"t", b"not a uuid", b"ts", b"p", b"", bytes(8)],
    ],
)
def test_malformed_frames_are_counted_and_dropped(frames: list[bytes]) -> None:
    core = synced(0)
    got = core.on_frames(frames, 1.0)
    assert got.deliver == () and got.send == ()
    assert got.problem is not None and core.malformed == 1


def test_a_channel_not_subscribed_is_counted() -> None:
    core = synced(0)
    got = core.on_frames(pub(1, "/other"), 1.0)
    assert got.problem is not None and core.unexpected == 1 and got.deliver == ()


def test_settings_and_channels_are_checked() -> None:
    for bad in (
        SubscriberSettings(ack_every=0),
        SubscriberSettings(first_idle=2.0, idle=1.0),
        SubscriberSettings(misses=1),
        SubscriberSettings(max_held=0),
    ):
        with pytest.raises(ValueError):
            bad.check()
    with pytest.raises(ValueError, match="at least one"):
        check_channels([])
    with pytest.raises(ValueError, match="command byte"):
        check_channels("\x02x")
    with pytest.raises(ValueError, match="at most 64"):
        check_channels([str(n) for n in range(65)])
    with pytest.raises(ValueError, match="1,024"):
        check_channels("x" * 1025)
    with pytest.raises(TypeError):
        check_channels([b"x"])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="position"):
        SubscriberCore(CH, positions={CH: -1})


def test_custom_frames() -> None:
    core = SubscriberCore(CH)
    assert core.custom([b"a", b"b"], 0.0) == [b"\x04", b"a", b"b"]


# --------------------------------------------- a whole dialogue over a lossy link
class ModelBus:
    """A small publisher after ADR 0006, for one subscriber and one channel: positions
    (acked, next), a window, NACK resends, resend of the last message after the
    subscriber's silence, SYNC for a subscriber it does not know."""

    def __init__(self, window: int = 50) -> None:
        self.head = 0
        self.acked = 0
        self.next = 1
        self.window = window
        self.resend: list[int] = []
        self.known = False
        self.heard_at = 0.0
        self.sent_at = 0.0
        self.owes = False

    def publish(self, count: int) -> None:
        self.head += count

    def receive(self, frames: list[bytes], now: float) -> list[list[bytes]]:
        cmd = pppp.decode_from_subscriber(frames)
        self.heard_at = now
        out: list[list[bytes]] = []
        if isinstance(cmd, pppp.Subscribe):
            if self.known:
                self.next = self.acked + 1
            else:  # not known, or its SYNC not ACKed yet: a SYNC (again)
                out.append(end(self.head, 0))
                self.acked, self.next = self.head, self.head + 1
        elif isinstance(cmd, pppp.AckNack):
            self.known = True
            low = min([f for f, _ in cmd.missing], default=cmd.highest + 1) - 1
            self.acked = max(self.acked, min(low, cmd.highest))
            for first, last in cmd.missing:
                self.resend.extend(range(first, last + 1))
            self.owes = self.next - 1 > cmd.highest
        return out

    def send(self, now: float) -> list[list[bytes]]:
        out = [pub(n) for n in self.resend]
        self.resend = []
        while self.next <= self.head and self.next - self.acked <= self.window:
            out.append(pub(self.next))
            self.next += 1
            self.owes = True
        if out:
            self.sent_at = now
        elif self.owes and now - max(self.heard_at, self.sent_at) >= 0.4 and self.next > 1:
            out.append(pub(self.next - 1))  # the last message sent, whose ACK says the rest
            self.sent_at = now
        return out


@pytest.mark.parametrize("seed", range(6))
def test_exactly_once_in_order_over_a_lossy_link(seed: int) -> None:
    rng = random.Random(seed)
    loss = rng.uniform(0.01, 0.2)
    bus = ModelBus()
    core = SubscriberCore(CH, SubscriberSettings(ack_every=10))
    got: list[int] = []
    now = 0.0
    up = list(core.start(now).send)
    down: list[list[bytes]] = []
    total = 2_000
    while len(got) < total and now < 600:
        now += 0.01
        if bus.head < total and core.channel(CH).position is not None:
            bus.publish(rng.randrange(0, 40))
            bus.head = min(bus.head, total)
        for frames in up:
            if rng.random() >= loss:
                down.extend(bus.receive(frames, now))
        up = []
        down.extend(bus.send(now))
        for frames in down:
            if rng.random() < loss:
                continue
            actions = core.on_frames(frames, now)
            up.extend(actions.send)
            for msg in actions.deliver:
                got.append(msg.sequence)
                up.extend(core.done(msg, now).send)
        down = []
        if now >= core.wake:
            up.extend(core.tick(now).send)
    assert got == list(range(1, total + 1))
    assert core.duplicates > 0 and core.nacks > 0
    assert core.held == 0


def test_the_wake_hint_is_never_later_than_the_deadline() -> None:
    core = synced(0)
    rng = random.Random(1)
    now = 1.0
    for n in range(1, 300):
        now += rng.random() * 0.05
        seq = n if rng.random() > 0.1 else n + 1
        for msg in core.on_frames(pub(seq), now).deliver:
            if rng.random() > 0.5:
                core.done(msg, now)
        assert core.wake <= core.deadline() + 1e-9
        if now >= core.wake:
            core.tick(now)


def test_message_unpacks_msgpack_data() -> None:
    core = synced(0)
    msg: PPPPMessage = core.on_frames(pub(1, data=b"\x93\x01\x02\x03"), 1.0).deliver[0]
    assert msg.unpack() == [1, 2, 3] and msg.bus_sequence == 1 and not msg.sync
