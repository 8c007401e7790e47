"""The worker as a zbus service: ``python -m zbus.worker``.

Settings (``ZBUS_`` environment or ``--kebab-case`` flags): ``ZBUS_BROKER_ENDPOINT``,
``ZBUS_QUEUES`` (comma-separated), ``ZBUS_CONCURRENCY``, ``ZBUS_IMPORT_JOBS``
(comma-separated modules; each must define ``register_jobs(worker)``, called at start),
``ZBUS_ALLOW_IMPORT``, ``ZBUS_HEARTBEAT_INTERVAL``, ``ZBUS_HEARTBEAT_MISSES``, plus the
common service settings. With ``ZBUS_BROKER_PUBLIC_KEY`` (the broker's public key file)
and the service's own ``ZBUS_CURVE_SECRET_KEY`` the worker connects over CURVE; the
broker's allow-list must then list the worker's public key. The built-in jobs ``noop``,
``echo``, ``sleep`` and ``fail`` are always registered.

Admin: ``GET /api/v1/worker`` (queues, concurrency, running jobs, jobs done and failed,
connection state, whether it runs CURVE). Metrics: ``zbus_worker_jobs_total{outcome}``,
``zbus_worker_job_seconds``, ``zbus_worker_running``, ``zbus_worker_reconnects_total``,
``zbus_worker_dropped_messages_total{reason}``.

Readiness does not depend on the broker: a worker waiting for its broker is healthy, and
whether it is connected is in ``/api/v1/worker``.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
import sys
from collections.abc import Iterator, Sequence
from typing import Any

from fastapi import FastAPI
from prometheus_client import Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector
from pydantic import Field, field_validator

from zbus.broker.client.worker import DEFAULT_ENDPOINT, Outcome, Worker
from zbus.broker.core.limits import (
    MAX_HEARTBEAT_INTERVAL,
    MAX_HEARTBEAT_MISSES,
    MAX_QUEUE_CHARS,
    MAX_WORKER_QUEUES,
)
from zbus.common.protocols.emqp import EventmqCall
from zbus.common.settings import ConfigError, ServiceSettings
from zbus.runtime.service import Service, run

log = logging.getLogger(__name__)

_SECONDS_BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 30.0, 120.0, 600.0)


def _csv(value: str) -> list[str]:
    return [item.strip() for item in value.split(",") if item.strip()]


class WorkerSettings(ServiceSettings):
    broker_endpoint: str = Field(DEFAULT_ENDPOINT, description="the broker's worker port")
    queues: str = Field("default", description="comma-separated queues, preferred first")
    concurrency: int = Field(4, ge=1, le=1024, description="jobs run at once")
    import_jobs: str = Field(
        "", description="comma-separated modules whose register_jobs(worker) adds jobs"
    )
    allow_import: bool = Field(
        False, description="import unregistered callables from their path, as eventmq does"
    )
    heartbeat_interval: float = Field(
        3.0, gt=0, le=MAX_HEARTBEAT_INTERVAL, description="seconds between heartbeats"
    )
    heartbeat_misses: int = Field(
        3, ge=1, le=MAX_HEARTBEAT_MISSES, description="silent intervals before reconnecting"
    )

    @field_validator("queues")
    @classmethod
    def _some_queue(cls, value: str) -> str:
        names = _csv(value)
        if not names:
            raise ValueError("at least one queue name is needed")
        if len(names) > MAX_WORKER_QUEUES or max(map(len, names)) > MAX_QUEUE_CHARS:
            raise ValueError(
                f"at most {MAX_WORKER_QUEUES} queues of at most {MAX_QUEUE_CHARS} characters"
            )
        return value


class _WorkerCollector(Collector):
    """Counters kept by the worker itself, read at scrape time."""

    def __init__(self, worker: Worker) -> None:
        self.worker = worker

    def collect(self) -> Iterator[CounterMetricFamily]:
        counters = self.worker.counters
        yield CounterMetricFamily(
            "zbus_worker_reconnects",
            "Connections to the broker replaced (silence or DISCONNECT)",
            value=counters["reconnects"],
        )
        dropped = CounterMetricFamily(
            "zbus_worker_dropped_messages",
            "Messages from or to the broker dropped, by reason",
            labels=["reason"],
        )
        for reason in ("malformed", "unexpected", "abandoned", "send_failed"):
            dropped.add_metric([reason], counters[reason])
        yield dropped


class WorkerService(Service):
    name = "worker"

    def __init__(self, settings: WorkerSettings, **kwargs: Any) -> None:
        super().__init__(settings, **kwargs)
        self.worker = Worker(
            settings.broker_endpoint,
            _csv(settings.queues),
            settings.concurrency,
            settings.heartbeat_interval,
            settings.heartbeat_misses,
            allow_import=settings.allow_import,
            # Leave part of the shutdown deadline for the KBYE and closing.
            drain_timeout=settings.shutdown_timeout * 0.8,
            context=self.ctx,
            clock=self.clock,
        )
        self.worker.register_builtins()
        self._modules = _csv(settings.import_jobs)
        self._task: asyncio.Task[None] | None = None
        jobs = Counter(
            "zbus_worker_jobs", "Jobs finished, by outcome", ["outcome"], registry=self.registry
        )
        seconds = Histogram(
            "zbus_worker_job_seconds",
            "Seconds a job took to run",
            buckets=_SECONDS_BUCKETS,
            registry=self.registry,
        )
        for outcome in ("succeeded", "failed"):
            jobs.labels(outcome)

        def observe(job_id: str, call: EventmqCall | None, outcome: Outcome, took: float) -> None:
            jobs.labels(outcome).inc()
            seconds.observe(took)

        self.worker.after_job.append(observe)
        Gauge("zbus_worker_running", "Jobs running now", registry=self.registry).set_function(
            lambda: self.worker.running
        )
        self.registry.register(_WorkerCollector(self.worker))

    async def start(self) -> None:
        # The service's key pair is loaded by the base's start-up, just before this hook,
        # so the worker's CURVE pair is built here, not in __init__, and before it runs.
        self.worker.curve = self.curve_client(self.settings.broker_public_key)
        for name in self._modules:
            try:
                module = importlib.import_module(name)
            except ImportError as exc:
                raise ConfigError(f"import_jobs: cannot import {name}: {exc}") from None
            register = getattr(module, "register_jobs", None)
            if not callable(register):
                raise ConfigError(f"import_jobs: {name} has no register_jobs(worker) function")
            register(self.worker)
        self._task = asyncio.create_task(self.worker.run(), name="zbus-worker")
        self._task.add_done_callback(self._worker_ended)

    def _worker_ended(self, task: asyncio.Task[None]) -> None:
        if not task.cancelled() and (exc := task.exception()) is not None:
            log.error("worker failed; stopping the service", exc_info=exc)
            self.fail(f"the worker failed: {exc!r}")  # exit status 1: a supervisor restarts it
        self.request_stop()

    async def drain(self) -> None:
        # The worker's own graceful stop: running jobs finish, then KBYE.
        self.worker.request_stop()
        if self._task is not None:
            await asyncio.gather(self._task, return_exceptions=True)

    def add_routes(self, app: FastAPI) -> None:
        @app.get("/api/v1/worker", tags=["worker"])
        async def worker() -> dict[str, Any]:
            """Queues, concurrency, running jobs, jobs done and failed, connection."""
            return self.worker.stats()


def main(argv: Sequence[str] | None = None) -> None:
    run(WorkerService, WorkerSettings, sys.argv[1:] if argv is None else argv)


if __name__ == "__main__":
    main()
