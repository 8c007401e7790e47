"""The event bus's Prometheus metrics (one registry per service instance), and the
publish rate the admin API reports from them."""

from __future__ import annotations

from collections import deque

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram


class BusMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.received = Counter(
            "zbus_eventbus_events_received", "Events received from publishers", registry=registry
        )
        self.stored = Counter(
            "zbus_eventbus_events_stored", "Events appended to the log", registry=registry
        )
        self.duplicates = Counter(
            "zbus_eventbus_events_duplicate",
            "Events not stored again because their UUID is in the log",
            registry=registry,
        )
        self.broadcast = Counter(
            "zbus_eventbus_events_broadcast",
            "Events sent to subscribers, by socket",
            ["socket"],
            registry=registry,
        )
        self.rejected = Counter(
            "zbus_eventbus_rejected",
            "Messages refused as malformed or unusable, by socket and reason",
            ["socket", "reason"],
            registry=registry,
        )
        self.overflows = Counter(
            "zbus_eventbus_overflows",
            "Times the bus dropped for a peer at its byte bound: each reply to a full or gone "
            "ROUTER peer, and each time a PUB subscriber filled up (ZeroMQ then drops for it "
            "until it has read half its queue)",
            ["socket"],
            registry=registry,
        )
        self.sequence = Gauge(
            "zbus_eventbus_sequence", "The last sequence number assigned", registry=registry
        )
        self.log_bytes = Gauge(
            "zbus_eventbus_log_bytes", "Size of the event log files", registry=registry
        )
        self.log_events = Gauge(
            "zbus_eventbus_log_events", "Events held in the log", registry=registry
        )
        self.peers = Gauge(
            "zbus_eventbus_connected_peers",
            "Peers connected, by socket",
            ["socket"],
            registry=registry,
        )
        self.commit_seconds = Histogram(
            "zbus_eventbus_commit_seconds",
            "Time to append one group of events to the log",
            buckets=(0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.5),
            registry=registry,
        )
        self.snapshots = Counter(
            "zbus_eventbus_snapshots",
            "Snapshot requests served, by kind",
            ["kind"],
            registry=registry,
        )
        self.snapshot_aborted = Counter(
            "zbus_eventbus_snapshots_aborted",
            "Spec snapshots abandoned because the client stopped reading",
            registry=registry,
        )
        self.retention_deleted = Counter(
            "zbus_eventbus_retention_deleted",
            "Events deleted by retention",
            registry=registry,
        )
        self.archive_events = Counter(
            "zbus_archive_events", "Events written to the archive", registry=registry
        )
        self.archive_files = Counter(
            "zbus_archive_files", "Parquet files written to the archive", registry=registry
        )
        self.archive_errors = Counter(
            "zbus_archive_errors", "Archive flushes that failed (retried)", registry=registry
        )
        self.archive_lag = Gauge(
            "zbus_archive_lag_events",
            "Events in the log not archived yet (last sequence - archived mark)",
            registry=registry,
        )
        self.archive_bad_timestamps = Counter(
            "zbus_archive_bad_timestamps",
            "Archived events whose timestamp did not parse (archived with the flush time)",
            registry=registry,
        )
        for sock in ("snapshot", "publisher", "collector", "stream"):
            self.peers.labels(sock).set(0)
            self.overflows.labels(sock)
        for sock in ("publisher", "stream"):
            self.broadcast.labels(sock)


class RateMeter:
    """Events per second over a sliding window, from (time, running total) samples.

    The admin API's publish rate, from the stored-events counter sampled every second;
    the time is passed in (monotonic seconds).
    """

    def __init__(self, window: float = 10.0) -> None:
        self.window = window
        self._samples: deque[tuple[float, float]] = deque()

    def sample(self, now: float, total: float) -> None:
        """Record the running ``total`` at ``now``; samples older than the window go."""
        self._samples.append((now, total))
        while len(self._samples) > 2 and now - self._samples[0][0] > self.window:
            self._samples.popleft()

    def rate(self) -> float:
        """The rate between the oldest and the newest sample (0 before two samples)."""
        if len(self._samples) < 2:
            return 0.0
        (t0, v0), (t1, v1) = self._samples[0], self._samples[-1]
        return (v1 - v0) / (t1 - t0) if t1 > t0 else 0.0
