"""The catalog service: DBP on a ROUTER, UDP heartbeats, the registry store, admin API.

Catalog traffic is small per node, so everything runs on the service's asyncio loop:
a reader for the ROUTER, a datagram endpoint for UDP heartbeats and a timer for the
core's deadlines. Store writes run in a worker thread and finish before the replies
that depend on them are sent.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import socket
import time
from collections.abc import Coroutine, Sequence
from typing import Any

import zmq
from fastapi import FastAPI, HTTPException, Query
from prometheus_client import Counter, Gauge

from services.catalog.config import CatalogSettings
from services.catalog.core import CatalogCore
from services.catalog.discovery import BeaconSender
from services.catalog.logs import LogWindow, follow_logs
from services.catalog.model import COUNTERS, CatalogConfig, NodeRecord, Outgoing
from services.catalog.store import RegistryStore, StoreError
from services.common.admin import TokenRequired
from services.common.clock import Clock
from services.common.metrics import CountsCollector
from services.common.protocols import dbp
from services.common.protocols.errors import ProtocolError
from services.common.rejects import LogLimiter, reject_reason
from services.common.service import Service
from services.common.settings import ConfigError

log = logging.getLogger(__name__)

TICK_MIN = 0.05  # seconds between liveness rounds, at least
BEAT_CHUNK = 64  # catalog HEARTBEATs sent per loop turn


def record_json(record: NodeRecord, now: float) -> dict[str, Any]:
    return {
        "name": record.name,
        "state": record.state,
        "info": record.info,
        "registered_at": record.registered_at,
        "last_heartbeat": record.last_heartbeat,
        "uptime_seconds": round(max(0.0, now - record.registered_at), 3),
        "heartbeat_interval": record.heartbeat_interval,
        "udp_address": record.address,
        "time_encoding": record.time_encoding.name.lower(),
    }


class _Heartbeats(asyncio.DatagramProtocol):
    def __init__(self, service: CatalogService) -> None:
        self.service = service

    def datagram_received(self, data: bytes, addr: tuple[str | Any, int]) -> None:
        self.service.datagram(data, (str(addr[0]), int(addr[1])))


class CatalogService(Service):
    name = "catalog"

    def __init__(self, settings: CatalogSettings, *, clock: Clock | None = None) -> None:
        super().__init__(settings, clock=clock)
        self.settings: CatalogSettings = settings
        self._limiter = LogLimiter()
        CountsCollector(
            "zbus_catalog_events",
            "Catalog events, by kind",
            "event",
            lambda: self.core.counters if hasattr(self, "core") else dict.fromkeys(COUNTERS, 0),
            self.registry,
        )
        self._rejected = Counter(
            "zbus_catalog_rejected",
            "Messages refused as malformed, by transport and reason",
            ["transport", "reason"],
            registry=self.registry,
        )
        self._states = Gauge(
            "zbus_catalog_services",
            "Registered services, by state",
            ["state"],
            registry=self.registry,
        )
        self._beacons = Counter("zbus_catalog_beacons_sent", "Beacons sent", registry=self.registry)
        self._beacons_seen = 0
        self._flush_lock = asyncio.Lock()
        self._beats: collections.deque[Outgoing] = collections.deque()
        self._beats_ready = asyncio.Event()
        self.logs = LogWindow(settings.log_window)

    async def start(self) -> None:
        s = self.settings
        try:
            self.store = await asyncio.to_thread(RegistryStore, s.data_dir / "registry.db")
            records = await asyncio.to_thread(self.store.load)
        except StoreError as exc:
            raise ConfigError(str(exc)) from None
        self.router = self.bind(zmq.ROUTER, "dbp", s.port)
        loop = asyncio.get_running_loop()
        try:
            self.udp, _ = await loop.create_datagram_endpoint(
                lambda: _Heartbeats(self), local_addr=(s.host, s.udp_port)
            )
            # Room for a second of heartbeats from many nodes while the loop is busy.
            with contextlib.suppress(OSError):
                self.udp.get_extra_info("socket").setsockopt(
                    socket.SOL_SOCKET, socket.SO_RCVBUF, 8 * 1024 * 1024
                )
        except OSError as exc:
            raise ConfigError(f"cannot bind UDP heartbeat port {s.udp_port}: {exc}") from None
        udp_port = self.udp.get_extra_info("sockname")[1]
        self.endpoints["heartbeats"] = f"udp://{s.host}:{udp_port}"
        config = CatalogConfig(
            heartbeat_interval=s.heartbeat_interval,
            heartbeat_misses=s.heartbeat_misses,
            grace=s.grace,
            udp_port=udp_port,
            allowed_names=s.allowed(),
        )
        self.core = CatalogCore(config, records, now=self.clock.time())
        self.beacon: BeaconSender | None = None
        if s.beacon_port:
            tcp_port = int(self.endpoints["dbp"].rsplit(":", 1)[1])
            self.beacon = BeaconSender(
                tcp_port,
                addresses=s.beacon_targets(),
                beacon_port=s.beacon_port,
                dialect=dbp.HERMES if s.beacon_format == "shalom" else dbp.SPEC,
                host="" if s.host in ("0.0.0.0", "::") else s.host,
            )
            await self.beacon.start()
            self.endpoints["beacon"] = f"udp://{','.join(s.beacon_targets())}:{s.beacon_port}"
        await self._flush()
        log.info("registry loaded", extra={"nodes": len(records)})

    async def _send_beats(self) -> None:
        """The catalog's own HEARTBEATs, a chunk per loop turn: one per node per interval
        is 10,000 messages a second for 10,000 nodes, which must not hold up replies."""
        while True:
            await self._beats_ready.wait()
            self._beats_ready.clear()
            while self._beats:
                for _ in range(min(BEAT_CHUNK, len(self._beats))):
                    await self._send(self._beats.popleft())
                await asyncio.sleep(0)

    async def _send(self, out: Outgoing) -> None:
        with contextlib.suppress(zmq.ZMQError):  # a node that is gone: liveness tells
            await self.router.send_multipart(
                [out.identity, *dbp.encode(out.command, out.dialect)], zmq.NOBLOCK
            )

    def background(self) -> Sequence[Coroutine[Any, Any, None]]:
        tasks = [self._read(), self._timer(), self._send_beats()]
        if self.settings.eventbus_endpoint:
            tasks.append(follow_logs(self.settings.eventbus_endpoint, self.logs))
        return tasks

    async def _read(self) -> None:
        while True:
            frames = await self.router.recv_multipart()
            identity, body = frames[0], frames[1:]
            try:
                cmd = dbp.decode(body)
            except ProtocolError as exc:
                self._reject("tcp", identity.hex(), exc)
                self.core.invalid_message()
                continue
            self.core.tcp_message(identity, cmd, self.clock.time())
            await self._flush()

    def datagram(self, data: bytes, addr: tuple[str, int]) -> None:
        try:
            cmd = dbp.decode_datagram(data)
        except ProtocolError as exc:
            self._reject("udp", f"{addr[0]}:{addr[1]}", exc)
            self.core.invalid_message()
            return
        self.core.udp_heartbeat(addr, cmd, self.clock.time())
        # No flush here: a heartbeat sends nothing, and the state change it may bring is
        # written by the timer's next round (at most TICK_MIN later).

    def _reject(self, transport: str, peer: str, exc: ProtocolError) -> None:
        reason = reject_reason(exc)
        self._rejected.labels(transport, reason).inc()
        if self._limiter.allow(time.time()):
            log.warning(
                "catalog message rejected",
                extra={"transport": transport, "peer": peer, "reason": reason, "error": str(exc)},
            )

    async def _timer(self) -> None:
        next_gauges = 0.0
        while True:
            # Liveness work grows with the number of nodes: run it at most every TICK_MIN
            # seconds (every change due by then is applied in one round), at least once a
            # second.
            delay = self.core.next_deadline() - self.clock.time()
            await asyncio.sleep(min(max(delay, TICK_MIN), 1.0))
            now = self.clock.time()
            self.core.tick(now)
            await self._flush()
            if now >= next_gauges:
                next_gauges = now + 1.0
                self._gauges()

    async def _flush(self) -> None:
        # One flush at a time: the store has one writer connection, and replies must not
        # overtake the write of the changes they announce.
        async with self._flush_lock:
            changes = self.core.take_changes()
            if changes:
                await asyncio.to_thread(self.store.write, changes)
            for out in self.core.take_outbox():
                if isinstance(out.command, dbp.Heartbeat):
                    self._beats.append(out)  # paced out by _send_beats
                    continue
                await self._send(out)
            if self._beats:
                self._beats_ready.set()
        if self.beacon is not None:
            sent = self.beacon.counters["sent"]
            self._beacons.inc(sent - self._beacons_seen)
            self._beacons_seen = sent

    def _gauges(self) -> None:
        counts: dict[str, int] = {"active": 0, "late": 0, "inactive": 0}
        for record in self.core.nodes():
            counts[record.state] = counts.get(record.state, 0) + 1
        for state, count in counts.items():
            self._states.labels(state).set(count)

    async def close(self) -> None:
        if self.beacon is not None:
            await self.beacon.stop()  # its last beacon says the catalog is leaving
        self.udp.close()
        await asyncio.to_thread(self.store.close)

    def add_routes(self, app: FastAPI) -> None:
        @app.get("/api/v1/services", tags=["services"])
        async def services() -> dict[str, Any]:
            """Every registered service with its state, endpoints and last heartbeat."""
            now = self.clock.time()
            return {"services": [record_json(r, now) for r in self.core.nodes()]}

        @app.delete("/api/v1/services/{name}", dependencies=[TokenRequired], tags=["services"])
        async def deregister(name: str) -> dict[str, Any]:
            """Remove a service from the catalog; it is told (DISCONNECT) and may register
            again."""
            if not self.core.deregister(name, self.clock.time()):
                raise HTTPException(404, f"no service {name!r} is registered")
            await self._flush()
            return {"name": name, "deregistered": True}

        @app.get("/api/v1/services/{name}", tags=["services"])
        async def service(name: str) -> dict[str, Any]:
            now = self.clock.time()
            for record in self.core.nodes():
                if record.name == name:
                    return record_json(record, now)
            raise HTTPException(404, f"no service {name!r} is registered")

        @app.get("/api/v1/logs", tags=["logs"])
        async def logs(
            service: str | None = None,
            level: str | None = None,
            text: str | None = None,
            limit: int = Query(100, ge=1, le=10_000),
        ) -> dict[str, Any]:
            """Recent log records across the cluster, newest first (``level``: minimum)."""
            return {
                "logs": self._query_logs(service, level, text, limit),
                "services": self.logs.services(),
            }

        @app.get("/api/v1/services/{name}/logs", tags=["logs"])
        async def service_logs(
            name: str,
            level: str | None = None,
            text: str | None = None,
            limit: int = Query(100, ge=1, le=10_000),
        ) -> dict[str, Any]:
            """Recent log records of one service, newest first (``level``: minimum)."""
            return {"service": name, "logs": self._query_logs(name, level, text, limit)}

    def _query_logs(
        self, service: str | None, level: str | None, text: str | None, limit: int
    ) -> list[dict[str, Any]]:
        try:
            return self.logs.query(service or None, level, text, limit)
        except ValueError as exc:
            raise HTTPException(422, str(exc)) from None
