"""Catalog discovery by UDP beacon, on real sockets on 127.0.0.1.

Every test uses its own free UDP port rather than 5245, so that runs in parallel (or a
catalog on the same host) cannot hear each other's beacons.
"""

from __future__ import annotations

import asyncio
import socket
import time

import pytest

from tests.support.ports import beacon_port
from tests.support.waiting import UNIT
from zbus.catalog.client.discovery import BeaconSender, CatalogNotFound, discover
from zbus.common.protocols.beacon import Beacon, HermesBeacon, encode_beacon
from zbus.common.protocols.dbp import HERMES


async def test_beacon_sender_is_discovered_within_a_second() -> None:
    port = beacon_port()
    began = time.monotonic()
    async with BeaconSender(5246, addresses=("127.0.0.1",), beacon_port=port, interval=0.05):
        endpoint = await discover(1.0 * UNIT, port=port)
    assert endpoint == "tcp://127.0.0.1:5246"
    assert time.monotonic() - began < 1.0 * UNIT


async def test_beacon_host_overrides_the_source_address() -> None:
    port = beacon_port()
    sender = BeaconSender(
        6000, addresses=("127.0.0.1",), beacon_port=port, interval=0.05, host="catalog.local"
    )
    async with sender:
        assert await discover(1.0 * UNIT, port=port) == "tcp://catalog.local:6000"
    assert sender.counters["sent"] >= 2  # the beacons and the departure


async def test_hermes_shalom_beacon_is_discovered_in_that_dialect() -> None:
    port = beacon_port()
    sender = BeaconSender(
        5247, addresses=("127.0.0.1",), beacon_port=port, interval=0.05, dialect=HERMES
    )
    assert sender.payload == b"SHALOM 5247"
    async with sender:
        assert await discover(1.0 * UNIT, port=port, dialect=HERMES) == "tcp://127.0.0.1:5247"
        # A zbus listener does not take SHALOM for a zbus beacon.
        assert await discover(0.2, port=port, fallback="tcp://x:1") == "tcp://x:1"


async def test_no_beacon_returns_the_fallback() -> None:
    port = beacon_port()
    fallback = "tcp://catalog.zbus.svc:5246"
    assert await discover(0.1, port=port, fallback=fallback) == fallback


async def test_no_beacon_and_no_fallback_is_a_clear_error() -> None:
    port = beacon_port()
    with pytest.raises(CatalogNotFound, match=rf"no catalog beacon heard on UDP port {port}"):
        await discover(0.1, port=port)


async def test_garbage_and_departures_are_ignored() -> None:
    port = beacon_port()
    noise = [
        b"",
        b"garbage",
        b"ZBUS\x01short",
        b"SHALOM 5246",
        encode_beacon(Beacon(bytes(16), 0)),  # a catalog leaving
    ]
    good = encode_beacon(Beacon(bytes(16), 7000))

    async def send_noise_then_beacon() -> None:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as out:
            while True:
                for datagram in noise:
                    out.sendto(datagram, ("127.0.0.1", port))
                out.sendto(good, ("127.0.0.1", port))
                await asyncio.sleep(0.05)  # the beacon period

    sending = asyncio.create_task(send_noise_then_beacon())
    try:
        assert await discover(1.0 * UNIT, port=port) == "tcp://127.0.0.1:7000"
    finally:
        sending.cancel()
        await asyncio.gather(sending, return_exceptions=True)


async def test_two_listeners_share_the_beacon_port() -> None:
    port = beacon_port()
    async with BeaconSender(5246, addresses=("127.0.0.1",), beacon_port=port, interval=0.05):
        results = await asyncio.gather(
            discover(0.3 * UNIT, port=port),
            discover(0.3 * UNIT, port=port),
            return_exceptions=True,
        )
    # Both bound the port; a unicast beacon reaches at least one of them.
    assert "tcp://127.0.0.1:5246" in results
    for result in results:
        if isinstance(result, BaseException):
            assert isinstance(result, CatalogNotFound)
            assert "no catalog beacon heard" in str(result)


async def test_hermes_beacon_payload_is_what_hermes_sends() -> None:
    sender = BeaconSender(5246, dialect=HERMES)
    assert sender.payload == encode_beacon(HermesBeacon(5246)) == b"SHALOM 5246"
    assert sender.addresses == ("255.255.255.255",)
    assert sender.beacon_port == 5245
