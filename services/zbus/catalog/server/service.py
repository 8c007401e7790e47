"""The catalog service: DBP on a ROUTER, UDP heartbeats, the registry store, admin API.

Catalog traffic is small per node, so everything runs on the service's asyncio loop:
a reader for the ROUTER, a datagram endpoint for UDP heartbeats and a timer for the
core's deadlines. Store writes run in a worker thread and finish before the replies
that depend on them are sent.

The ROUTER is read and written without futures: its file descriptor is watched with
``loop.add_reader`` and drained with non-blocking calls, ``READS_PER_TURN`` messages a
turn. That costs a few microseconds a message instead of tens, which is what keeps an
info request's answer within a couple of milliseconds while 10,000 nodes heartbeat.
ZeroMQ's descriptor only signals changes, so after every send the socket's events are
checked again (``_poke``) and a pending read is never left unnoticed.

With a CURVE allow-list (``curve_allowed_clients``) the DBP port admits any key at the
handshake and the core checks the node's key at REGISTRATION, so a node that is not
listed gets DENIED with the reason instead of a handshake that silently fails.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import socket
from collections.abc import Callable, Coroutine, Iterator, Sequence
from typing import Any, cast

import zmq
from fastapi import FastAPI, HTTPException, Query
from prometheus_client import Counter
from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector

from zbus import dashboard
from zbus.catalog.client.discovery import BeaconSender
from zbus.catalog.core.catalog import CatalogCore
from zbus.catalog.core.model import COUNTERS, CatalogConfig, NodeRecord, Outgoing
from zbus.catalog.server.config import CatalogSettings
from zbus.catalog.server.logs import LogWindow, follow_logs
from zbus.catalog.server.store import RegistryStore, StoreError
from zbus.common.clock import Clock
from zbus.common.metrics import CountsCollector
from zbus.common.protocols import dbp
from zbus.common.protocols.errors import ProtocolError
from zbus.common.rejects import LogLimiter, reject_reason
from zbus.common.security import peer_key
from zbus.common.settings import ConfigError
from zbus.common.wire import send_frames
from zbus.dashboard import api as dashboard_api
from zbus.dashboard.cluster import ClusterTarget, admin_url, gather_cluster
from zbus.dashboard.history import History
from zbus.dashboard.proxy import AdminProxy
from zbus.dashboard.sampler import Sampler
from zbus.dashboard.supervised import merge_supervised, read_supervised
from zbus.runtime.admin import TokenRequired
from zbus.runtime.service import Service

log = logging.getLogger(__name__)

# A registration's JSON frame is refused beyond 256 KiB (the codec's MAX_JSON_FRAME_BYTES);
# ZeroMQ drops a connection whose message is longer than this.
MAX_DBP_MESSAGE_BYTES = 1024 * 1024
DBP_RCVHWM = 64

TICK_MIN = 0.05  # seconds between liveness rounds, at least
TICK_BUDGET = 64  # nodes' timers handled per loop turn (a reply waits at most that long)
BEAT_CHUNK = 32  # catalog HEARTBEATs sent per loop turn
READS_PER_TURN = 256  # ROUTER messages handled per loop turn


def record_json(record: NodeRecord, uptime: float | None) -> dict[str, Any]:
    """A node as the admin API shows it; ``uptime`` in seconds (monotonic)."""
    return {
        "name": record.name,
        "state": record.state,
        "info": record.info,
        "registered_at": record.registered_at,
        "last_heartbeat": record.last_heartbeat,
        "uptime_seconds": round(uptime or 0.0, 3),
        "heartbeat_interval": record.heartbeat_interval,
        "udp_address": record.address,
        "time_encoding": record.time_encoding.name.lower(),
    }


class _BeaconCounts(Collector):
    """``zbus_catalog_beacons_sent_total`` and ``zbus_catalog_beacon_errors_total``: the
    beacon sender's counts (one per datagram and destination), read at each scrape."""

    def __init__(self, sender: Callable[[], BeaconSender | None]) -> None:
        self.sender = sender

    def collect(self) -> Iterator[CounterMetricFamily]:
        beacon = self.sender()
        counts = beacon.counters if beacon is not None else {"sent": 0, "errors": 0}
        yield CounterMetricFamily(
            "zbus_catalog_beacons_sent", "Beacon datagrams sent", value=counts["sent"]
        )
        yield CounterMetricFamily(
            "zbus_catalog_beacon_errors",
            "Beacon datagrams the network refused to send",
            value=counts["errors"],
        )


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
        CountsCollector(
            "zbus_catalog_services",
            "Registered services, by state",
            "state",
            lambda: self.core.state_counts() if hasattr(self, "core") else {},
            self.registry,
            gauge=True,
        )
        # Read from the sender's own counts at each scrape: every beacon as it goes out.
        self.registry.register(_BeaconCounts(lambda: getattr(self, "beacon", None)))
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
        # What one connection can make the catalog hold: a frame past MAX_DBP_MESSAGE_BYTES
        # closes the connection in ZeroMQ, and at most DBP_RCVHWM messages wait per peer.
        self.router = self.bind(
            zmq.ROUTER,
            "dbp",
            s.port,
            open_zap=True,
            options={zmq.MAXMSGSIZE: MAX_DBP_MESSAGE_BYTES, zmq.RCVHWM: DBP_RCVHWM},
        )
        self._raw: zmq.Socket[Any] = zmq.Socket.shadow(self.router.underlying)
        self._read_scheduled = False
        self._flushing: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        self._timer_at = 0.0  # monotonic time (self.clock) of the timer's next round
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
            allowed_keys=self.allowed_client_keys,
        )
        clock = self.clock
        self.core = CatalogCore(config, records, now=clock.monotonic(), wall=clock.time())
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
        loop.add_reader(self._raw.FD, self._readable)
        self._poke()  # messages may have arrived before the reader was added
        log.info("registry loaded", extra={"nodes": len(records)})

    async def _send_beats(self) -> None:
        """The catalog's own HEARTBEATs, a chunk per loop turn: one per node per interval
        is 10,000 messages a second for 10,000 nodes, which must not hold up replies."""
        while True:
            await self._beats_ready.wait()
            self._beats_ready.clear()
            while self._beats:
                for _ in range(min(BEAT_CHUNK, len(self._beats))):
                    self._send(self._beats.popleft())
                self._poke()
                await asyncio.sleep(0)

    def _dispatch(self, out: Outgoing) -> None:
        if isinstance(out.command, dbp.Heartbeat):
            self._beats.append(out)  # paced out by _send_beats
            self._beats_ready.set()
        else:
            self._send(out)

    def _send(self, out: Outgoing) -> None:
        with contextlib.suppress(zmq.ZMQError):  # a node that is gone: liveness tells
            send_frames(
                self._raw, [out.identity, *dbp.encode(out.command, out.dialect)], block=False
            )

    def background(self) -> Sequence[Coroutine[Any, Any, None]]:
        tasks = [self._timer(), self._send_beats(), self.sampler.run()]
        if self.settings.eventbus_endpoint:
            curve = self.curve_client(self.settings.eventbus_public_key)
            tasks.append(follow_logs(self.settings.eventbus_endpoint, self.logs, curve=curve))
        return tasks

    def _poke(self) -> None:
        """Schedule a read turn if the ROUTER has messages (its descriptor may not say)."""
        if not self._read_scheduled and cast(int, self._raw.get(zmq.EVENTS)) & zmq.POLLIN:
            self._read_scheduled = True
            asyncio.get_running_loop().call_soon(self._readable)

    def _readable(self) -> None:
        """One read turn: up to READS_PER_TURN messages, then the replies they caused."""
        self._read_scheduled = False
        if self.stopping:
            return
        raw, core = self._raw, self.core
        now, wall = self.clock.monotonic(), self.clock.time()
        for _ in range(READS_PER_TURN):
            try:
                frames = raw.recv_multipart(zmq.NOBLOCK, copy=False)
            except zmq.Again:
                break
            identity, body = frames[0].bytes, [f.bytes for f in frames[1:]]
            try:
                cmd = dbp.decode(body)
            except ProtocolError as exc:
                self._reject("tcp", identity.hex(), exc)
                core.invalid_message()
                continue
            key = peer_key(frames[-1]) if core.config.allowed_keys is not None else None
            core.tcp_message(identity, cmd, now, wall=wall, peer_key=key)
        self._pump()
        self._poke()
        deadline = self.core.next_deadline()
        if deadline < self._timer_at:
            self._timer_at = deadline
            self._wake.set()

    def _pump(self) -> None:
        """Send what the core has to say now, unless it waits for a store write."""
        if self._flushing is not None:
            return  # the running flush sends the rest after its write, in order
        if not self.core.has_changes():
            for out in self.core.take_outbox():
                self._dispatch(out)
            return
        self._flushing = asyncio.get_running_loop().create_task(self._flush())
        self._flushing.add_done_callback(self._flushed)

    def _flushed(self, task: asyncio.Task[None]) -> None:
        self._flushing = None
        if not task.cancelled() and task.exception() is not None:
            log.error("registry flush failed", exc_info=task.exception())
            self.request_stop()
            return
        self._pump()  # what arrived during the write

    def datagram(self, data: bytes, addr: tuple[str, int]) -> None:
        try:
            cmd = dbp.decode_datagram(data)
        except ProtocolError as exc:
            self._reject("udp", f"{addr[0]}:{addr[1]}", exc)
            self.core.invalid_message()
            return
        self.core.udp_heartbeat(addr, cmd, self.clock.monotonic(), wall=self.clock.time())
        # No flush here: a heartbeat sends nothing, and the state change it may bring is
        # written by the timer's next round (at most TICK_MIN later).

    def _reject(self, transport: str, peer: str, exc: ProtocolError) -> None:
        reason = reject_reason(exc)
        self._rejected.labels(transport, reason).inc()
        if self._limiter.allow(self.clock.monotonic()):
            log.warning(
                "catalog message rejected",
                extra={"transport": transport, "peer": peer, "reason": reason, "error": str(exc)},
            )

    async def _timer(self) -> None:
        clock = self.clock
        while True:
            # Liveness work grows with the number of nodes: run it at most every TICK_MIN
            # seconds (every change due by then is applied in one round), at least once a
            # second; a round takes turns of TICK_BUDGET nodes with replies in between.
            now = clock.monotonic()
            delay = self.core.next_deadline() - now
            self._timer_at = now + min(max(delay, TICK_MIN), 1.0)
            await asyncio.sleep(TICK_MIN)
            with contextlib.suppress(TimeoutError):
                # Woken early by a registration whose first deadline comes sooner.
                await asyncio.wait_for(self._wake.wait(), self._timer_at - clock.monotonic())
            self._wake.clear()
            now, wall = clock.monotonic(), clock.time()
            while self.core.tick(now, TICK_BUDGET, wall=wall):
                self._pump()
                await asyncio.sleep(0)
            self._pump()

    async def _flush(self) -> None:
        # One flush at a time: the store has one writer connection, and replies must not
        # overtake the write of the changes they announce.
        async with self._flush_lock:
            while changes := self.core.take_changes():
                await asyncio.to_thread(self.store.write, changes)
            for out in self.core.take_outbox():
                self._dispatch(out)

    async def close(self) -> None:
        # After a failed start, only what the start got is there to release.
        if hasattr(self, "_raw"):
            asyncio.get_running_loop().remove_reader(self._raw.FD)
            if self._flushing is not None:
                await asyncio.gather(self._flushing, return_exceptions=True)
        if hasattr(self, "core"):
            with contextlib.suppress(StoreError):
                await self._flush()  # what the last turns changed
            if self.beacon is not None:
                await self.beacon.stop()  # its last beacon says the catalog is leaving
        if hasattr(self, "udp"):
            self.udp.close()
        if hasattr(self, "store"):
            await asyncio.to_thread(self.store.close)

    def add_routes(self, app: FastAPI) -> None:
        @app.get("/api/v1/services", tags=["services"])
        async def services() -> dict[str, Any]:
            """Every registered service with its state, endpoints and last heartbeat."""
            now = self.clock.monotonic()
            return {
                "services": [
                    record_json(r, self.core.uptime(r.name, now)) for r in self.core.nodes()
                ]
            }

        @app.delete("/api/v1/services/{name}", dependencies=[TokenRequired], tags=["services"])
        async def deregister(name: str) -> dict[str, Any]:
            """Remove a service from the catalog; it is told (DISCONNECT) and may register
            again."""
            if not self.core.deregister(name, wall=self.clock.time()):
                raise HTTPException(404, f"no service {name!r} is registered")
            await self._flush()
            return {"name": name, "deregistered": True}

        @app.get("/api/v1/services/{name}", tags=["services"])
        async def service(name: str) -> dict[str, Any]:
            now = self.clock.monotonic()
            for record in self.core.nodes():
                if record.name == name:
                    return record_json(record, self.core.uptime(name, now))
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

        @app.get("/api/v1/cluster", tags=["cluster"])
        async def cluster() -> dict[str, Any]:
            """The catalog and every registered service as its own admin API describes
            it (``/api/v1/info`` and ``/readyz``, asked concurrently by the catalog); a
            service that does not answer has an ``error`` instead."""
            now = self.clock.time()
            checks = self.readiness()
            catalog = {
                **self.info(),
                "ready": all(checks.values()),
                "checks": checks,
                "figures": self.figures(),
            }
            services = await gather_cluster(self.cluster_targets())
            supervised = read_supervised(self.settings.launcher_state)
            return {
                "time": now,
                "catalog": catalog,
                "services": merge_supervised(catalog, services, supervised),
                "supervised": supervised is not None,
            }

        # Called by the base class's constructor: the dashboard's parts are made here.
        self.history = History(self.settings.history_interval)
        self.proxy = AdminProxy(self.cluster_targets, self.registry, clock=self.clock)
        self.sampler = Sampler(
            self.history, self.cluster_targets, self.registry.collect, clock=self.clock
        )
        dashboard.mount(app)
        dashboard_api.add_routes(app, self.history, self.proxy, TokenRequired)

    def cluster_targets(self) -> list[ClusterTarget]:
        """Every registered service and the admin URL to ask it at."""
        return [
            ClusterTarget(r.name, r.state, admin_url(r.info, r.address)) for r in self.core.nodes()
        ]

    def figures(self) -> dict[str, Any]:
        """The catalog's own counts for the dashboard: services by state, DBP events by
        kind (heartbeats among them), beacons, and the liveness settings."""
        sender: BeaconSender | None = getattr(self, "beacon", None)
        beacon = sender.counters if sender is not None else None
        return {
            "services": self.core.state_counts(),
            "events": dict(self.core.counters),
            "heartbeat_interval": self.settings.heartbeat_interval,
            "heartbeat_misses": self.settings.heartbeat_misses,
            "beacon": None
            if beacon is None
            else {
                "sent": beacon["sent"],
                "errors": beacon["errors"],
                "interval": sender.interval if sender is not None else None,
                "endpoint": self.endpoints.get("beacon"),
                "format": self.settings.beacon_format,
            },
        }

    def _query_logs(
        self, service: str | None, level: str | None, text: str | None, limit: int
    ) -> list[dict[str, Any]]:
        try:
            return self.logs.query(service or None, level, text, limit)
        except ValueError as exc:
            raise HTTPException(422, str(exc)) from None
