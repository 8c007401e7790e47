"""Running one registered job in a worker thread: session, job group, result, bookkeeping.

:meth:`JobRunner.run` is what the broker worker calls (through
:meth:`JobRunner.job_function`) with the client's keyword arguments as the job's params.
It takes the session (re-made if a job stopped it), puts the job's Spark work in a job
group named by the job id (progress, and cancelling, follow the group), runs the job,
writes a table result, answers
``{"job", "job_id", "seconds", "result", "output"}`` and announces that on the bus.
A failure is recorded and raised again for the worker to answer, with Spark's message
cut to its first meaningful lines (:class:`~zbus.sparkworker.errors.SparkJobError`).
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any, cast

from pyspark import SparkContext

from zbus.broker.client.worker import current_job_id
from zbus.sparkworker.errors import (
    JobCancelled,
    ParamError,
    SparkJobError,
    is_spark_error,
    spark_message,
)
from zbus.sparkworker.jobs.base import JobContext, job_context
from zbus.sparkworker.jobs.registry import JobRegistry
from zbus.sparkworker.jobs.results import materialise
from zbus.sparkworker.progress import JobBoard, read_progress, settle
from zbus.sparkworker.session import SparkSessionManager

__all__ = ["JobRunner"]

log = logging.getLogger(__name__)

#: ``announce(topic, reply)``: hands a result's announcement over, never raises.
Announce = Callable[[str, dict[str, Any]], object]


def _describe(exc: BaseException) -> str:
    try:
        return str(exc)
    except Exception:
        return repr(type(exc))


class JobRunner:
    """Runs the jobs of ``jobs`` on the session of ``sessions``.

    Args:
        jobs: the registered jobs.
        sessions: the session manager.
        board: where running and finished jobs are recorded.
        archive_path, output_path: the worker's settings, for the job context and the
            default output directory ``<output_path>/<job>/<job_id>``.
        announce_topic: results go to ``<announce_topic>/<job>``.
        announce: hands announcements to the bus (``None``: no bus).
        count_rows: called with the rows a job processed.
    """

    def __init__(
        self,
        jobs: JobRegistry,
        sessions: SparkSessionManager,
        board: JobBoard,
        *,
        archive_path: str,
        output_path: str,
        announce_topic: str = "/zbus/pipeline/results",
        announce: Announce | None = None,
        count_rows: Callable[[int], object] | None = None,
    ) -> None:
        self.jobs = jobs
        self.sessions = sessions
        self.board = board
        self.archive_path = archive_path
        self.output_path = output_path.rstrip("/")
        self.announce_topic = announce_topic
        self.announce = announce
        self.count_rows = count_rows
        self._cancelled: set[str] = set()
        self._lock = threading.Lock()

    def cancel(self, job_id: str) -> bool:
        """Cancel the Spark work of running job ``job_id`` (its job group); the job then
        fails with :class:`JobCancelled`. Python code of the job between Spark actions is
        not interrupted: it stops at its next Spark action.

        Returns:
            False when no such job is running here.
        """
        if job_id not in self.board.running_ids:
            return False
        with self._lock:
            self._cancelled.add(job_id)
        spark = self.sessions.current
        if spark is not None:
            spark.sparkContext.cancelJobGroup(job_id)
        return True

    def _was_cancelled(self, job_id: str) -> bool:
        with self._lock:
            if job_id in self._cancelled:
                self._cancelled.discard(job_id)
                return True
            return False

    def job_function(self, name: str) -> Callable[..., dict[str, Any]]:
        """What the broker worker registers for job ``name``."""

        def run(*args: Any, **params: Any) -> dict[str, Any]:
            return self.run(name, args, params)

        run.__name__ = run.__qualname__ = f"spark_job[{name}]"
        return run

    def run(self, name: str, args: tuple[Any, ...], params: dict[str, Any]) -> dict[str, Any]:
        """Run job ``name`` in this thread and return its answer.

        Raises:
            ParamError: positional arguments, or a parameter the job refused.
            SparkJobError: Spark failed the job (its message trimmed).
            Exception: whatever else the job raised.
        """
        spec = self.jobs.get(name)
        if spec is None:
            raise LookupError(f"no Spark job is registered as {name!r}")
        job_id = current_job_id() or str(uuid.uuid4())
        self.board.begin(job_id, name)
        started = time.perf_counter()
        try:
            if args:
                raise ParamError("args", "Spark jobs take named parameters (kwargs) only")
            spark = self.sessions.session()
            sc = spark.sparkContext
            sc.setJobGroup(job_id, f"zbus {name}", interruptOnCancel=True)
            context = JobContext(job_id, name, self.archive_path, self.output_path)
            try:
                with job_context(context):
                    value = spec.fn(spark, dict(params))
                    done = materialise(
                        spark,
                        value,
                        default_path=f"{self.output_path}/{name}/{job_id}",
                        where=f"result of {name}",
                    )
            finally:
                self._last_progress(sc, job_id)
        except BaseException as exc:  # recorded whatever it is; the worker answers it
            if self._was_cancelled(job_id):
                cancelled = JobCancelled(f"{name} {job_id} was cancelled on request")
                self.board.finish(job_id, "failed", error=f"JobCancelled: {cancelled}")
                raise cancelled from exc
            if is_spark_error(exc):
                trimmed = SparkJobError(type(exc).__name__, spark_message(_describe(exc)))
                self.board.finish(job_id, "failed", error=f"SparkJobError: {trimmed}")
                raise trimmed from exc
            self.board.finish(job_id, "failed", error=f"{type(exc).__name__}: {_describe(exc)}")
            raise
        self._was_cancelled(job_id)  # a cancel that came too late to stop anything
        reply = {
            "job": name,
            "job_id": job_id,
            "seconds": round(time.perf_counter() - started, 3),
            "result": done.result,
            "output": done.output,
        }
        self.board.finish(job_id, "succeeded", output=done.output, result=done.result)
        if done.rows and self.count_rows is not None:
            self.count_rows(done.rows)
        if self.announce is not None:
            self.announce(f"{self.announce_topic}/{name}", reply)
        return reply

    def _last_progress(self, sc: SparkContext, job_id: str) -> None:
        """The job's final Spark numbers, and its thread out of the job group."""
        try:
            settle(sc)  # the job's last Spark events reach the status tracker first
            self.board.update(job_id, read_progress(sc.statusTracker(), job_id))
            # None removes the property (PySpark passes it to the JVM as null).
            sc.setLocalProperty("spark.jobGroup.id", cast(str, None))
        except Exception:  # the job stopped the session: nothing to read
            log.debug("no final progress", exc_info=True, extra={"job_id": job_id})
