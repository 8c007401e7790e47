"""CatalogNode against a scripted catalog: a real ROUTER and UDP socket on 127.0.0.1.

The test plays the catalog with the DBP codecs, so every frame the node sends is checked
as the catalog would decode it.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from typing import Any

import pytest
import zmq
import zmq.asyncio

from tests.support.waiting import UNIT, async_wait_until
from zbus.catalog.client.node import (
    CatalogNode,
    CatalogUnavailable,
    NodeState,
    RegistrationDenied,
)
from zbus.common.protocols.dbp import (
    Approved,
    Awk,
    DBPCommand,
    Denied,
    Disconnect,
    Heartbeat,
    Registration,
    Update,
    decode,
    decode_datagram,
    encode,
    encode_datagram,
)

INFO = {"name": "resizer", "ip": "127.0.0.1", "port": 47291, "function": "resize images"}


class FakeCatalog:
    """The catalog's ROUTER and UDP heartbeat socket, driven by the test."""

    def __init__(self, ctx: zmq.asyncio.Context) -> None:
        self.router = ctx.socket(zmq.ROUTER)
        self.router.linger = 0
        port = self.router.bind_to_random_port("tcp://127.0.0.1")
        self.endpoint = f"tcp://127.0.0.1:{port}"
        self.udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.udp.bind(("127.0.0.1", 0))
        self.udp.setblocking(False)
        self.udp_address: tuple[str, int] = self.udp.getsockname()

    async def recv(self, within: float = 2.0) -> tuple[bytes, DBPCommand]:
        async with asyncio.timeout(within * UNIT):
            identity, *frames = await self.router.recv_multipart()
        return identity, decode(frames)

    async def recv_command(self, kind: type[Any], within: float = 2.0) -> tuple[bytes, DBPCommand]:
        """The next command of ``kind``, skipping heartbeats and anything else."""
        async with asyncio.timeout(within * UNIT):
            while True:
                identity, cmd = await self.recv(within)
                if isinstance(cmd, kind):
                    return identity, cmd

    async def send(self, identity: bytes, cmd: DBPCommand) -> None:
        await self.router.send_multipart([identity, *encode(cmd)])

    async def recv_datagram(self, within: float = 2.0) -> tuple[DBPCommand, tuple[str, int]]:
        loop = asyncio.get_running_loop()
        async with asyncio.timeout(within * UNIT):
            data, addr = await loop.sock_recvfrom(self.udp, 2048)
        return decode_datagram(data), addr

    def close(self) -> None:
        self.router.close(linger=0)
        self.udp.close()


@pytest.fixture
async def catalog() -> AsyncIterator[FakeCatalog]:
    ctx = zmq.asyncio.Context()
    fake = FakeCatalog(ctx)
    try:
        yield fake
    finally:
        fake.close()
        ctx.term()


async def register(
    catalog: FakeCatalog, node: CatalogNode, config: dict[str, Any] | None = None
) -> bytes:
    """Start ``node``, approve its REGISTRATION and return its socket identity."""
    start = asyncio.create_task(node.start())
    identity, _ = await catalog.recv_command(Registration)
    await catalog.send(identity, Approved(config or {}, 1.0))
    async with asyncio.timeout(2 * UNIT):
        await start
    return identity


async def test_registration_is_approved(catalog: FakeCatalog) -> None:
    states: list[NodeState] = []
    node = CatalogNode(catalog.endpoint, INFO, on_state=states.append)
    start = asyncio.create_task(node.start())
    identity, cmd = await catalog.recv_command(Registration)
    assert isinstance(cmd, Registration)
    assert cmd.info == {**INFO, "heartbeat_interval": 1.0}
    assert identity == node.identity
    await catalog.send(identity, Approved({"log_level": "debug"}, 1.0))
    await start
    assert node.registered
    assert node.config == {"log_level": "debug"}
    assert node.counters["registrations"] == 1
    assert node.heartbeat_mode == "tcp"
    await node.stop()
    assert states == [NodeState.REGISTERING, NodeState.REGISTERED, NodeState.CLOSED]


async def test_denied_raises_with_the_reasons(catalog: FakeCatalog) -> None:
    node = CatalogNode(catalog.endpoint, INFO)
    start = asyncio.create_task(node.start())
    identity, _ = await catalog.recv_command(Registration)
    await catalog.send(identity, Denied(("not on the allow-list", "no quota"), 1.0))
    with pytest.raises(RegistrationDenied) as info:
        await start
    assert info.value.reasons == ("not on the allow-list", "no quota")
    assert node.state is NodeState.DENIED
    await node.stop()


async def test_unanswered_registration_is_retried_on_a_new_socket(catalog: FakeCatalog) -> None:
    node = CatalogNode(catalog.endpoint, INFO, reply_timeout=0.1, backoff=(0.05, 0.1))
    start = asyncio.create_task(node.start())
    first, _ = await catalog.recv_command(Registration)  # left unanswered
    second, _ = await catalog.recv_command(Registration)
    assert second != first
    await catalog.send(second, Approved({}, 1.0))
    await start
    assert node.registered
    assert node.counters["registration_timeouts"] >= 1
    await node.stop()


async def test_register_timeout_gives_up(catalog: FakeCatalog) -> None:
    node = CatalogNode(
        catalog.endpoint, INFO, reply_timeout=0.05, backoff=(0.05, 0.05), register_timeout=0.3
    )
    with pytest.raises(CatalogUnavailable):
        await node.start()
    assert node.state is NodeState.CLOSED


async def test_udp_heartbeats_go_to_the_address_in_approved(catalog: FakeCatalog) -> None:
    node = CatalogNode(catalog.endpoint, INFO, heartbeat_interval=0.05)
    host, port = catalog.udp_address
    await register(catalog, node, {"udp_heartbeat": f"{host}:{port}"})
    assert node.udp_target == catalog.udp_address
    assert node.heartbeat_mode == "udp"
    for _ in range(2):
        beat, _ = await catalog.recv_datagram()
        assert beat == Heartbeat("resizer", beat.time, beat.time_encoding)
    assert node.counters["heartbeats_udp"] >= 2
    await node.stop()


async def test_missing_catalog_beats_switch_heartbeats_to_tcp_and_back(
    catalog: FakeCatalog,
) -> None:
    node = CatalogNode(
        catalog.endpoint,
        INFO,
        heartbeat_interval=0.05,
        misses=10,
        udp_address=catalog.udp_address,
    )
    identity = await register(catalog, node)
    # The catalog answers each UDP beat with its own: the node stays on UDP.
    node_addr = ("", 0)
    for _ in range(4):
        _, node_addr = await catalog.recv_datagram()
        catalog.udp.sendto(encode_datagram(Heartbeat("catalog", 1.0)), node_addr)
    assert node.heartbeat_mode == "udp"
    # The catalog goes quiet on UDP: the node falls back to TCP heartbeats.
    _, beat = await catalog.recv_command(Heartbeat)
    assert beat == Heartbeat("resizer", beat.time, beat.time_encoding)
    assert node.heartbeat_mode == "tcp"
    assert node.counters["fallbacks_to_tcp"] == 1
    await catalog.send(identity, Heartbeat("catalog", 1.0))
    # A catalog heartbeat datagram again: back to UDP.
    catalog.udp.sendto(encode_datagram(Heartbeat("catalog", 1.0)), node_addr)

    async def back_on_udp() -> bool:
        return node.heartbeat_mode == "udp"

    await async_wait_until(back_on_udp, 2.0, "the node to return to UDP heartbeats")
    assert node.counters["returns_to_udp"] == 1
    assert node.counters["reregistrations"] == 0
    await node.stop()


async def test_disconnect_means_a_new_socket_and_a_new_registration(
    catalog: FakeCatalog,
) -> None:
    node = CatalogNode(catalog.endpoint, INFO)
    first = await register(catalog, node)
    await catalog.send(first, Disconnect(1.0))
    second, _ = await catalog.recv_command(Registration)
    assert second != first
    assert second == node.identity
    await catalog.send(second, Approved({}, 1.0))

    async def registered_again() -> bool:
        return node.registered and node.counters["reregistrations"] == 1

    await async_wait_until(registered_again, 2.0, "the node to register again")
    assert node.counters["disconnects_received"] == 1
    await node.stop()


async def test_catalog_silence_means_a_new_registration(catalog: FakeCatalog) -> None:
    node = CatalogNode(catalog.endpoint, INFO, heartbeat_interval=0.05, misses=3)
    first = await register(catalog, node)
    # Nothing answers the node's TCP heartbeats: after 3 intervals it starts over.
    second, _ = await catalog.recv_command(Registration)
    assert second != first
    await node.stop()


async def test_update_waits_for_awk_or_approved(catalog: FakeCatalog) -> None:
    node = CatalogNode(catalog.endpoint, INFO)
    identity = await register(catalog, node)
    pending = asyncio.create_task(node.update({"port": 47292}))
    _, cmd = await catalog.recv_command(Update)
    # The node names itself in every UPDATE (Hermes's broker finds the node by it).
    assert cmd == Update({"name": "resizer", "port": 47292}, cmd.time, cmd.time_encoding)
    await catalog.send(identity, Awk(1.0))
    assert await pending == {}
    assert node.info["port"] == 47292
    pending = asyncio.create_task(node.update({"topics": ["a"]}))
    await catalog.recv_command(Update)
    await catalog.send(identity, Approved({"rate": 5}, 1.0))
    assert await pending == {"rate": 5}
    await node.stop()


async def test_update_denied_raises(catalog: FakeCatalog) -> None:
    node = CatalogNode(catalog.endpoint, INFO)
    identity = await register(catalog, node)
    pending = asyncio.create_task(node.update({"port": 1}))
    await catalog.recv_command(Update)
    await catalog.send(identity, Denied(("read-only",), 1.0))
    with pytest.raises(RegistrationDenied):
        await pending
    await node.stop()


async def test_async_with_deregisters_on_exit(catalog: FakeCatalog) -> None:
    entered = asyncio.Event()
    leave = asyncio.Event()

    async def use_node() -> None:
        async with CatalogNode(catalog.endpoint, INFO) as node:
            assert node.registered
            entered.set()
            await leave.wait()

    using = asyncio.create_task(use_node())
    identity, _ = await catalog.recv_command(Registration)
    await catalog.send(identity, Approved({}, 1.0))
    async with asyncio.timeout(2 * UNIT):
        await entered.wait()
    leave.set()
    sender, _ = await catalog.recv_command(Disconnect)
    assert sender == identity
    async with asyncio.timeout(2 * UNIT):
        await using


async def test_run_then_deregister_sends_disconnect(catalog: FakeCatalog) -> None:
    node = CatalogNode(catalog.endpoint, INFO)
    running = asyncio.create_task(node.run())
    identity, _ = await catalog.recv_command(Registration)
    await catalog.send(identity, Approved({}, 1.0))

    async def registered() -> bool:
        return node.registered

    await async_wait_until(registered, 2.0, "registration")
    await node.deregister()
    sender, _ = await catalog.recv_command(Disconnect)
    assert sender == identity
    async with asyncio.timeout(2 * UNIT):
        await running
    assert node.state is NodeState.CLOSED


async def test_malformed_messages_are_counted_and_dropped(catalog: FakeCatalog) -> None:
    node = CatalogNode(catalog.endpoint, INFO, udp_address=catalog.udp_address)
    identity = await register(catalog, node)
    _, node_addr = await catalog.recv_datagram()
    await catalog.router.send_multipart([identity, b"junk"])
    await catalog.router.send_multipart([identity, b"", b"<3", b"not a time", b"x"])
    await catalog.router.send_multipart([identity, b"", b"??", b"1.0"])
    catalog.udp.sendto(b"\x00\x05garbage", node_addr)

    async def all_counted() -> bool:
        return node.counters["malformed"] == 4

    await async_wait_until(all_counted, 2.0, "four malformed messages")
    assert node.registered
    # The node still works after the garbage.
    pending = asyncio.create_task(node.update({"port": 2}))
    await catalog.recv_command(Update)
    await catalog.send(identity, Awk(1.0))
    assert await pending == {}
    await node.stop()
