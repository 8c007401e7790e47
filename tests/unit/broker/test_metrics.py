"""Per-queue job transitions counted from the changed jobs of each round."""

from __future__ import annotations

from dataclasses import replace

from prometheus_client import CollectorRegistry

from zbus.broker.core.model import Job, JobState
from zbus.broker.server.metrics import BrokerMetrics

T0 = 1_700_000_000.0


def _job(job_id: str, state: JobState, **fields: object) -> Job:
    job = Job(job_id, "q", (), b"", None, JobState.QUEUED, 0, 0, None, T0, T0, T0)
    return replace(job, state=state, **fields)  # type: ignore[arg-type]


def _count(registry: CollectorRegistry, transition: str) -> float:
    value = registry.get_sample_value(
        "zbus_broker_jobs_total", {"queue": "q", "transition": transition}
    )
    return value or 0.0


def test_transitions_within_and_across_rounds() -> None:
    registry = CollectorRegistry()
    metrics = BrokerMetrics(registry)
    # Round 1: one job only queued, one dispatched at once, one finished at once.
    metrics.transitions(
        [
            _job("a", JobState.QUEUED),
            _job("b", JobState.RUNNING, attempts=1, started=T0),
            _job("c", JobState.SUCCEEDED, attempts=1, started=T0),
        ]
    )
    assert _count(registry, "submitted") == 3
    assert _count(registry, "started") == 2
    assert _count(registry, "succeeded") == 1
    # Round 2: a starts, b is retried; a job rebuilt after a restart is not "submitted".
    later = T0 + 5
    metrics.transitions(
        [
            _job("a", JobState.RUNNING, attempts=1, started=later, updated=later),
            _job("b", JobState.QUEUED, attempts=1, updated=later),
            _job("old", JobState.QUEUED, attempts=1, updated=later),
        ]
    )
    assert _count(registry, "submitted") == 3
    assert (_count(registry, "started"), _count(registry, "retried")) == (3, 1)
    # Round 3: a finishes after 2 s: its duration is observed.
    metrics.transitions([_job("a", JobState.DEAD, attempts=1, started=later, updated=later + 2)])
    assert _count(registry, "dead") == 1
    assert registry.get_sample_value("zbus_broker_job_duration_seconds_sum", {"queue": "q"}) == 2.0
