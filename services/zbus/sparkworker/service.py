"""The sparkworker as a zbus service: ``python -m zbus.sparkworker``.

At start the jobs are loaded (built-ins, ``spark_jobs``, the ``zbus.spark_jobs`` entry
points; a bad or duplicate one stops the service with a ConfigError), the session is
built in a thread (``/readyz`` says ``spark_session: false`` until it is up; a failure
is retried with backoff and shown in ``/api/v1/spark``), and only then does the worker
connect to the broker and take jobs from its queue. A progress thread follows the
running jobs and looks at the session (re-making it when a job stopped it); a second
thread announces results on the bus when ``eventbus_endpoint`` is set.

Shutdown: no more jobs are taken, running ones finish within most of the
``shutdown_timeout``, the threads stop, and a session the service built is stopped.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
from collections.abc import Callable, Iterable, Iterator
from importlib.metadata import EntryPoint
from typing import Any, Final, TypeVar

from fastapi import FastAPI, HTTPException
from prometheus_client import Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector
from pyspark import StatusTracker
from pyspark.logger import PySparkLogger
from pyspark.sql import SparkSession

from zbus.broker.client.worker import Outcome, Worker
from zbus.common.protocols.emqp import EventmqCall
from zbus.eventbus.client import BusEndpoints
from zbus.runtime.admin import TokenRequired
from zbus.runtime.service import Service
from zbus.sparkworker.announce import Announcer, Kind
from zbus.sparkworker.announce import Outcome as AnnounceOutcome
from zbus.sparkworker.config import SparkWorkerSettings
from zbus.sparkworker.jobs.registry import JobRegistry
from zbus.sparkworker.progress import JobBoard, ProgressPoller
from zbus.sparkworker.runner import JobRunner
from zbus.sparkworker.session import SparkSessionManager, session_factory

__all__ = ["SparkWorkerService"]

log = logging.getLogger(__name__)

T = TypeVar("T")

_SECONDS_BUCKETS: Final = (0.1, 0.5, 1.0, 5.0, 15.0, 60.0, 300.0, 900.0, 3600.0)
_RETRY_FIRST: Final = 1.0  # seconds before a failed session start is tried again, doubling
_RETRY_MAX: Final = 30.0
_OTHER: Final = "other"  # the job label of calls to names that are not registered
# PySpark logs each failed query with its whole JVM stack to stderr by these loggers; the
# worker reports a failed job itself, in one line, with the message cut short.
_PYSPARK_QUERY_LOGGERS: Final = ("SQLQueryContextLogger", "DataFrameQueryContextLogger")


class _RestartsCollector(Collector):
    """The session manager's restart count, read at scrape time."""

    def __init__(self, sessions: SparkSessionManager) -> None:
        self.sessions = sessions

    def collect(self) -> Iterator[CounterMetricFamily]:
        yield CounterMetricFamily(
            "zbus_spark_session_restarts",
            "Spark sessions re-made after one was stopped (by a job, or lost)",
            value=self.sessions.restarts,
        )


async def _in_thread(fn: Callable[[], T], name: str) -> T:
    """Run blocking ``fn`` in a daemon thread (one stuck in the JVM cannot hold the
    process at exit, as an executor thread would) and await its result."""
    future: concurrent.futures.Future[T] = concurrent.futures.Future()

    def work() -> None:
        if not future.set_running_or_notify_cancel():
            return
        try:
            future.set_result(fn())
        except BaseException as exc:
            future.set_exception(exc)

    threading.Thread(target=work, name=name, daemon=True).start()
    return await asyncio.wrap_future(future)


class SparkWorkerService(Service):
    """The sparkworker service.

    Args:
        settings: its settings.
        session: a running SparkSession to adopt instead of building one (tests,
            notebooks); the service never stops an adopted session.
        entry_points: the entry points to load jobs from (default: the installed
            packages' ``zbus.spark_jobs`` group).
        bus: where to announce results instead of ``eventbus_endpoint`` (a bus whose
            four sockets are not on consecutive ports, e.g. one in the same process).
    """

    name = "sparkworker"

    def __init__(
        self,
        settings: SparkWorkerSettings,
        *,
        session: SparkSession | None = None,
        entry_points: Iterable[EntryPoint] | None = None,
        bus: BusEndpoints | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(settings, **kwargs)
        self.settings: SparkWorkerSettings = settings
        self.sessions = SparkSessionManager(
            session
            if session is not None
            else session_factory(
                settings.spark_master,
                settings.spark_conf_map(),
                settings.host,
                settings.spark_app_name,
            ),
            clock=self.clock,
        )
        self.jobs = JobRegistry()
        self.board = JobBoard(settings.job_history, clock=self.clock)
        self._entry_points = entry_points
        self._bus: BusEndpoints | str | None = bus or settings.eventbus_endpoint or None
        self.worker = Worker(
            settings.broker_endpoint,
            (settings.spark_queue,),
            settings.concurrency,
            settings.heartbeat_interval,
            settings.heartbeat_misses,
            # Most of the shutdown deadline for running jobs; the rest for the session.
            drain_timeout=settings.shutdown_timeout * 0.7,
            context=self.ctx,
            clock=self.clock,
        )
        self.announcer: Announcer | None = None
        self.poller: ProgressPoller | None = None
        self._task: asyncio.Task[None] | None = None
        self._metrics()
        self.runner = JobRunner(
            self.jobs,
            self.sessions,
            self.board,
            archive_path=settings.archive_uri(),
            output_path=settings.output_uri(),
            announce_topic=settings.announce_topic,
            announce=self._announce_result,
            count_rows=self._rows.inc,
        )

    # ------------------------------------------------------------------ metrics
    def _metrics(self) -> None:
        registry = self.registry
        self._jobs_total = Counter(
            "zbus_spark_jobs",
            "Spark jobs finished, by job (registered names; others as 'other') and outcome",
            ["job", "outcome"],
            registry=registry,
        )
        self._seconds = Histogram(
            "zbus_spark_job_seconds",
            "Seconds a Spark job took",
            buckets=_SECONDS_BUCKETS,
            registry=registry,
        )
        self._rows = Counter(
            "zbus_spark_rows_processed",
            "Rows the jobs processed (written, or read where a job says so)",
            registry=registry,
        )
        self._announced = Counter(
            "zbus_spark_announcements",
            "Announcements on the bus, by kind (result, progress) and outcome",
            ["kind", "outcome"],
            registry=registry,
        )
        Gauge(
            "zbus_spark_session_up", "1 while the Spark session is up", registry=registry
        ).set_function(lambda: 1.0 if self.sessions.up else 0.0)
        registry.register(_RestartsCollector(self.sessions))
        Gauge("zbus_spark_running_jobs", "Spark jobs running now", registry=registry).set_function(
            lambda: self.board.running_count
        )

        def observe(job_id: str, call: EventmqCall | None, outcome: Outcome, took: float) -> None:
            name = call.callable if call is not None and call.callable in self.jobs else _OTHER
            self._jobs_total.labels(name, outcome).inc()
            self._seconds.observe(took)

        self.worker.after_job.append(observe)

    def _count_announcement(self, kind: Kind, outcome: AnnounceOutcome) -> None:
        self._announced.labels(kind, outcome).inc()

    def _announce_result(self, topic: str, reply: dict[str, Any]) -> None:
        if self.announcer is not None:
            self.announcer.announce("result", topic, reply)

    def _announce_progress(self, view: dict[str, Any]) -> None:
        if self.announcer is not None:
            topic = f"{self.settings.announce_topic}/{view['job']}/progress"
            self.announcer.announce("progress", topic, view)

    # ------------------------------------------------------------------ life cycle
    async def start(self) -> None:
        for name in _PYSPARK_QUERY_LOGGERS:
            # Made by PySpark's own factory: a plain logger of that name would break them.
            PySparkLogger.getLogger(name).setLevel(logging.CRITICAL)
        logging.getLogger("py4j").setLevel(logging.WARNING)  # a line per closed connection
        self.jobs.add_builtins(self.settings.archive_uri())
        self.jobs.add_specs(self.settings.spark_jobs)
        self.jobs.add_entry_points(self._entry_points)
        for name in self.jobs.names:
            self.worker.register(name, self.runner.job_function(name))
        for name in (*self.jobs.names, _OTHER):
            for outcome in ("succeeded", "failed"):
                self._jobs_total.labels(name, outcome)
        # CURVE keys are loaded by now (the service base does it before start).
        self.worker.curve = self.curve_client(self.settings.broker_public_key)
        if self._bus is not None:
            self.announcer = Announcer(
                self._bus,
                f"sparkworker:{self.settings.registered_name(self.name)}",
                counted=self._count_announcement,
                curve=self.curve_client(self.settings.eventbus_public_key),
            )
            self.essential(self.announcer.thread)
            self.announcer.start()
        self.poller = ProgressPoller(
            self.board,
            self._tracker,
            lambda: self.sessions.check(remake=self.board.running_count == 0),
            self._announce_progress if self.settings.announce_progress else None,
            self.settings.progress_interval,
        )
        self.essential(self.poller.thread)
        self._task = asyncio.create_task(self._serve(), name="zbus-sparkworker")
        self._task.add_done_callback(self._ended)

    def _tracker(self) -> StatusTracker | None:
        spark = self.sessions.current
        return None if spark is None else spark.sparkContext.statusTracker()

    async def _serve(self) -> None:
        delay = _RETRY_FIRST
        while True:
            try:
                await _in_thread(self.sessions.start, "zbus-spark-session")
                break
            except Exception as exc:
                log.error(
                    "cannot start the Spark session; trying again",
                    extra={"error": self.sessions.error or str(exc), "retry_seconds": delay},
                )
                await asyncio.sleep(delay)
                delay = min(delay * 2, _RETRY_MAX)
        assert self.poller is not None
        self.poller.start()
        await self.worker.run()

    def _ended(self, task: asyncio.Task[None]) -> None:
        if not task.cancelled() and (exc := task.exception()) is not None:
            log.error("sparkworker failed; stopping the service", exc_info=exc)
            self.fail(f"the worker failed: {exc!r}")
        self.request_stop()

    def checks(self) -> dict[str, bool]:
        return {"spark_session": self.sessions.up}

    async def drain(self) -> None:
        self.worker.request_stop()  # running jobs finish, then KBYE
        task = self._task
        if task is not None:
            if not self.sessions.up:
                task.cancel()  # still starting the session: nothing runs yet
            await asyncio.gather(task, return_exceptions=True)
        if self.poller is not None:
            await _in_thread(self.poller.stop, "zbus-spark-stop")
        if self.announcer is not None:
            await _in_thread(self.announcer.close, "zbus-spark-stop")
        await _in_thread(self.sessions.stop, "zbus-spark-stop")

    # ------------------------------------------------------------------ admin
    def spark_info(self) -> dict[str, Any]:
        worker = self.worker.stats()
        return {
            **self.sessions.info(),
            "ready": all(self.readiness().values()),
            "queue": self.settings.spark_queue,
            "concurrency": self.settings.concurrency,
            "broker": {
                "endpoint": worker["endpoint"],
                "connected": worker["connected"],
                "identity": worker["identity"],
            },
            "archive_path": self.settings.archive_uri(),
            "output_path": self.settings.output_uri(),
            "jobs": self.jobs.names,
            "jobs_done": worker["jobs_done"],
            "jobs_failed": worker["jobs_failed"],
        }

    def add_routes(self, app: FastAPI) -> None:
        @app.get("/api/v1/spark", tags=["spark"])
        async def spark() -> dict[str, Any]:
            """Session (master, app id, Spark version, uptime), readiness, broker, jobs."""
            return self.spark_info()

        @app.get("/api/v1/spark/jobs", tags=["spark"])
        async def jobs() -> dict[str, Any]:
            """Running jobs with progress, recent finished ones, and the registered jobs."""
            return {**self.board.view(), "registered": self.jobs.describe()}

        @app.post(
            "/api/v1/spark/jobs/{job_id}/cancel", dependencies=[TokenRequired], tags=["spark"]
        )
        async def cancel(job_id: str) -> dict[str, Any]:
            """Cancel a running job's Spark work; the job fails with JobCancelled."""
            if not await asyncio.to_thread(self.runner.cancel, job_id):
                raise HTTPException(status_code=404, detail=f"no job {job_id} running here")
            return {"job_id": job_id, "cancelling": True}

        @app.get("/api/v1/spark/jobs/{job_id}", tags=["spark"])
        async def job(job_id: str) -> dict[str, Any]:
            """One running or recently finished job."""
            found = self.board.get(job_id)
            if found is None:
                raise HTTPException(status_code=404, detail=f"no job {job_id} here")
            return found
