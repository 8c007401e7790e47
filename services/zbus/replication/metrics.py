"""A replica's metrics, ``zbus_replication_*``: what ``GET /api/v1/replication`` shows,
and what happened (elections, refusals, truncations)."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Counter
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from zbus.replication.node import ReplicaState

ROLES = ("leader", "follower", "candidate")


class ReplicationMetrics:
    def __init__(self, registry: CollectorRegistry, state: ReplicaState) -> None:
        self.elections = Counter(
            "zbus_replication_elections", "Times this replica became leader", registry=registry
        )
        self.served = Counter(
            "zbus_replication_batches_served",
            "Stored batches sent to followers",
            registry=registry,
        )
        self.rejected = Counter(
            "zbus_replication_rejected",
            "Replication frames refused or dropped, by reason",
            ["reason"],
            registry=registry,
        )
        self.unconfirmed = Counter(
            "zbus_replication_unconfirmed",
            "Commits whose confirms were refused: not passed by the in-sync replicas in "
            "time, or the leadership ended first",
            registry=registry,
        )
        self.truncated = Counter(
            "zbus_replication_truncated_events",
            "Events a follower truncated: a deposed leader's tail",
            registry=registry,
        )
        self.forwarded = Counter(
            "zbus_replication_forwarded_events",
            "Unconfirmed writes a follower sent on to the leader",
            registry=registry,
        )
        self.forward_dropped = Counter(
            "zbus_replication_forward_dropped_events",
            "Unconfirmed writes a follower dropped: no leader known, or its queue full",
            registry=registry,
        )
        registry.register(_StateCollector(state))


class _StateCollector(Collector):
    def __init__(self, state: ReplicaState) -> None:
        self.state = state

    def collect(self) -> Iterator[GaugeMetricFamily]:
        with self.state.lock:
            v = self.state.view
            role, epoch, log_end, hwm = v.role, v.epoch, v.log_end, v.hwm
            in_sync, lag = len(v.in_sync), dict(v.lag)
        roles = GaugeMetricFamily(
            "zbus_replication_role", "1 for this replica's role", labels=["role"]
        )
        for r in ROLES:
            roles.add_metric([r], 1.0 if r == role else 0.0)
        yield roles
        yield GaugeMetricFamily("zbus_replication_epoch", "The epoch followed", value=epoch)
        yield GaugeMetricFamily("zbus_replication_log_end", "Last sequence held", value=log_end)
        yield GaugeMetricFamily(
            "zbus_replication_high_watermark", "Last sequence the in-sync set holds", value=hwm
        )
        yield GaugeMetricFamily(
            "zbus_replication_in_sync", "Replicas in the in-sync set", value=in_sync
        )
        lags = GaugeMetricFamily(
            "zbus_replication_lag_events",
            "A follower's events behind the leader (on the leader)",
            labels=["replica"],
        )
        for name, n in lag.items():
            lags.add_metric([name], float(n))
        yield lags
