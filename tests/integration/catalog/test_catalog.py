"""The catalog service with the node library, on real sockets."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path
from typing import Any

import httpx
import zmq
import zmq.asyncio

from tests.support.catalog import node_info, running_catalog
from tests.support.ports import HeldPorts
from tests.support.waiting import UNIT, async_wait_until
from zbus.catalog.client.node import CatalogNode
from zbus.catalog.server.service import CatalogService
from zbus.common.protocols import dbp


async def _services(catalog: CatalogService) -> dict[str, Any]:
    async with httpx.AsyncClient(base_url=catalog.admin_url or "") as http:
        listed = (await http.get("/api/v1/services")).json()["services"]
    return {s["name"]: s for s in listed}


async def test_a_node_registers_heartbeats_over_udp_and_leaves(tmp_path: Path) -> None:
    # 30 misses (3 s): a loop stalled on a busy machine must not make the node inactive,
    # which would let the twin below take its name.
    async with running_catalog(tmp_path, heartbeat_interval=0.1, heartbeat_misses=30) as catalog:
        node = CatalogNode(catalog.endpoints["dbp"], node_info("svc-a"), heartbeat_interval=0.1)
        await node.start()
        try:
            assert node.registered
            seen = await _services(catalog)
            assert seen["svc-a"]["state"] == "active"

            async def beats_over_udp() -> bool:
                return node.counters["heartbeats_udp"] >= 3

            await async_wait_until(beats_over_udp, what="UDP heartbeats")
            assert (await _services(catalog))["svc-a"]["udp_address"] is not None
            # A second node under the same live name is denied with the reason.
            twin = CatalogNode(
                catalog.endpoints["dbp"], node_info("svc-a"), register_timeout=5 * UNIT
            )
            try:
                await twin.start()
            except Exception as exc:
                assert "svc-a" in str(exc) or "taken" in str(exc)
            else:
                raise AssertionError("a second live node took the name")
            finally:
                await twin.stop()
        finally:
            await node.stop()

        async def gone() -> bool:
            return "svc-a" not in await _services(catalog)

        await async_wait_until(gone, what="the node to deregister")


async def test_malformed_input_on_tcp_and_udp_is_counted(tmp_path: Path) -> None:
    async with running_catalog(tmp_path) as catalog:
        ctx = zmq.asyncio.Context()
        dealer = ctx.socket(zmq.DEALER)
        dealer.connect(catalog.endpoints["dbp"])
        loop = asyncio.get_running_loop()
        udp, _ = await loop.create_datagram_endpoint(
            asyncio.DatagramProtocol,
            remote_addr=("127.0.0.1", int(catalog.endpoints["heartbeats"].rsplit(":", 1)[1])),
        )
        try:
            await dealer.send_multipart([b"", b"???", b"1.0"])
            udp.sendto(b"\x00\x05hello")

            def rejected() -> float:
                return sum(
                    catalog.registry.get_sample_value(
                        "zbus_catalog_rejected_total", {"transport": t, "reason": r}
                    )
                    or 0.0
                    for t in ("tcp", "udp")
                    for r in ("frame_count", "bad_value", "unknown_command", "malformed")
                )

            await async_wait_until(lambda: asyncio.sleep(0, rejected() >= 2), what="rejections")
            # The catalog still registers a node after the garbage.
            await dealer.send_multipart(dbp.encode(dbp.Registration(node_info("ok"), time=1.0)))
            reply = dbp.decode(await asyncio.wait_for(dealer.recv_multipart(), 10 * UNIT))
            assert isinstance(reply, dbp.Approved)
        finally:
            udp.close()
            dealer.close(linger=0)
            ctx.term()


async def test_nodes_register_again_after_a_catalog_restart(tmp_path: Path) -> None:
    # Chosen ahead (below the kernel's ephemeral range): the restarted catalog binds them
    # again, and a port the kernel chose could meanwhile be taken by another process's
    # connection.
    tcp, udp = HeldPorts(), HeldPorts(kind=socket.SOCK_DGRAM)
    port, udp_port = tcp.port, udp.port
    tcp.release()
    udp.release()
    async with running_catalog(
        tmp_path, heartbeat_interval=0.1, port=port, udp_port=udp_port
    ) as first:
        node = CatalogNode(first.endpoints["dbp"], node_info("svc-b"), heartbeat_interval=0.1)
        await node.start()
        assert node.counters["reregistrations"] == 0
    # The node keeps running while the catalog is down and comes back on the same ports
    # with the same registry: the catalog does not know the node's socket any more, tells
    # it so (DISCONNECT), and the node registers again on a new socket.
    try:
        async with running_catalog(
            tmp_path, heartbeat_interval=0.1, port=port, udp_port=udp_port
        ) as second:

            async def back() -> bool:
                listed = await _services(second)
                return (
                    node.counters["reregistrations"] >= 1
                    and listed.get("svc-b", {}).get("state") == "active"
                )

            await async_wait_until(back, within=20, what="re-registration after the restart")
    finally:
        await node.stop()


async def test_a_zbus_service_registers_itself_and_leaves_on_stop(tmp_path: Path) -> None:
    from tests.support.echo_service import EchoService, EchoSettings

    async with running_catalog(tmp_path / "catalog", heartbeat_interval=0.2) as catalog:
        service = EchoService(
            EchoSettings(
                data_dir=tmp_path / "echo",
                catalog_endpoint=catalog.endpoints["dbp"],
                node_name="echo-1",
            )
        )
        task = asyncio.create_task(service.run())
        try:

            async def listed() -> bool:
                return service.readiness().get("catalog") is True and "echo-1" in (
                    await _services(catalog)
                )

            await async_wait_until(listed, what="the echo service in the catalog")
            record = (await _services(catalog))["echo-1"]
            assert record["info"]["function"] == "echo"
            assert record["info"]["endpoints"]["echo"] == service.endpoints["echo"]
            assert record["info"]["admin"] == service.admin_url
        finally:
            service.request_stop()
            await asyncio.wait_for(task, 20 * UNIT)

        async def gone() -> bool:
            return "echo-1" not in await _services(catalog)

        await async_wait_until(gone, what="the echo service to leave the catalog")


async def test_a_restarted_service_registers_once_its_former_self_has_expired(
    tmp_path: Path,
) -> None:
    """A service started again at once (kill -9, a container restarted) finds its name
    held by its former self, which the catalog keeps live until it misses its heartbeats;
    the service tries again and registers then, instead of staying unready."""
    import time

    from tests.support.echo_service import EchoService, EchoSettings

    # Heartbeats every 0.2 s, 15 missed before a node is inactive: the name stays taken
    # for 3 s after the former self's last word, long enough to be found taken.
    async with running_catalog(
        tmp_path / "catalog", heartbeat_interval=0.2, heartbeat_misses=15
    ) as catalog:
        name = f"echo-{socket.gethostname()}"
        former = zmq.asyncio.Context.instance().socket(zmq.DEALER)
        former.linger = 0
        former.connect(catalog.endpoints["dbp"])
        await former.send_multipart(dbp.encode(dbp.Registration(node_info(name), time.time())))
        approved = dbp.decode(await asyncio.wait_for(former.recv_multipart(), 10 * UNIT))
        assert isinstance(approved, dbp.Approved)
        former.close()  # gone without a DISCONNECT, as a killed process goes

        service = EchoService(
            EchoSettings(
                data_dir=tmp_path / "echo",
                catalog_endpoint=catalog.endpoints["dbp"],
                node_name="echo-{hostname}",
            )
        )
        task = asyncio.create_task(service.run())
        try:

            async def denied() -> bool:
                return catalog.core.counters["registrations_denied_name_taken"] >= 1

            await async_wait_until(denied, what="the name found taken")

            async def registered() -> bool:
                listed = await _services(catalog)
                return service.readiness().get("catalog") is True and (
                    listed.get(name, {}).get("info", {}).get("function") == "echo"
                )

            await async_wait_until(registered, within=30, what="registered once the name is free")
        finally:
            service.request_stop()
            await asyncio.wait_for(task, 20 * UNIT)


async def test_the_catalog_is_found_by_its_beacon(tmp_path: Path) -> None:

    from zbus.catalog.client.discovery import discover

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.bind(("127.0.0.1", 0))
        beacon_port = probe.getsockname()[1]
    async with running_catalog(tmp_path, beacon_port=beacon_port) as catalog:
        found = await discover(5 * UNIT, port=beacon_port, bind="127.0.0.1")
        assert found == catalog.endpoints["dbp"]
        # The metric counts the beacons as they go out, not when the registry is written
        # (nothing registers here).
        sent = catalog.registry.get_sample_value("zbus_catalog_beacons_sent_total")
        assert sent is not None and sent >= 1
        assert catalog.registry.get_sample_value("zbus_catalog_beacon_errors_total") == 0


async def test_beacons_the_network_refuses_are_counted_as_errors(tmp_path: Path) -> None:

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.bind(("127.0.0.1", 0))
        beacon_port = probe.getsockname()[1]
    # An IPv6 destination for the IPv4 beacon socket: refused at once, nothing leaves.
    async with running_catalog(
        tmp_path, beacon_port=beacon_port, beacon_addresses="127.0.0.1,::1"
    ) as catalog:

        def counted() -> bool:
            errors = catalog.registry.get_sample_value("zbus_catalog_beacon_errors_total")
            sent = catalog.registry.get_sample_value("zbus_catalog_beacons_sent_total")
            return bool(errors and sent and errors >= 1 and sent >= 1)

        await async_wait_until(lambda: asyncio.sleep(0, counted()), what="a beacon error")


async def test_deregister_from_the_admin_api_makes_the_node_register_again(
    tmp_path: Path,
) -> None:
    async with running_catalog(tmp_path, heartbeat_interval=0.2) as catalog:
        node = CatalogNode(catalog.endpoints["dbp"], node_info("svc-c"), heartbeat_interval=0.2)
        await node.start()
        try:
            async with httpx.AsyncClient(base_url=catalog.admin_url or "") as http:
                gone = await http.delete("/api/v1/services/svc-c")
                assert gone.status_code == 200
                assert (await http.delete("/api/v1/services/nope")).status_code == 404

            async def back() -> bool:
                return node.counters["reregistrations"] >= 1 and "svc-c" in (
                    await _services(catalog)
                )

            await async_wait_until(back, what="the node to register again")
        finally:
            await node.stop()


async def test_oversized_registrations_cost_the_catalog_a_bounded_memory(tmp_path: Path) -> None:
    async with running_catalog(tmp_path) as catalog:
        ctx = zmq.asyncio.Context()
        big, huge = ctx.socket(zmq.DEALER), ctx.socket(zmq.DEALER)
        for sock in (big, huge):
            sock.connect(catalog.endpoints["dbp"])
        try:
            # Past the codec's bound but within ZeroMQ's: refused by size and counted.
            body = b'{"name":"big","p":"' + b"x" * (dbp.MAX_JSON_FRAME_BYTES + 1) + b'"}'
            await big.send_multipart([b"", b"UwU", b"1.0", body])
            # Past the socket's bound: ZeroMQ drops the connection before the catalog reads.
            await huge.send_multipart([b"", b"UwU", b"1.0", b"{" + b" " * (2 << 20) + b"}"])

            def rejected() -> float:
                return (
                    catalog.registry.get_sample_value(
                        "zbus_catalog_rejected_total", {"transport": "tcp", "reason": "bad_value"}
                    )
                    or 0.0
                )

            await async_wait_until(lambda: asyncio.sleep(0, rejected() >= 1), what="the refusal")
            # The catalog still registers a node on the first connection.
            await big.send_multipart(dbp.encode(dbp.Registration(node_info("ok"), time=1.0)))
            reply = dbp.decode(await asyncio.wait_for(big.recv_multipart(), 10 * UNIT))
            assert isinstance(reply, dbp.Approved)
            assert rejected() == 1  # the 2 MiB message never reached the catalog's decoder
        finally:
            big.close(linger=0)
            huge.close(linger=0)
            ctx.term()
