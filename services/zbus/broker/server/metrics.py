"""The broker's Prometheus metrics, fed from the core's counters and job transitions."""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from zbus.broker.core.interface import COUNTERS
from zbus.broker.core.model import Job, JobState
from zbus.common.metrics import CountsCollector


class BrokerMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.events: dict[str, int] = dict.fromkeys(COUNTERS, 0)
        CountsCollector(
            "zbus_broker_events",
            "Broker events, by kind (requests, dispatched, retried, workers_expired, ...)",
            "event",
            lambda: self.events,
            registry,
        )
        self.jobs = Counter(
            "zbus_broker_jobs",
            "Job transitions per queue: submitted, started, succeeded, failed, retried, "
            "dead, cancelled",
            ["queue", "transition"],
            registry=registry,
        )
        self.duration = Histogram(
            "zbus_broker_job_duration_seconds",
            "Time from hand-off to a worker until the job finished",
            ["queue"],
            buckets=(0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 30, 120, 600),
            registry=registry,
        )
        self.depth = Gauge(
            "zbus_broker_queue_depth",
            "Jobs per queue and state (ready, waiting, running)",
            ["queue", "state"],
            registry=registry,
        )
        self.workers = Gauge(
            "zbus_broker_workers_connected", "Workers registered", registry=registry
        )
        self.rejected = Counter(
            "zbus_broker_rejected",
            "Messages refused as malformed or unusable, by port and reason",
            ["port", "reason"],
            registry=registry,
        )
        self.commit_seconds = Histogram(
            "zbus_broker_commit_seconds",
            "Time to write one round of job changes",
            buckets=(0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.5),
            registry=registry,
        )
        self._states: dict[str, JobState] = {}

    def transition_totals(self) -> dict[str, dict[str, int]]:
        """Job transitions since the start, by queue then transition (what rates are
        computed from: ``submitted`` in, ``succeeded`` + ``failed`` + ``dead`` +
        ``cancelled`` out)."""
        out: dict[str, dict[str, int]] = {}
        for family in self.jobs.collect():
            for sample in family.samples:
                if sample.name.endswith("_total"):
                    queue = out.setdefault(sample.labels["queue"], {})
                    queue[sample.labels["transition"]] = int(sample.value)
        return out

    def counters(self, values: dict[str, int]) -> None:
        """Export the core's running counts (read at scrape time)."""
        self.events = values

    def transitions(self, jobs: list[Job]) -> None:
        """Count per-queue transitions from the changed jobs of one round: each counter
        is added to once a round (a labelled child costs a lookup and a lock)."""
        states = self._states
        counts: dict[tuple[str, str], int] = {}
        durations: list[tuple[str, float]] = []

        def count(queue: str, transition: str) -> None:
            key = (queue, transition)
            counts[key] = counts.get(key, 0) + 1

        for job in jobs:
            before = states.get(job.id)
            now = job.state
            if before is now:
                continue
            if before is None and job.created == job.updated:
                # New this round (one round shares one `now`), whatever state it reached.
                count(job.queue, "submitted")
            if now is JobState.RUNNING:
                count(job.queue, "started")
            elif before is JobState.RUNNING and now is JobState.QUEUED:
                count(job.queue, "retried")
            if now.terminal:
                if before is not JobState.RUNNING and job.started is not None:
                    # Started and finished within one round: count the start too.
                    count(job.queue, "started")
                count(job.queue, now.value)
                if before is JobState.RUNNING and job.started is not None:
                    durations.append((job.queue, max(0.0, job.updated - job.started)))
                states.pop(job.id, None)
            else:
                states[job.id] = now
        for (queue, transition), n in counts.items():
            self.jobs.labels(queue, transition).inc(n)
        if durations:
            children: dict[str, Any] = {}
            for queue, seconds in durations:
                child = children.get(queue)
                if child is None:
                    child = children[queue] = self.duration.labels(queue)
                child.observe(seconds)
