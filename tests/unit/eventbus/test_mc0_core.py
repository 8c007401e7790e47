"""The mc0 door's core alone: every verb in both shapes, byte for byte, sessions,
subscriptions, TTL heartbeats and drops on a fake clock, and garbage in."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import FUZZ_EXAMPLES
from tests.unit.protocols.strategies import frame_lists
from zbus.common.protocols.mc0 import CONNECTOR, SPEC, Error, Ok, decode
from zbus.common.protocols.mc0_envelope import unwrap
from zbus.eventbus.core.mc0 import Mc0Core, Mc0Limits, Reply

UUID = b"9d5c1f3a-7e2b-4c8d-a6f0-3b1e5d7c9a24"
A, B = b"\x00k\x8bEg", b"mcollective n1 4242 #<Thread:0x1>"  # a ROUTER's and the connector's


def new_core(**limits: int) -> Mc0Core:
    return Mc0Core(Mc0Limits(max_data_bytes=limits.pop("max_data_bytes", 4096), **limits))


def said(core: Mc0Core) -> list[tuple[bytes, list[bytes]]]:
    """What the core sent since the last look (its publishes stay)."""
    out, core.outbox = core.outbox, []
    return out


def exchange(
    core: Mc0Core, frames: Sequence[bytes], who: bytes = A, now: float = 0.0
) -> list[list[bytes]]:
    """Send one message; the frames the core answers to ``who`` (and no one else)."""
    core.receive(who, frames, now)
    out = said(core)
    assert all(identity == who for identity, _ in out), out
    return [frames for _, frames in out]


def connected(core: Mc0Core, who: bytes = A, ttl: bytes = b"30000", now: float = 0.0) -> None:
    frames = [b"", b"CONNECT", b"ID", UUID, b"TTL", ttl, b"VERSION", b"0.2"]
    assert exchange(core, frames, who, now) == [[b"", b"OK", b"ID", UUID]]


# ------------------------------------------------------ the real connector's frames


def test_connector_connect_sub_put_message_noop_unsub_disconnect_byte_for_byte() -> None:
    """PEERS.md: the connector's exact frames (empty delimiter first, keys sorted)."""
    core = new_core()
    connected(core, B)
    assert exchange(core, [b"", b"SUB", b"ID", b"s1", b"", b"mcollective discovery"], B) == [
        [b"", b"OK", b"ID", b"s1"]
    ]
    put = [b"", b"PUT", b"TOPIC", b"mcollective discovery", b"X-REPLY-TO", b"r 1", b"", b"\x04"]
    assert exchange(core, put, B) == []  # no ID: no answer
    (publish,) = core.publishes
    assert (publish.topic, publish.producer) == ("mcollective discovery", "mc0:" + UUID.decode())
    assert unwrap(publish.data) == ((("X-REPLY-TO", "r 1"),), b"\x04")
    assert core.deliver(publish.topic, publish.data, 0.1) == 1
    assert said(core) == [
        (
            B,
            [
                b"",
                b"MESSAGE",
                b"TOPIC",
                b"mcollective discovery",
                b"X-REPLY-TO",
                b"r 1",
                b"",
                b"\x04",
            ],
        )
    ]
    assert exchange(core, [b"", b"NOOP", b"ID", b"n1"], B) == [[b"", b"OK", b"ID", b"n1"]]
    assert exchange(core, [b"", b"NOOP"], B) == []
    assert exchange(core, [b"", b"UNSUB", b"ID", b"u1", b"", b"mcollective discovery"], B) == [
        [b"", b"OK", b"ID", b"u1"]
    ]
    assert core.deliver("mcollective discovery", b"x", 0.2) == 0
    assert exchange(core, [b"", b"DISCONNECT", b"ID", b"d1"], B) == [[b"", b"OK", b"ID", b"d1"]]
    assert B not in core.sessions


def test_spec_frames_without_the_delimiter_are_answered_without_it() -> None:
    core = new_core()
    assert exchange(core, [b"CONNECT", b"VERSION", b"0.1", b"TTL", b"1000"]) == []
    assert core.sessions[A].ttl == 1.0
    assert exchange(core, [b"NOOP", b"ID", b"1234"]) == [[b"OK", b"ID", b"1234"]]
    assert exchange(core, [b"SUB", b"", b"topic1", b"topic2"]) == []
    assert exchange(core, [b"PUT", b"TOPIC", b"topic1", b"", b"body"]) == []
    (publish,) = core.publishes
    assert publish.data == b"body"  # no header: the body as it is
    core.deliver("topic1", publish.data, 0.0)
    assert said(core) == [(A, [b"MESSAGE", b"TOPIC", b"topic1", b"", b"body"])]
    assert exchange(core, [b"UNSUB", b"", b"topic1", b"topic2"]) == []
    assert exchange(core, [b"DISCONNECT"]) == []
    assert A not in core.sessions


def test_the_shape_follows_the_client_message_by_message() -> None:
    core = new_core()
    connected(core)  # with the delimiter
    assert exchange(core, [b"NOOP", b"ID", b"x"]) == [[b"OK", b"ID", b"x"]]
    exchange(core, [b"SUB", b"", b"t"])
    core.deliver("t", b"d", 0.0)  # unasked: the shape of its last message (spec)
    assert said(core) == [(A, [b"MESSAGE", b"TOPIC", b"t", b"", b"d"])]


def test_message_carries_every_put_header_but_id_and_the_body_byte_for_byte() -> None:
    core = new_core()
    body = bytes(range(256))
    put = [b"", b"PUT", b"ID", b"p1", b"TOPIC", b"t", b"X-B", b"2", b"X-A", b"1", b"", body]
    exchange(core, [b"", b"SUB", b"", b"t"])
    assert exchange(core, put) == []  # the OK waits for the bus's log
    (publish,) = core.publishes
    core.take()
    core.stored(publish.reply, 0.0)
    assert said(core) == [(A, [b"", b"OK", b"ID", b"p1"])]
    core.deliver("t", publish.data, 0.0)
    assert said(core) == [
        (A, [b"", b"MESSAGE", b"TOPIC", b"t", b"X-B", b"2", b"X-A", b"1", b"", body])
    ]


def test_a_put_the_bus_did_not_store_gets_error_with_its_id() -> None:
    core = new_core()
    exchange(core, [b"", b"PUT", b"ID", b"p9", b"TOPIC", b"t", b"", b"b"])
    (publish,) = core.publishes
    core.take()
    core.failed(publish.reply, "storage", "mc0 PUT: disk full", 1.0)
    assert said(core) == [(A, [b"", b"ERROR", b"MESSAGE", b"mc0 PUT: disk full", b"ID", b"p9"])]
    assert core.errors["storage"] == 1


# ----------------------------------------------------------------- bad messages


@pytest.mark.parametrize(
    ("frames", "ident"),
    [
        ([b"", b"PING", b"ID", b"7"], b"7"),  # unknown verb, with its ID
        ([b"PING"], None),
        ([b"", b"NOOP", b"ID"], None),  # a header key and no value: kills mc0d
        ([b"", b"PUT", b"ID", b"8", b"TOPIC"], b"8"),
        ([b"", b"PUT", b"ID", b"8", b"", b"body"], b"8"),  # no TOPIC
        ([b"", b"CONNECT", b"ID", b"9", b"TTL", b"30s"], b"9"),
        ([b"", b"SUB", b"ID", b"5", b"TOPIC", b"t"], b"5"),  # a reserved header
        ([b""], None),
        ([b"", b"\xff\xfe"], None),
        ([b"NOOP", b"ID", b"\xff"], None),
    ],
)
def test_a_malformed_message_gets_one_error_and_the_connection_keeps_working(
    frames: list[bytes], ident: bytes | None
) -> None:
    core = new_core()
    connected(core)
    exchange(core, [b"", b"SUB", b"", b"t"])
    replies = exchange(core, frames, now=1.0)
    assert len(replies) == 1
    shape = CONNECTOR if frames[0] == b"" else SPEC
    error = decode(replies[0], shape)
    assert isinstance(error, Error)
    assert error.message and error.message.startswith("mc0 ")
    assert error.id == (None if ident is None else ident.decode())
    assert core.received["invalid"] == 1
    assert exchange(core, [b"", b"NOOP", b"ID", b"after"]) == [[b"", b"OK", b"ID", b"after"]]
    assert core.deliver("t", b"still subscribed", 2.0) == 1


def test_a_clients_ok_and_error_are_counted_not_answered_and_message_is_refused() -> None:
    core = new_core()
    assert exchange(core, [b"", b"OK", b"ID", b"1"]) == []
    assert exchange(core, [b"", b"ERROR", b"MESSAGE", b"x"]) == []
    (reply,) = exchange(core, [b"", b"MESSAGE", b"TOPIC", b"t", b"", b"b"])
    assert reply[:3] == [b"", b"ERROR", b"MESSAGE"]
    assert core.errors["wrong_direction"] == 3


def test_ranges_are_checked_and_named() -> None:
    core = new_core(max_data_bytes=100, max_subscriptions=2, max_topic_bytes=8, max_headers=1)

    def error(frames: list[bytes]) -> str:
        (reply,) = exchange(core, frames)
        cmd = decode(reply, CONNECTOR)
        assert isinstance(cmd, Error) and cmd.message is not None
        return cmd.message

    assert "TTL in 100..86400000" in error([b"", b"CONNECT", b"TTL", b"99"])
    assert A not in core.sessions  # a refused CONNECT opens nothing
    assert "TOPIC" in error([b"", b"PUT", b"TOPIC", b"", b"", b"b"])
    assert "TOPIC" in error([b"", b"PUT", b"TOPIC", b"\0t", b"", b"b"])
    assert "TOPIC" in error([b"", b"PUT", b"TOPIC", b"123456789", b"", b"b"])
    assert "at most 100 bytes" in error([b"", b"PUT", b"TOPIC", b"t", b"", b"x" * 101])
    assert "X- headers" in error([b"", b"PUT", b"TOPIC", b"t", b"X-A", b"", b"X-B", b"", b"", b""])
    assert "SUB" in error([b"", b"SUB", b"", b"123456789"])
    assert "at most 2 topics" in error([b"", b"SUB", b"", b"a", b"b", b"c"])
    assert exchange(core, [b"", b"SUB", b"", b"a", b"b", b"a"]) == []
    assert core.topics.count == 2
    assert "frames" in error([b"", b"SUB", b"", *[b"t"] * 1000])
    assert core.publishes == []


# ------------------------------------------------------------- sessions, topics


def test_sub_opens_a_session_with_the_default_ttl_noop_and_disconnect_do_not() -> None:
    core = new_core(default_ttl_ms=2000)
    assert exchange(core, [b"", b"NOOP", b"ID", b"1"]) == [[b"", b"OK", b"ID", b"1"]]
    assert exchange(core, [b"", b"DISCONNECT", b"ID", b"2"]) == [[b"", b"OK", b"ID", b"2"]]
    assert exchange(core, [b"", b"UNSUB", b"", b"t"]) == []
    assert core.sessions == {}
    exchange(core, [b"", b"SUB", b"", b"t"])
    assert core.sessions[A].ttl == 2.0
    assert core.sessions[A].producer == "mc0:" + A.hex()


def test_a_second_connect_renews_the_session_and_keeps_its_subscriptions() -> None:
    core = new_core()
    connected(core, ttl=b"30000")
    exchange(core, [b"", b"SUB", b"", b"t"])
    connected(core, ttl=b"1000", now=5.0)
    assert core.sessions[A].ttl == 1.0
    assert core.deliver("t", b"d", 5.0) == 1


def test_exact_topics_and_subtrees() -> None:
    core = new_core()
    exchange(core, [b"", b"SUB", b"", b"mcollective rpcutil"], A)
    exchange(core, [b"", b"SUB", b"", b"/sensors/", b"/sensors/t1"], B)
    assert core.topics.match("mcollective rpcutil") == {A}
    assert not core.topics.match("mcollective rpcutil2")  # exact: no prefix match
    assert not core.topics.match("mcollective")
    assert core.topics.match("/sensors/t1") == {B}  # subtree and exact: once
    assert core.deliver("/sensors/t1", b"d", 0.0) == 1
    assert len(said(core)) == 1
    assert core.topics.match("/sensors/t2/x") == {B}
    exchange(core, [b"", b"SUB", b"", b""], A)  # the empty subtree: every topic
    assert core.topics.match("anything") == {A}
    assert core.topics.match("/sensors/t1") == {A, B}


# ----------------------------------------------------------------- heartbeats


def test_noop_after_095_ttl_of_silence_towards_the_client() -> None:
    core = new_core()
    connected(core, ttl=b"1000")  # at t=0 the OK went out
    core.tick(0.949)
    assert said(core) == []
    assert core.next_deadline() == pytest.approx(0.95)
    exchange(core, [b"", b"NOOP"], now=0.9)  # the client's traffic does not count
    core.tick(0.95)
    assert said(core) == [(A, [b"", b"NOOP"])]
    assert core.sent["NOOP"] == 1
    exchange(core, [b"", b"SUB", b"", b"t"], now=1.5)
    core.deliver("t", b"d", 1.6)  # anything sent resets the bus's silence
    said(core)
    core.tick(1.9)  # 0.95 after the NOOP at 0.95, but 0.3 after the MESSAGE
    assert said(core) == []
    exchange(core, [b"", b"NOOP"], now=2.0)
    core.tick(1.6 + 0.95)
    assert said(core) == [(A, [b"", b"NOOP"])]


def test_drop_after_105_ttl_of_silence_from_the_client_with_its_subscriptions() -> None:
    core = new_core()
    connected(core, ttl=b"1000")
    exchange(core, [b"", b"SUB", b"", b"t"])
    exchange(core, [b"garbage"], now=0.5)  # any message is traffic
    core.tick(1.549)
    assert A in core.sessions
    core.tick(1.55)
    assert A not in core.sessions and core.expired == 1
    assert said(core) == [(A, [b"NOOP"])]  # at 0.95, in the shape of its last message
    assert not core.topics and core.deliver("t", b"d", 2.0) == 0
    assert exchange(core, [b"", b"NOOP", b"ID", b"x"], now=2.0) == [[b"", b"OK", b"ID", b"x"]]
    core.tick(100.0)
    assert said(core) == []  # the dropped session gets no heartbeat


def test_a_shorter_ttl_on_a_second_connect_takes_effect_at_once() -> None:
    core = new_core()
    connected(core, ttl=b"60000")
    connected(core, ttl=b"1000", now=1.0)
    assert core.next_deadline() == pytest.approx(1.95)
    core.tick(2.06)
    assert core.expired == 1


def test_many_sessions_expire_in_order_and_the_heap_stays_small() -> None:
    core = new_core()
    for n in range(500):
        connected(core, who=n.to_bytes(4, "big"), ttl=b"1000", now=n / 1000)
    core.tick(1.05 + 0.25)
    assert len(core.sessions) == 249 and core.expired == 251
    assert len(said(core)) == 351  # those 0.95 x TTL old had their NOOP
    for n in range(250, 500):
        exchange(core, [b"", b"DISCONNECT"], who=n.to_bytes(4, "big"))
    assert core.sessions == {}
    assert len(core._heap) <= 4 * 64 + 64
    core.tick(10.0)
    assert core.next_deadline() is None


def test_forget_drops_a_session_zeromq_cannot_route_to() -> None:
    core = new_core()
    connected(core)
    exchange(core, [b"", b"SUB", b"", b"t"])
    assert core.forget(A) and not core.forget(A)
    assert core.deliver("t", b"d", 0.0) == 0


# ------------------------------------------------------------------ garbage in


@settings(max_examples=FUZZ_EXAMPLES)
@given(st.lists(frame_lists, min_size=1, max_size=4), st.sampled_from([A, B]))
def test_garbage_never_raises_and_gets_at_most_one_answer(
    messages: list[list[bytes]], who: bytes
) -> None:
    core = new_core()
    for n, frames in enumerate(messages):
        core.receive(who, frames, float(n))
        out, publishes = core.take()
        for publish in publishes:
            core.stored(publish.reply, float(n))
            out += core.take()[0]
        assert len(out) <= 1
        for identity, reply in out:
            assert identity == who
            shape = CONNECTOR if frames and not frames[0] else SPEC
            assert isinstance(decode(reply, shape), Ok | Error)
        core.tick(float(n) + 100.0)
        for _, frames_out in core.take()[0]:
            assert frames_out[-1] == b"NOOP"  # heartbeats only, unasked


def test_reply_shape_is_given_by_the_message_answered() -> None:
    reply = Reply(A, "1", delimiter=False)
    core = new_core()
    core.failed(reply, "busy", "mc0 PUT: busy", 0.0)
    assert said(core) == [(A, [b"ERROR", b"MESSAGE", b"mc0 PUT: busy", b"ID", b"1"])]
