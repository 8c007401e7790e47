"""What an event bus replica adds to the service (ADR 0009): the shared state, the
thread that talks to etcd, the pipeline's replication link, the metrics, and
``GET /api/v1/replication``.

Replication is on when ``ZBUS_REPLICA_NAME`` is set (:mod:`zbus.replication.settings`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import zmq
from fastapi import FastAPI
from prometheus_client import CollectorRegistry

from zbus.common.clock import Clock
from zbus.eventbus.server.config import EventBusSettings
from zbus.eventbus.server.replication import ReplicationLink
from zbus.eventbus.server.store import SqliteEventLog
from zbus.replication.core import Lease
from zbus.replication.etcd import Coordinator
from zbus.replication.metrics import ReplicationMetrics
from zbus.replication.node import CoordinationThread, ReplicaState

LEASE_MARGIN = 0.5  # seconds the leader stops before its lease could run out in etcd


@dataclass
class ReplicaParts:
    state: ReplicaState
    link: ReplicationLink
    thread: CoordinationThread | None = None

    @classmethod
    def build(
        cls,
        settings: EventBusSettings,
        store: SqliteEventLog,
        ctx: zmq.Context[Any],
        registry: CollectorRegistry,
        clock: Clock,
    ) -> ReplicaParts:
        assert settings.replica_name is not None
        state = ReplicaState(
            settings.replica_name,
            settings.data_dir,
            Lease(float(settings.lease_ttl), LEASE_MARGIN),
        )
        metrics = ReplicationMetrics(registry, state)
        link = ReplicationLink(ctx, settings, store, state, metrics, clock)
        return cls(state, link)

    def coordination(
        self, settings: EventBusSettings, endpoints: dict[str, str], clock: Clock
    ) -> CoordinationThread:
        """The thread that campaigns and follows, once the bus's sockets are bound (the
        caller starts it: its leader key carries ``endpoints``)."""
        assert settings.replica_name is not None
        # Where the others reach this replica: the host of its own ZBUS_REPLICAS entry,
        # not the address it binds (0.0.0.0 in a container).
        me = next(p for p in settings.peers() if p.name == settings.replica_name)
        host = me.endpoint.removeprefix("tcp://").rsplit(":", 1)[0]
        endpoints = {
            name: f"tcp://{host}:{ep.rsplit(':', 1)[1]}" if ep.startswith("tcp://") else ep
            for name, ep in endpoints.items()
        }
        coordinator = Coordinator(
            settings.etcd(),
            settings.replication_group,
            settings.replica_name,
            lease_ttl=settings.lease_ttl,
            timeout=min(1.0, settings.lease_ttl / 4),
        )
        self.thread = CoordinationThread(
            self.state, coordinator, endpoints, clock, lease_ttl=float(settings.lease_ttl)
        )
        return self.thread

    def stop(self) -> None:
        if self.thread is not None:
            self.thread.stop()
            with contextlib.suppress(RuntimeError):
                self.thread.join(5)

    def view(self) -> dict[str, Any]:
        with self.state.lock:
            v = self.state.view
            return {
                "name": self.state.name,
                "role": v.role,
                "epoch": v.epoch,
                "leader": v.leader,
                "log_end": v.log_end,
                "high_watermark": v.hwm,
                "in_sync": list(v.in_sync),
                "lag": dict(v.lag),
                "etcd": "ok" if self.state.coordination_ok else "unreachable",
                "last_error": v.last_error,
            }


def add_route(app: FastAPI, replica: Callable[[], ReplicaParts | None]) -> None:
    @app.get("/api/v1/replication", tags=["replication"])
    async def replication() -> dict[str, Any]:
        """This replica's role, epoch, leader, log end, high watermark, the in-sync set
        and each follower's lag (on the leader). One replica, no group: ``role`` is
        ``"single"``."""
        parts = replica()
        if parts is None:
            return {
                "name": None,
                "role": "single",
                "epoch": 0,
                "leader": None,
                "log_end": None,
                "high_watermark": None,
                "in_sync": [],
                "lag": {},
            }
        return parts.view()
