"""The event bus clients in the plain protocol (``compat="node"`` / ``"spec"``).

The real Node.js bus cannot be installed here, so the client is checked twice: its
frames, captured by raw sockets on 127.0.0.1 standing where the bus would be, against
PEERS.md's description of the Node.js peer; and its whole behaviour against a zbus bus
running in the Node-compatible mode.
"""

from __future__ import annotations

import re
import uuid
from pathlib import Path
from typing import Any

import msgpack
import pytest
import zmq

from tests.support.bus import bus_thread, running_bus
from tests.support.ports import HeldPorts
from tests.support.waiting import UNIT, wait_until
from zbus.eventbus.client import (
    AsyncEventBusClient,
    BusEndpoints,
    DialectError,
    EventBusClient,
)
from zbus.eventbus.server.store import NewEvent, SqliteEventLog

JS_ISO = re.compile(rb"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")  # Date.toISOString()
UUID4 = re.compile(rb"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}")
WAIT_MS = int(10_000 * UNIT)
TS = "2026-11-22T08:35:32.862Z"


class Tap:
    """Raw sockets bound where a bus's SNAPSHOT, PUBLISHER and COLLECTOR would be."""

    def __init__(self) -> None:
        self.ctx = zmq.Context()
        self.snapshot = self.ctx.socket(zmq.ROUTER)
        self.publisher = self.ctx.socket(zmq.PUB)
        self.collector = self.ctx.socket(zmq.ROUTER)
        ports = [
            s.bind_to_random_port("tcp://127.0.0.1")
            for s in (self.snapshot, self.publisher, self.collector)
        ]
        self.endpoints = BusEndpoints(
            *(f"tcp://127.0.0.1:{p}" for p in ports), stream="tcp://127.0.0.1:1"
        )

    @staticmethod
    def recv(sock: zmq.Socket[Any]) -> list[bytes]:
        assert sock.poll(WAIT_MS), "nothing arrived"
        return sock.recv_multipart()

    def close(self) -> None:
        for s in (self.snapshot, self.publisher, self.collector):
            s.close(linger=0)
        self.ctx.term()


@pytest.fixture
def tap() -> Any:
    t = Tap()
    yield t
    t.close()


def _printable(identity: bytes) -> bool:
    return identity.isascii() and identity.decode().isprintable() and len(identity) > 8


def test_node_dialect_frames_are_those_of_the_node_peer(tap: Tap) -> None:
    with EventBusClient(tap.endpoints, producer="node-peer", compat="node") as client:
        # PUB: [topic, 'null', producer, JavaScript ISO timestamp, uuid4 text, msgpack].
        assert client.publish("/demo/x", {"v": 1}) is None
        identity, *frames = tap.recv(tap.collector)
        assert _printable(identity)
        assert len(frames) == 6
        assert frames[:3] == [b"/demo/x", b"null", b"node-peer"]
        assert JS_ISO.fullmatch(frames[3]) and UUID4.fullmatch(frames[4])
        assert msgpack.unpackb(frames[5]) == {"v": 1}
        client.publish_many([("/demo/y", b"raw"), ("/demo/z", "text")])
        for topic, data in ((b"/demo/y", b"raw"), (b"/demo/z", msgpack.packb("text"))):
            again, *frames = tap.recv(tap.collector)
            assert again == identity and frames[0] == topic and frames[5] == data
        # No confirmed publish: the Node.js bus has none (a ZB-PUB crashes it).
        with pytest.raises(DialectError, match="confirm"):
            client.publish("/demo/x", 1, confirm=True)
        with pytest.raises(DialectError):
            client.publish_many([("/demo/x", 1)], confirm=True)
        assert not tap.collector.poll(100)  # nothing was sent for them

        # SUBSCRIBE: exactly 3 frames, ',' between subtrees, the sequence as ASCII text.
        sub = client.subscribe(("/demo/", "/other/"), since=7)
        identity, *frames = tap.recv(tap.snapshot)
        assert _printable(identity)
        assert frames == [b"SYNCSTART", b"/demo/,/other/", b"7"]
        # The tap answers as the Node.js bus does: every event above 7, then SYNCEND.
        sync = [b"SYNC", b"/demo/a", b"8", b"other", b"2026-11-22T08:35:32.862Z"]
        tap.snapshot.send_multipart(
            [identity, *sync, b"5f0c3b1e-9a7d-4c2e-8b61-0d4e2f9a7c13", b"\xc0"]
        )
        tap.snapshot.send_multipart([identity, b"SYNCEND", b"/demo/,/other/", b"9"])
        event = sub.next(timeout=10 * UNIT)
        assert event is not None and (event.seq, event.topic) == (8, "/demo/a")
        assert event.unpack() is None
        sub.close()
    # Never a zbus extension (their first frame starts with NUL), never a stream socket.
    assert not tap.collector.poll(100) and not tap.snapshot.poll(100)


def test_spec_dialect_frames_are_those_of_the_rfc(tap: Tap) -> None:
    with EventBusClient(tap.endpoints, producer="spec-peer", compat="spec") as client:
        client.publish("/demo/x", b"\x01")
        _, *frames = tap.recv(tap.collector)
        assert frames[:3] == [b"/demo/x", bytes(8), b"spec-peer"]  # unassigned: 8 zero bytes
        sub = client.subscribe(["/a/", "/b/"], since=2**40)
        _, *frames = tap.recv(tap.snapshot)
        assert frames == [b"SYNCSTART", b"/a/;/b/", (2**40).to_bytes(8, "big")]
        sub.close()


def test_node_dialect_client_against_a_zbus_bus_in_node_mode(tmp_path: Path) -> None:
    with bus_thread(tmp_path, compat="node", heartbeat_interval=0.2) as service:
        ends = BusEndpoints.from_info(service.info())
        with (
            EventBusClient(ends, producer="node-pub", compat="node") as pub,
            EventBusClient(ends, producer="node-sub", compat="node") as reader,
        ):
            for value in range(3):
                pub.publish("/demo/a", value)
            pub.publish("/other/x", "x")
            wait_until(lambda: service.store.last_sequence() == 4, what="4 events stored")
            state = reader.subscribe(["/demo/", "/other/"])
            got = [state.next(timeout=10 * UNIT) for _ in range(2)]
            assert [(e.seq, e.topic, e.unpack()) for e in got if e] == [
                (3, "/demo/a", 2),
                (4, "/other/x", "x"),
            ]
            pub.publish("/demo/b", "live")
            live = state.next(timeout=10 * UNIT)
            assert live is not None and (live.seq, live.topic, live.unpack()) == (
                5,
                "/demo/b",
                "live",
            )
            # A subscriber resuming after 1 gets every event since, several of /demo/a.
            resumed = reader.subscribe("/demo/", since=1)
            seqs = [resumed.next(timeout=10 * UNIT) for _ in range(3)]
            assert [(e.seq, e.unpack()) for e in seqs if e] == [(2, 1), (3, 2), (5, "live")]
            assert state.malformed == resumed.malformed == 0


async def test_spec_dialect_async_client_resumes_after_the_bus_restarts(tmp_path: Path) -> None:
    """A plain subscription hears zbus's HUGZ, so it can tell that its bus was away even
    when ZeroMQ reconnected by itself: events logged meanwhile, never broadcast to it,
    come from the log with SYNCSTART from its last sequence."""
    # The client knows the bus by its base endpoint, from before the bus starts until
    # after it restarted on the same ports.
    held = HeldPorts(4)
    port = held.port
    base = f"tcp://127.0.0.1:{port}"
    client = AsyncEventBusClient(
        base, producer="spec-client", compat="spec", heartbeat_interval=0.1, misses=3
    )
    held.release()
    try:
        async with running_bus(tmp_path, port, heartbeat_interval=0.1, archive=False):
            sub = await client.subscribe("/r/")
            await client.publish("/r/1", 1)
            first = await sub.next(timeout=10 * UNIT)
            assert first is not None and first.seq == 1
        # While the bus is down, two events reach its log (as a bus that took them just
        # before the client's subscription came back would have them).
        log = SqliteEventLog(tmp_path / "events.db")
        log.append([NewEvent(f"/r/{i}", "p", TS, str(uuid.uuid4()), b"x") for i in (2, 3)], 0.0)
        log.close()
        async with running_bus(tmp_path, port, heartbeat_interval=0.1, archive=False):
            got = [await sub.next(timeout=10 * UNIT) for _ in range(2)]
            assert [(e.seq, e.topic) for e in got if e] == [(2, "/r/2"), (3, "/r/3")]
            assert sub.repaired >= 2
            await client.publish("/r/4", 4)
            live = await sub.next(timeout=10 * UNIT)
            assert live is not None and live.seq == 4
    finally:
        client.close()
