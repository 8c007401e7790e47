"""The catalog's CURVE-key policy: an unlisted key is DENIED with the reason."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
import zmq
import zmq.asyncio

from tests.support.catalog import node_info, running_catalog
from tests.support.echo_service import EchoService, EchoSettings
from tests.support.waiting import UNIT, async_wait_until
from zbus.common.protocols import dbp
from zbus.common.security import generate_keys, load_keys, make_client
from zbus.common.settings import ConfigError


async def _register(endpoint: str, client_secret: Path, server: Path, name: str) -> dbp.DBPCommand:
    ctx = zmq.asyncio.Context.instance()
    sock = ctx.socket(zmq.DEALER)
    sock.linger = 0
    make_client(sock, load_keys(client_secret), load_keys(server).public)
    sock.connect(endpoint)
    try:
        await sock.send_multipart(dbp.encode(dbp.Registration(node_info(name), time.time())))
        return dbp.decode(await asyncio.wait_for(sock.recv_multipart(), 10 * UNIT))
    finally:
        sock.close()


async def test_unlisted_curve_key_is_denied_with_a_reason(tmp_path: Path) -> None:
    keys, allowed = tmp_path / "keys", tmp_path / "allowed"
    _, server_secret = generate_keys(keys, "catalog")
    good_public, good_secret = generate_keys(keys, "good")
    _, bad_secret = generate_keys(keys, "intruder")
    allowed.mkdir()
    (allowed / "good.key").write_bytes(good_public.read_bytes())
    async with running_catalog(
        tmp_path / "data", curve_secret_key=server_secret, curve_allowed_clients=allowed
    ) as catalog:
        endpoint = catalog.endpoints["dbp"]
        # The handshake passes for any key; the registration is what is refused.
        denied = await _register(endpoint, bad_secret, server_secret, "svc-x")
        assert isinstance(denied, dbp.Denied), denied
        assert any("key may not register" in reason for reason in denied.reasons)
        approved = await _register(endpoint, good_secret, server_secret, "svc-y")
        assert isinstance(approved, dbp.Approved), approved
        assert catalog.core.counters["registrations_denied_policy"] == 1
        assert [r.name for r in catalog.core.nodes()] == ["svc-y"]


async def test_a_hermes_node_registers_and_heartbeats_over_udp(tmp_path: Path) -> None:
    """Hermes' dialect on the real service: float32 time, OmO, its UDP heartbeats."""
    hermes_info = {
        "name": "Rohan",
        "interfaces": {"router": {"ip": "127.0.0.1", "port": 5247}},
        "reg_time": "Sun Nov 22 08:35:32 2026",
        "topics": None,
    }
    f32 = dbp.TimeEncoding.FLOAT32
    async with running_catalog(tmp_path) as catalog:
        ctx = zmq.asyncio.Context.instance()
        node, twin = ctx.socket(zmq.DEALER), ctx.socket(zmq.DEALER)
        loop = asyncio.get_running_loop()
        udp, _ = await loop.create_datagram_endpoint(
            asyncio.DatagramProtocol, remote_addr=("127.0.0.1", catalog.core.config.udp_port)
        )
        try:
            for sock in (node, twin):
                sock.linger = 0
                sock.connect(catalog.endpoints["dbp"])
            await node.send_multipart(
                dbp.encode(dbp.Registration(hermes_info, time.time(), f32), dbp.HERMES)
            )
            wire = await asyncio.wait_for(node.recv_multipart(), 10 * UNIT)
            approved = dbp.decode(wire)
            assert isinstance(approved, dbp.Approved) and approved.time_encoding is f32
            assert len(wire[2]) == 4  # the time frame as Hermes writes it
            await twin.send_multipart(
                dbp.encode(dbp.Registration(hermes_info, time.time(), f32), dbp.HERMES)
            )
            denied = await asyncio.wait_for(twin.recv_multipart(), 10 * UNIT)
            assert denied[1] == b"OmO"  # name taken, in Hermes' token

            beat = dbp.encode_datagram(dbp.Heartbeat("Rohan", time.time(), f32), dbp.HERMES)
            udp.sendto(beat)
            udp.sendto(b"\xff garbage")

            async def heard() -> bool:
                counters = catalog.core.counters
                return counters["heartbeats_udp"] >= 1 and counters["invalid_messages"] >= 1

            await async_wait_until(heard, what="the Hermes UDP heartbeat")
            (record,) = catalog.core.nodes()
            assert record.address is not None and record.state == "active"
        finally:
            udp.close()
            node.close()
            twin.close()


async def test_services_register_over_curve_and_unlisted_ones_are_denied(
    tmp_path: Path,
) -> None:
    keys, allowed = tmp_path / "keys", tmp_path / "allowed"
    catalog_public, catalog_secret = generate_keys(keys, "catalog")
    good_public, good_secret = generate_keys(keys, "good")
    _, rogue_secret = generate_keys(keys, "rogue")
    allowed.mkdir()
    (allowed / "good.key").write_bytes(good_public.read_bytes())
    async with running_catalog(
        tmp_path / "catalog", curve_secret_key=catalog_secret, curve_allowed_clients=allowed
    ) as catalog:
        services = {
            name: EchoService(
                EchoSettings(
                    data_dir=tmp_path / name,
                    node_name=name,
                    catalog_endpoint=catalog.endpoints["dbp"],
                    catalog_public_key=catalog_public,
                    curve_secret_key=secret,
                )
            )
            for name, secret in (("svc-good", good_secret), ("svc-rogue", rogue_secret))
        }
        tasks = [asyncio.create_task(s.run()) for s in services.values()]
        try:

            async def settled() -> bool:
                counters = catalog.core.counters
                return (
                    counters["registrations_approved"] >= 1
                    and counters["registrations_denied_policy"] >= 1
                )

            await async_wait_until(settled, what="one approval and one denial")
            assert [r.name for r in catalog.core.nodes()] == ["svc-good"]

            async def good_ready() -> bool:
                return services["svc-good"].readiness().get("catalog", False)

            await async_wait_until(good_ready, what="the listed service registered")
            assert services["svc-rogue"].readiness()["catalog"] is False
        finally:
            for service in services.values():
                service.request_stop()
            await asyncio.wait_for(asyncio.gather(*tasks), 20 * UNIT)


async def test_catalog_key_without_a_key_pair_is_a_config_error(tmp_path: Path) -> None:
    public, _ = generate_keys(tmp_path / "keys", "catalog")
    service = EchoService(EchoSettings(data_dir=tmp_path, catalog_public_key=public))
    with pytest.raises(ConfigError, match="catalog_public_key needs curve_secret_key"):
        await asyncio.wait_for(service.run(), 10 * UNIT)
