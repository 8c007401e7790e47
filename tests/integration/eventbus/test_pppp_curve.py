"""The PPPP door with CURVE on its port: the bus's keys and its ZAP allow-list. A
subscriber whose key is listed is served (SYNC, then the events of its channel); one
with a key the bus does not know fails the handshake and the door hears nothing of it."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import zmq
from zmq.utils.monitor import recv_monitor_message

from tests.support.bus import bus_thread
from tests.support.pppp import RawSubscriber
from tests.support.waiting import UNIT
from zbus.common.protocols import pppp
from zbus.common.protocols.pppp_event import SyncEnd
from zbus.common.security import KeyPair, generate_keys, load_keys, make_client
from zbus.eventbus.client import BusEndpoints, EventBusClient
from zbus.eventbus.server.service import EventBusService

CHANNEL = "/secure/"


def _subscriber(
    ctx: zmq.Context[Any], endpoint: str, name: bytes, pair: KeyPair, bus_public: bytes
) -> tuple[RawSubscriber, zmq.Socket[Any]]:
    """A raw PPPP subscriber over CURVE, and a monitor of its handshake."""
    sub = RawSubscriber.__new__(RawSubscriber)
    sub.name = name
    sub.sock = ctx.socket(zmq.DEALER)
    sub.sock.linger = 0
    sub.sock.routing_id = name
    make_client(sub.sock, pair, bus_public)
    monitor = sub.sock.get_monitor_socket(
        zmq.EVENT_HANDSHAKE_SUCCEEDED | zmq.EVENT_HANDSHAKE_FAILED_AUTH
    )
    sub.sock.connect(endpoint)
    return sub, monitor


def _handshake(monitor: zmq.Socket[Any]) -> dict[str, Any]:
    assert monitor.poll(int(10_000 * UNIT)), "no handshake outcome"
    return recv_monitor_message(monitor)


def test_a_listed_key_is_served_and_an_unknown_key_is_not(
    tmp_path: Path, ctx: zmq.Context[Any]
) -> None:
    directory, allowed = tmp_path / "keys", tmp_path / "allowed"
    bus_public_file, bus_secret = generate_keys(directory, "eventbus")
    listed_public, listed_secret = generate_keys(directory, "reader")
    _, stranger_secret = generate_keys(directory, "stranger")
    allowed.mkdir()
    (allowed / listed_public.name).write_bytes(listed_public.read_bytes())
    bus_public = load_keys(bus_public_file).public
    listed = load_keys(listed_secret)
    with bus_thread(
        tmp_path / "bus",
        pppp_port=0,
        curve_secret_key=bus_secret,
        curve_allowed_clients=allowed,
    ) as bus:
        endpoint = bus.endpoints["pppp"]
        good, good_monitor = _subscriber(ctx, endpoint, b"reader", listed, bus_public)
        bad, bad_monitor = _subscriber(
            ctx, endpoint, b"stranger", load_keys(stranger_secret), bus_public
        )
        try:
            assert _handshake(good_monitor)["event"] == zmq.EVENT_HANDSHAKE_SUCCEEDED
            # Not blocking: once the stranger's handshake has failed, its DEALER has no
            # connection to queue on, and ZeroMQ refuses the send (EAGAIN) instead.
            with contextlib.suppress(zmq.Again):
                bad.sock.send_multipart(pppp.encode(pppp.Subscribe(CHANNEL)), zmq.NOBLOCK)
            refused = _handshake(bad_monitor)
            assert refused["event"] == zmq.EVENT_HANDSHAKE_FAILED_AUTH
            assert refused["value"] == 400  # ZAP said no

            assert good.sync(CHANNEL) == ([], SyncEnd(0, 0))
            ends = BusEndpoints.from_info(bus.info())
            with EventBusClient(ends, producer="p", curve=(listed, bus_public)) as client:
                client.publish("/secure/door", b"open", confirm=True, timeout=10 * UNIT)
            [(seq, event)] = good.messages(1, CHANNEL)
            assert (seq, event.topic, event.data) == (1, "/secure/door", b"open")

            _served_only(bus)
            assert bad.quiet(0.2 * UNIT)  # nothing reached the stranger
        finally:
            for sock in (good_monitor, bad_monitor):
                sock.close(linger=0)
            good.sock.disable_monitor()
            bad.sock.disable_monitor()
            good.close()
            bad.close()


def _served_only(bus: EventBusService) -> None:
    """The door knows the listed subscriber only: the stranger's SUBSCRIBE never came."""
    assert bus.pppp is not None
    known, subscribes = bus.pppp.submit(
        lambda door: (set(door.core.subscribers), door.core.received["SUBSCRIBE"])
    ).result(10)
    assert known == {b"reader"}
    assert subscribes == 1
