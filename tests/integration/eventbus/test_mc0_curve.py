"""The mc0 door with CURVE on 61616: the bus's keys, its ZAP allow-list (which mc0d
cannot have), and the stress of PEERS.md: 50 CURVE clients x 1,000 NOOPs with an ID,
every one answered OK."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import zmq
from zmq.utils.monitor import recv_monitor_message

import zbus
from tests.support.bus import bus_thread
from tests.support.waiting import UNIT
from zbus.common.security import KeyPair, generate_keys, load_keys, make_client
from zbus.eventbus.server.service import EventBusService

CLIENTS = 50
NOOPS = 1000


@dataclass(frozen=True)
class Keys:
    bus_secret: Path
    bus_public: bytes
    allowed: Path
    listed: KeyPair
    unlisted: KeyPair


@pytest.fixture
def keys(tmp_path: Path) -> Keys:
    directory, allowed = tmp_path / "keys", tmp_path / "allowed"
    bus_public, bus_secret = generate_keys(directory, "eventbus")
    listed_public, listed_secret = generate_keys(directory, "node")
    _, unlisted_secret = generate_keys(directory, "stranger")
    allowed.mkdir()
    (allowed / listed_public.name).write_bytes(listed_public.read_bytes())
    return Keys(
        bus_secret,
        load_keys(bus_public).public,
        allowed,
        load_keys(listed_secret),
        load_keys(unlisted_secret),
    )


@pytest.fixture
def curve_bus(tmp_path: Path, keys: Keys) -> Iterator[EventBusService]:
    """The shared ``bus``, but with CURVE on and the ``keys`` allow-list."""
    with bus_thread(
        tmp_path / "bus", curve_secret_key=keys.bus_secret, curve_allowed_clients=keys.allowed
    ) as service:
        yield service


def test_a_listed_key_talks_mc0_over_curve(curve_bus: EventBusService, keys: Keys) -> None:
    curve = (keys.listed, keys.bus_public)
    with (
        zbus.Mc0Client(curve_bus.endpoints["mc0"], curve=curve) as node,
        zbus.Mc0Client(curve_bus.endpoints["mc0"], curve=curve) as client,
    ):
        node.subscribe("mcollective nodes")
        client.put("mcollective nodes", b"hello", {"X-REPLY-TO": "r"})
        assert node.next(timeout=10 * UNIT) == zbus.Mc0Message(
            "mcollective nodes", b"hello", {"X-REPLY-TO": "r"}
        )


def test_an_unlisted_key_is_refused_at_the_handshake(
    curve_bus: EventBusService, keys: Keys, ctx: zmq.Context[Any]
) -> None:
    sock = ctx.socket(zmq.DEALER)
    sock.linger = 0
    make_client(sock, keys.unlisted, keys.bus_public)
    monitor = sock.get_monitor_socket(
        zmq.EVENT_HANDSHAKE_SUCCEEDED | zmq.EVENT_HANDSHAKE_FAILED_AUTH
    )
    sock.connect(curve_bus.endpoints["mc0"])
    sock.send_multipart([b"", b"NOOP", b"ID", b"let-me-in"])
    assert monitor.poll(int(10_000 * UNIT)), "no handshake outcome"
    event = recv_monitor_message(monitor)
    assert event["event"] == zmq.EVENT_HANDSHAKE_FAILED_AUTH
    assert event["value"] == 400  # ZAP said no
    # Meanwhile a listed client is served, and the door heard nothing from the stranger.
    with zbus.Mc0Client(curve_bus.endpoints["mc0"], curve=(keys.listed, keys.bus_public)) as ok:
        ok.heartbeat()
    assert curve_bus.mc0 is not None and curve_bus.mc0.core.received["NOOP"] == 1
    assert not sock.poll(0)
    monitor.close(linger=0)
    sock.close(linger=0)


def test_50_curve_clients_x_1000_noops_with_an_id_each_get_an_ok(
    curve_bus: EventBusService, keys: Keys, ctx: zmq.Context[Any]
) -> None:
    """mc0d's stress tool, as PEERS.md describes it: no CONNECT, only NOOPs with IDs."""
    socks = []
    for _ in range(CLIENTS):
        sock = ctx.socket(zmq.DEALER)
        sock.linger = 0
        sock.sndhwm = sock.rcvhwm = 2 * NOOPS
        make_client(sock, keys.listed, keys.bus_public)
        sock.connect(curve_bus.endpoints["mc0"])
        socks.append(sock)
    for c, sock in enumerate(socks):
        for n in range(NOOPS):
            sock.send_multipart([b"", b"NOOP", b"ID", b"%d-%d" % (c, n)])
    answered: list[list[bytes]] = [[] for _ in socks]
    poller = zmq.Poller()
    for sock in socks:
        poller.register(sock, zmq.POLLIN)
    index = {sock: c for c, sock in enumerate(socks)}
    left = CLIENTS * NOOPS
    while left:
        ready = poller.poll(int(30_000 * UNIT))
        assert ready, f"{left} NOOPs unanswered"
        for sock, _ in ready:
            while True:
                try:
                    frames = sock.recv_multipart(zmq.NOBLOCK)
                except zmq.Again:
                    break
                assert frames[:3] == [b"", b"OK", b"ID"], frames
                answered[index[sock]].append(frames[3])
                left -= 1
    for sock in socks:
        sock.close()
    for c, ids in enumerate(answered):
        assert ids == [b"%d-%d" % (c, n) for n in range(NOOPS)]  # every one, in order
    assert curve_bus.mc0 is not None
    core = curve_bus.mc0.core
    assert core.sent["OK"] == CLIENTS * NOOPS and core.drops["slow_client"] == 0
    assert core.sessions == {}  # NOOPs open no session
