"""The event bus clients, log shipping and log aggregation against a bus that runs CURVE.

The bus (in process, on the test's loop) has a secret key and a ZAP allow-list; its
clients take ``curve=(their key pair, the bus's public key)``. Blocking clients run in a
worker thread so that the bus's loop keeps running.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.bus import bus_on_base_port, running_bus
from tests.support.catalog import running_catalog
from tests.support.ports import HeldPorts
from tests.support.waiting import UNIT, async_wait_until
from zbus.common.security import KeyPair, generate_keys, load_keys
from zbus.common.settings import ConfigError
from zbus.eventbus.client import (
    AsyncEventBusClient,
    BusEndpoints,
    Event,
    EventBusClient,
    LogReader,
)
from zbus.runtime.logship import LOG_TOPIC_PREFIX, LogShipper

# The failover test's heartbeat interval: a silent endpoint is left after 3 of them.
# Elsewhere the default (1 s x 3): a subscription whose stream socket could not pass the
# handshake would fail over and be counted, so the tests check it never does.
BEAT = 0.5
REPO = Path(__file__).resolve().parents[3]


@dataclass(frozen=True)
class Keys:
    """The bus's key files, its allow-list, and one listed and one unlisted client."""

    bus_secret: Path
    bus_public: Path
    allowed: Path
    listed_secret: Path
    listed: KeyPair
    unlisted: KeyPair

    def curve(self, pair: KeyPair) -> tuple[KeyPair, bytes]:
        return pair, load_keys(self.bus_public).public

    @property
    def bus_settings(self) -> dict[str, Any]:
        return {"curve_secret_key": self.bus_secret, "curve_allowed_clients": self.allowed}


@pytest.fixture
def keys(tmp_path: Path) -> Keys:
    directory, allowed = tmp_path / "keys", tmp_path / "allowed"
    bus_public, bus_secret = generate_keys(directory, "eventbus")
    listed_public, listed_secret = generate_keys(directory, "listed")
    _, unlisted_secret = generate_keys(directory, "unlisted")
    allowed.mkdir()
    (allowed / listed_public.name).write_bytes(listed_public.read_bytes())
    return Keys(
        bus_secret,
        bus_public,
        allowed,
        listed_secret,
        load_keys(listed_secret),
        load_keys(unlisted_secret),
    )


def _last_sequence(ends: BusEndpoints, curve: tuple[KeyPair, bytes]) -> int:
    with LogReader(ends, timeout=10 * UNIT, curve=curve) as reader:
        return reader.last_sequence()


async def test_a_listed_blocking_client_publishes_and_subscribes(
    tmp_path: Path, keys: Keys
) -> None:
    async with running_bus(tmp_path / "bus", **keys.bus_settings) as bus:
        ends = BusEndpoints.from_info(bus.info())

        def dialog() -> tuple[int | None, int | None, list[Event], int]:
            curve = keys.curve(keys.listed)
            with EventBusClient(ends, producer="listed", curve=curve) as client:
                first = client.publish("/curve/a", {"n": 1}, confirm=True, timeout=10 * UNIT)
                with client.subscribe("/curve/") as sub:
                    snapshot = sub.next(10 * UNIT)
                    second = client.publish("/curve/b", b"live", confirm=True, timeout=10 * UNIT)
                    live = sub.next(10 * UNIT)
                    assert snapshot is not None and live is not None
                    return first, second, [snapshot, live], sub.failovers

        first, second, events, failovers = await asyncio.to_thread(dialog)
        assert [(e.seq, e.topic, e.producer) for e in events] == [
            (first, "/curve/a", "listed"),
            (second, "/curve/b", "listed"),
        ]
        assert events[0].unpack() == {"n": 1} and events[1].data == b"live"
        assert failovers == 0  # the live event came on the stream socket


async def test_a_listed_async_client_publishes_and_subscribes(tmp_path: Path, keys: Keys) -> None:
    async with (
        running_bus(tmp_path / "bus", **keys.bus_settings) as bus,
        AsyncEventBusClient(
            BusEndpoints.from_info(bus.info()), producer="listed", curve=keys.curve(keys.listed)
        ) as client,
    ):
        first = await client.publish("/curve/a", [1, 2], confirm=True, timeout=10 * UNIT)
        async with await client.subscribe("/curve/") as sub:
            snapshot = await sub.next(10 * UNIT)
            second = await client.publish("/curve/b", b"live", confirm=True, timeout=10 * UNIT)
            live = await sub.next(10 * UNIT)
            assert sub.failovers == 0
        assert snapshot is not None and live is not None
        assert (snapshot.seq, snapshot.topic, snapshot.unpack()) == (first, "/curve/a", [1, 2])
        assert (live.seq, live.topic, live.data) == (second, "/curve/b", b"live")


async def test_sockets_recreated_on_failover_speak_curve(
    tmp_path: Path, keys: Keys, refused_ports: HeldPorts
) -> None:
    # Four ports nothing listens on: a client starting there fails over.
    dead = BusEndpoints.from_base(f"tcp://127.0.0.1:{refused_ports.port}")
    """The first endpoints are dead: publishing moves on to the bus, and so does the
    subscription; the sockets opened there must pass the bus's CURVE handshake, the
    stream's too (a live event, no second failover)."""
    async with running_bus(tmp_path / "bus", heartbeat_interval=BEAT, **keys.bus_settings) as bus:
        ends = [dead, BusEndpoints.from_info(bus.info())]
        async with AsyncEventBusClient(
            ends, producer="listed", heartbeat_interval=BEAT, curve=keys.curve(keys.listed)
        ) as client:
            first = await client.publish("/curve/x", b"x", confirm=True, timeout=1 * UNIT)
            async with await client.subscribe("/curve/") as sub:
                snapshot = await sub.next(10 * UNIT)
                second = await client.publish("/curve/y", b"y", confirm=True, timeout=10 * UNIT)
                live = await sub.next(10 * UNIT)
                assert sub.failovers == 1 and sub.endpoints == ends[1]
        assert snapshot is not None and (snapshot.seq, snapshot.topic) == (first, "/curve/x")
        assert live is not None and (live.seq, live.topic) == (second, "/curve/y")


async def test_a_listed_log_reader_pages_the_log(tmp_path: Path, keys: Keys) -> None:
    async with running_bus(tmp_path / "bus", **keys.bus_settings) as bus:
        ends = BusEndpoints.from_info(bus.info())
        curve = keys.curve(keys.listed)
        async with AsyncEventBusClient(ends, producer="listed", curve=curve) as client:
            items = [(f"/curve/{i}", {"i": i}) for i in range(5)]
            seqs = await client.publish_many(items, confirm=True, timeout=10 * UNIT)

        def read() -> list[Event]:
            with LogReader(ends, timeout=10 * UNIT, curve=curve) as reader:
                first = reader.page("/curve/", after=0, limit=3)
                assert first.next_after is not None
                rest = reader.page("/curve/", after=first.next_after, limit=3)
                assert rest.next_after is None
                return first.events + rest.events

        events = await asyncio.to_thread(read)
        assert [(e.seq, e.topic, e.unpack()) for e in events] == [
            (s, t, d) for s, (t, d) in zip(seqs or [], items, strict=True)
        ]


async def test_an_unlisted_client_is_not_heard(tmp_path: Path, keys: Keys) -> None:
    async with running_bus(tmp_path / "bus", **keys.bus_settings) as bus:
        ends = BusEndpoints.from_info(bus.info())
        unlisted = keys.curve(keys.unlisted)

        def publish() -> None:
            with EventBusClient(ends, producer="intruder", curve=unlisted) as client:
                client.publish("/curve/intruder", b"x", confirm=True, timeout=0.5 * UNIT)

        with pytest.raises(TimeoutError):
            await asyncio.to_thread(publish)
        async with AsyncEventBusClient(ends, producer="intruder", curve=unlisted) as client:
            with pytest.raises(TimeoutError):
                await client.publish("/curve/intruder", b"x", confirm=True, timeout=0.5 * UNIT)

        def read() -> None:
            with LogReader(ends, timeout=0.5 * UNIT, curve=unlisted) as reader:
                reader.page()

        with pytest.raises(TimeoutError):
            await asyncio.to_thread(read)
        # Nothing was stored: the listed client sees an empty log.
        assert await asyncio.to_thread(_last_sequence, ends, keys.curve(keys.listed)) == 0


def test_a_key_pair_without_its_secret_is_refused(keys: Keys) -> None:
    public_only = keys.curve(KeyPair(keys.listed.public, None))
    with pytest.raises(ConfigError, match="secret key"):
        EventBusClient("tcp://127.0.0.1:5556", producer="p", curve=public_only)
    with pytest.raises(ConfigError, match="secret key"):
        AsyncEventBusClient("tcp://127.0.0.1:5556", producer="p", curve=public_only)
    with pytest.raises(ConfigError, match="secret key"):
        LogReader("tcp://127.0.0.1:5556", curve=public_only)
    with pytest.raises(ConfigError, match="secret key"):
        LogShipper("svc", "tcp://127.0.0.1:5556", curve=public_only)


async def test_a_service_ships_its_logs_to_a_curve_bus(tmp_path: Path, keys: Keys) -> None:
    """An echo service process with its own listed key ships "service ready" to the bus."""
    async with bus_on_base_port(tmp_path / "bus", **keys.bus_settings) as base:
        env = {
            **os.environ,
            "ZBUS_DATA_DIR": str(tmp_path / "echo"),
            "ZBUS_EVENTBUS_ENDPOINT": base,
            "ZBUS_EVENTBUS_PUBLIC_KEY": str(keys.bus_public),
            "ZBUS_CURVE_SECRET_KEY": str(keys.listed_secret),
        }
        output = tmp_path / "echo.out"
        with output.open("wb") as out:
            proc = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "tests.support.echo_service",
                cwd=REPO,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        try:
            reader = LogReader(base, timeout=10 * UNIT, curve=keys.curve(keys.listed))

            async def shipped() -> bool:
                if proc.returncode is not None:
                    raise AssertionError(f"echo exited {proc.returncode}: {output.read_text()}")
                page = await asyncio.to_thread(reader.page, LOG_TOPIC_PREFIX)
                return any(
                    e.topic == f"{LOG_TOPIC_PREFIX}echo" and e.unpack()["msg"] == "service ready"
                    for e in page.events
                )

            try:
                await async_wait_until(shipped, what="the echo service's shipped log line")
            finally:
                reader.close()
        finally:
            if proc.returncode is None:
                proc.send_signal(signal.SIGTERM)
            try:
                code = await asyncio.wait_for(proc.wait(), 20 * UNIT)
            except TimeoutError:
                proc.kill()
                await proc.wait()
                raise
        assert code == 0, output.read_text()


async def test_the_catalog_follows_logs_on_a_curve_bus(tmp_path: Path, keys: Keys) -> None:
    """The catalog (its key listed at the bus) subscribes to the logs over CURVE."""
    catalog_public, catalog_secret = generate_keys(tmp_path / "keys", "catalog")
    (keys.allowed / catalog_public.name).write_bytes(catalog_public.read_bytes())
    async with (
        bus_on_base_port(tmp_path / "bus", **keys.bus_settings) as base,
        running_catalog(
            tmp_path / "catalog",
            eventbus_endpoint=base,
            eventbus_public_key=keys.bus_public,
            curve_secret_key=catalog_secret,
        ) as catalog,
    ):
        shipper = LogShipper("curvy", base, curve=keys.curve(keys.listed))
        try:
            shipper.emit(
                logging.LogRecord(
                    "curvy", logging.INFO, __file__, 1, "hello over curve", None, None
                )
            )

            async def served() -> bool:
                async with httpx.AsyncClient(base_url=catalog.admin_url or "") as http:
                    reply = await http.get("/api/v1/services/curvy/logs")
                return [r["msg"] for r in reply.json()["logs"]] == ["hello over curve"]

            await async_wait_until(served, what="the record in the catalog")
        finally:
            shipper.close(timeout=5 * UNIT)
        assert shipper.failed == 0
