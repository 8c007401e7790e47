"""The mc0 door of a real event bus on 127.0.0.1: the real connector's frames byte for
byte, the spec's frames, one topic space with the Event BUS doors, TTL heartbeats, bad
input, and the ``zbus.Mc0Client``.

The bus runs on a loop in a thread of its own (``tests.support.mc0.bus_thread``), so the
blocking sockets and clients here never stall it.
"""

from __future__ import annotations

import random
import time
from pathlib import Path
from typing import Any

import msgpack
import pytest
import zmq

import zbus
from tests.support.bus import bus_thread
from tests.support.mc0 import RawPeer, connector_connect
from tests.support.ports import HeldPorts
from tests.support.waiting import UNIT, wait_until
from zbus.common.protocols import eventbus as eb
from zbus.eventbus.client import BusEndpoints, EventBusClient
from zbus.eventbus.server.service import EventBusService
from zbus.eventbus.server.store import Event, SqliteEventLogReader

CLIENT_ID = b"c0ffee00-7e2b-4c8d-a6f0-3b1e5d7c9a24"
UNKNOWN_PING = (
    b"mc0 <unknown command> frame 1: expected a verb: NOOP, CONNECT, DISCONNECT, SUB, "
    b"UNSUB, PUT, MESSAGE, ERROR, OK, got b'PING'"
)


def endpoint(bus: EventBusService) -> str:
    return bus.endpoints["mc0"]


def logged(bus: EventBusService, topic: str) -> list[Event]:
    """The events of ``topic`` in the bus's log, oldest first."""
    reader = SqliteEventLogReader(bus.log_path)
    try:
        return [e for e in reversed(reader.recent(topic, 1000)) if e.topic == topic]
    finally:
        reader.close()


# ------------------------------------------------------------------ wire shapes


def test_the_real_connectors_frames_byte_for_byte(
    bus: EventBusService, ctx: zmq.Context[Any]
) -> None:
    """PEERS.md: every message begins with an empty frame, keys sorted, VERSION 0.2."""
    node = RawPeer(ctx, endpoint(bus), identity=b"node1 4242 #<Thread:0x1>")
    client = RawPeer(ctx, endpoint(bus))
    connector_connect(node)
    connector_connect(client, ident=CLIENT_ID)
    sub = [b"", b"SUB", b"ID", b"s-1", b"", b"mcollective discovery"]
    assert node.ask(sub) == [b"", b"OK", b"ID", b"s-1"]
    body = b"\x04\x08{\x07:\x0bbody"  # a Ruby Marshal payload: opaque bytes
    reply_to = [b"X-REPLY-TO", b"mcollective reply client 99"]
    client.send([b"", b"PUT", b"TOPIC", b"mcollective discovery", *reply_to, b"", body])
    assert node.recv() == [
        b"",
        b"MESSAGE",
        b"TOPIC",
        b"mcollective discovery",
        *reply_to,
        b"",
        body,
    ]
    assert node.ask([b"", b"NOOP", b"ID", b"n-1"]) == [b"", b"OK", b"ID", b"n-1"]
    unsub = [b"", b"UNSUB", b"ID", b"u-1", b"", b"mcollective discovery"]
    assert node.ask(unsub) == [b"", b"OK", b"ID", b"u-1"]
    client.send([b"", b"PUT", b"TOPIC", b"mcollective discovery", b"", b"unheard"])
    assert node.ask([b"", b"NOOP", b"ID", b"n-2"]) == [b"", b"OK", b"ID", b"n-2"]
    assert node.ask([b"", b"DISCONNECT", b"ID", b"d-1"]) == [b"", b"OK", b"ID", b"d-1"]
    assert client.ask([b"", b"NOOP", b"ID", b"n-3"]) == [b"", b"OK", b"ID", b"n-3"]
    assert node.quiet() and client.quiet()  # one answer each, nothing else
    # The PUT without an ID is answered by nothing: wait for its commit.
    wait_until(lambda: len(logged(bus, "mcollective discovery")) >= 2, what="both PUTs logged")
    events = logged(bus, "mcollective discovery")
    assert [e.producer for e in events] == ["mc0:" + CLIENT_ID.decode()] * 2
    assert [e.data for e in events][1] == b"unheard"
    assert bus.mc0 is not None and len(bus.mc0.core.sessions) == 1  # the client's
    node.close()
    client.close()


def test_the_specs_frames_without_the_delimiter(
    bus: EventBusService, ctx: zmq.Context[Any]
) -> None:
    peer = RawPeer(ctx, endpoint(bus))
    peer.send([b"CONNECT", b"VERSION", b"0.1", b"TTL", b"1000"])  # no ID: no answer
    assert peer.ask([b"NOOP", b"ID", b"1234"]) == [b"OK", b"ID", b"1234"]
    peer.send([b"SUB", b"", b"topic1", b"topic2"])
    peer.send([b"PUT", b"TOPIC", b"topic1", b"", b"body"])
    assert peer.recv() == [b"MESSAGE", b"TOPIC", b"topic1", b"", b"body"]
    peer.send([b"UNSUB", b"", b"topic1", b"topic2"])
    peer.send([b"PUT", b"TOPIC", b"topic1", b"", b"unheard"])
    assert peer.ask([b"NOOP", b"ID", b"1235"]) == [b"OK", b"ID", b"1235"]
    assert peer.ask([b"PING"]) == [b"ERROR", b"MESSAGE", UNKNOWN_PING.replace(b"1:", b"0:")]
    peer.send([b"DISCONNECT"])
    assert peer.ask([b"NOOP", b"ID", b"1236"]) == [b"OK", b"ID", b"1236"]
    assert peer.quiet()
    peer.close()


@pytest.mark.parametrize(
    ("frames", "reply"),
    [
        (
            [b"", b"PING", b"ID", b"p-1"],
            [b"", b"ERROR", b"MESSAGE", UNKNOWN_PING, b"ID", b"p-1"],
        ),
        (  # a header key with no value: the message that kills mc0d
            [b"", b"NOOP", b"ID"],
            [
                b"",
                b"ERROR",
                b"MESSAGE",
                b"mc0 NOOP frame 2: expected a value frame after header ID",
            ],
        ),
        (
            [b"", b"PUT", b"ID", b"p-2", b"TOPIC", b"t", b"", b"one", b"two"],
            [
                b"",
                b"ERROR",
                b"MESSAGE",
                b"mc0 PUT: expected an empty frame, then one body frame, got '2 body frames'",
                b"ID",
                b"p-2",
            ],
        ),
    ],
)
def test_unknown_verb_or_malformed_message_one_error_and_the_connection_keeps_working(
    bus: EventBusService, ctx: zmq.Context[Any], frames: list[bytes], reply: list[bytes]
) -> None:
    peer = RawPeer(ctx, endpoint(bus))
    connector_connect(peer)
    assert peer.ask([b"", b"SUB", b"ID", b"s", b"", b"t"]) == [b"", b"OK", b"ID", b"s"]
    assert peer.ask(frames) == reply
    peer.send([b"", b"PUT", b"ID", b"p-3", b"TOPIC", b"t", b"", b"b"])
    answers = sorted([peer.recv(), peer.recv()])  # the OK and the MESSAGE, in any order
    assert answers == [[b"", b"MESSAGE", b"TOPIC", b"t", b"", b"b"], [b"", b"OK", b"ID", b"p-3"]]
    assert peer.ask([b"", b"NOOP", b"ID", b"n"]) == [b"", b"OK", b"ID", b"n"]
    assert peer.quiet()
    assert bus.mc0 is not None and bus.mc0.core.received["invalid"] == 1
    peer.close()


# ------------------------------------------------------------ one topic space


def test_one_put_is_stored_once_and_reaches_every_door(
    bus: EventBusService, ctx: zmq.Context[Any]
) -> None:
    """An mc0 PUT: one event in the log; the same event on the PUBLISHER (spec
    subscriber), on the STREAM (zbus client) and as MESSAGE on mc0."""
    endpoints = BusEndpoints.from_info(bus.info())
    spec = ctx.socket(zmq.SUB)
    spec.linger = 0
    spec.setsockopt(zmq.SUBSCRIBE, b"mcollective ")
    spec.connect(endpoints.publisher)
    wait_until(lambda: b"mcollective " in bus.pipeline.subscriptions.prefixes, what="XPUB")
    with (
        EventBusClient(endpoints, producer="watcher") as watcher,
        zbus.Mc0Client(endpoint(bus), ttl=30) as node,
        zbus.Mc0Client(endpoint(bus), ttl=30) as client,
    ):
        stream = watcher.subscribe("mcollective ")
        node.subscribe("mcollective rpcutil")
        client.put("mcollective rpcutil", b"\x00request", {"X-REPLY-TO": "mcollective reply c"})

        message = node.next(timeout=10 * UNIT)
        assert message == zbus.Mc0Message(
            "mcollective rpcutil", b"\x00request", {"X-REPLY-TO": "mcollective reply c"}
        )
        (event,) = logged(bus, "mcollective rpcutil")
        assert event.producer.startswith("mc0:")
        assert msgpack.unpackb(event.data) == {
            "mc0-headers": {"X-REPLY-TO": "mcollective reply c"},
            "mc0-body": b"\x00request",
        }
        seen = stream.next(timeout=10 * UNIT)
        assert seen is not None
        assert (seen.seq, seen.uuid, seen.producer, seen.ts, seen.data) == (
            event.seq,
            event.uuid,
            event.producer,
            event.ts,
            event.data,
        )
        assert spec.poll(int(10_000 * UNIT))
        broadcast = eb.decode_publisher(spec.recv_multipart())
        assert isinstance(broadcast, eb.Broadcast)
        assert (broadcast.sequence, broadcast.uuid, broadcast.data) == (
            event.seq,
            event.uuid,
            event.data,
        )
        stream.close()
    spec.close()
    assert bus.mc0 is not None and bus.mc0.link.stored == 1


def test_an_event_bus_publish_reaches_mc0_subscribers_of_its_topic(
    bus: EventBusService,
) -> None:
    endpoints = BusEndpoints.from_info(bus.info())
    with (
        zbus.Mc0Client(endpoint(bus)) as exact,
        zbus.Mc0Client(endpoint(bus), delimiter=False) as subtree,
        zbus.Mc0Client(endpoint(bus)) as other,
        EventBusClient(endpoints, producer="sensor") as publisher,
    ):
        exact.subscribe("/sensors/t1")
        subtree.subscribe("/sensors/")
        other.subscribe("/sensors/t")  # exact: not a prefix of /sensors/t1
        publisher.publish("/sensors/t1", {"celsius": 21.5}, confirm=True)
        publisher.publish("/sensors/t", b"raw", confirm=True)
        packed = msgpack.packb({"celsius": 21.5})
        assert exact.next(timeout=10 * UNIT) == zbus.Mc0Message("/sensors/t1", packed, {})
        assert subtree.next(timeout=10 * UNIT) == zbus.Mc0Message("/sensors/t1", packed, {})
        assert subtree.next(timeout=10 * UNIT) == zbus.Mc0Message("/sensors/t", b"raw", {})
        assert other.next(timeout=10 * UNIT) == zbus.Mc0Message("/sensors/t", b"raw", {})
        exact.heartbeat()  # a round trip: the MESSAGE of /sensors/t would be here by now
        assert exact.next(timeout=0) is None


def test_the_client_reports_refusals(bus: EventBusService) -> None:
    with zbus.Mc0Client(endpoint(bus)) as client:
        with pytest.raises(zbus.Mc0Error, match="TOPIC") as refused:
            client.put("", b"x")
        assert refused.value.id is not None
        with pytest.raises(zbus.Mc0Error, match="at most"):
            client.put("t", b"x" * (bus.settings.max_event_bytes + 1))
        client.put("t", b"x", confirm=False)
        client.put("", b"no topic", confirm=False)
        client.heartbeat()
        assert len(client.errors) == 1 and "TOPIC" in str(client.errors[0])
        with pytest.raises(ValueError):
            client.put("t", b"x", {"REPLY-TO": "reserved"})
        with pytest.raises(ValueError):
            zbus.Mc0Client(endpoint(bus), ttl=0.01)


# ------------------------------------------------------------------ heartbeats


def test_a_silent_client_gets_noop_then_is_dropped_with_its_subscriptions(
    bus: EventBusService, ctx: zmq.Context[Any]
) -> None:
    """Real time, short TTL: waited for, never timed."""
    assert bus.mc0 is not None
    core = bus.mc0.core
    peer = RawPeer(ctx, endpoint(bus))
    connector_connect(peer, ttl=b"200")
    assert peer.ask([b"", b"SUB", b"ID", b"s", b"", b"t"]) == [b"", b"OK", b"ID", b"s"]
    assert peer.recv() == [b"", b"NOOP"]  # 0.95 x TTL after the OK
    wait_until(lambda: core.expired == 1, what="the drop after 1.05 x TTL of silence")
    assert core.sessions == {} and core.topics.count == 0
    # It was told nothing of it: its next command is answered as any new connection's.
    assert peer.ask([b"", b"NOOP", b"ID", b"late"]) == [b"", b"OK", b"ID", b"late"]
    peer.close()


def test_garbage_on_the_mc0_port_and_every_door_keeps_serving(
    bus: EventBusService, ctx: zmq.Context[Any]
) -> None:
    rng = random.Random(13)
    words = [b"", b"PUT", b"SUB", b"CONNECT", b"TTL", b"ID", b"TOPIC", b"\xff", b"X-A"]
    peers = [RawPeer(ctx, endpoint(bus)) for _ in range(8)]
    for n in range(2000):
        frames = [
            rng.choice(words) if rng.random() < 0.7 else rng.randbytes(rng.randrange(40))
            for _ in range(rng.randrange(1, 12))
        ]
        peers[n % len(peers)].send(frames)
    peers[0].send([b"", b"SUB", b"", *[b"t"] * 5000])  # too many frames
    assert bus.mc0 is not None
    wait_until(lambda: sum(bus.mc0.core.received.values()) >= 2001, what="garbage read")
    assert bus.mc0.is_alive() and bus.readiness()["threads_alive"]
    for peer in peers:
        peer.close()
    endpoints = BusEndpoints.from_info(bus.info())
    with (
        EventBusClient(endpoints, producer="after") as client,
        zbus.Mc0Client(endpoint(bus)) as mc0_client,
    ):
        mc0_client.subscribe("/after")
        seq = client.publish("/after", b"still here", confirm=True)
        assert seq is not None
        first = client.subscribe("/after").next(timeout=10 * UNIT)
        assert first is not None and first.seq == seq
        assert mc0_client.next(timeout=10 * UNIT) == zbus.Mc0Message("/after", b"still here", {})
        mc0_client.put("/after", b"and mc0 too")
    assert [e.data for e in logged(bus, "/after")] == [b"still here", b"and mc0 too"]


def test_the_client_opens_its_session_again_on_a_restarted_bus(tmp_path: Path) -> None:
    # Both buses bind this port: the client keeps its endpoint across the restart.
    held = HeldPorts()
    port = held.port
    held.release()
    with bus_thread(tmp_path / "a", mc0_port=port) as first:
        client = zbus.Mc0Client(first.endpoints["mc0"], ttl=0.3)
        client.connect()
        client.subscribe("/restart/")
    with bus_thread(tmp_path / "b", mc0_port=port) as second:
        endpoints = BusEndpoints.from_info(second.info())
        with EventBusClient(endpoints, producer="p") as publisher:
            deadline = time.monotonic() + 20 * UNIT
            message = None
            while message is None and time.monotonic() < deadline:
                publisher.publish("/restart/x", b"again")
                message = client.next(timeout=0.1)
        client.close()
    assert message == zbus.Mc0Message("/restart/x", b"again", {})
    assert client.reconnects >= 1
