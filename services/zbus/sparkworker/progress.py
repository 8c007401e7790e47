"""Jobs running and finished, and their Spark progress.

Each job's Spark work runs in a job group named by the job id
(``SparkContext.setJobGroup`` in the job's thread), so the status tracker can tell its
Spark jobs, stages and tasks apart from the others'. A :class:`ProgressPoller` thread
reads them every ``interval`` seconds into the :class:`JobBoard`, which the admin API
shows; the tracker's view is weakly consistent (stages appear late and are forgotten
eventually), so the numbers are a best effort, never used for decisions.
"""

from __future__ import annotations

import collections
import json
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal, TypeAlias

from pyspark import SparkContext, StatusTracker

from zbus.common.clock import SYSTEM_CLOCK, Clock
from zbus.common.threads import EssentialThread

__all__ = ["JobBoard", "JobRecord", "Progress", "ProgressPoller", "read_progress", "settle"]

log = logging.getLogger(__name__)

State: TypeAlias = Literal["running", "succeeded", "failed"]


@dataclass(frozen=True, slots=True)
class Progress:
    """A job group's Spark jobs and tasks, as the status tracker last showed them."""

    spark_jobs: int = 0
    spark_jobs_running: int = 0
    stages: int = 0
    tasks: int = 0
    tasks_completed: int = 0
    tasks_active: int = 0
    tasks_failed: int = 0

    def view(self) -> dict[str, Any]:
        done = None if not self.tasks else round(min(1.0, self.tasks_completed / self.tasks), 4)
        return {
            "spark_jobs": self.spark_jobs,
            "spark_jobs_running": self.spark_jobs_running,
            "stages": self.stages,
            "tasks": {
                "total": self.tasks,
                "completed": self.tasks_completed,
                "active": self.tasks_active,
                "failed": self.tasks_failed,
            },
            "fraction": done,
        }


def settle(sc: SparkContext, timeout: float = 5.0) -> bool:
    """Wait until Spark's listener bus has delivered every event posted so far.

    The status tracker reads a store that a listener fills from that bus, in another
    thread: when a query returns, the end of its Spark job is posted but may not be in the
    store yet, so a read at once can miss the job or show it running. Returns False when
    the bus did not empty within ``timeout`` seconds (a read then is a best effort).
    """
    try:
        bus: Any = sc._jsc.sc().listenerBus()
        bus.waitUntilEmpty(max(1, int(timeout * 1000)))
    except Exception:  # a TimeoutException from the JVM, or the session gone
        log.debug("Spark's listener bus did not settle", exc_info=True)
        return False
    return True


def read_progress(tracker: StatusTracker, group: str) -> Progress:
    """The progress of job group ``group`` (JVM calls: blocks briefly)."""
    jobs = running = stages = tasks = completed = active = failed = 0
    for job_id in tracker.getJobIdsForGroup(group):
        info = tracker.getJobInfo(job_id)
        if info is None:
            continue
        jobs += 1
        running += info.status == "RUNNING"
        for stage_id in info.stageIds:
            stage = tracker.getStageInfo(stage_id)
            if stage is None:
                continue
            stages += 1
            tasks += stage.numTasks
            completed += stage.numCompletedTasks
            active += stage.numActiveTasks
            failed += stage.numFailedTasks
    return Progress(jobs, running, stages, tasks, completed, active, failed)


PREVIEW_CHARS = 2000  # of a finished job's result kept for the admin API (100 jobs: 200 kB)


def result_preview(result: Any) -> str:
    """``result`` as compact JSON text, cut to :data:`PREVIEW_CHARS` (with an ellipsis)."""
    text = json.dumps(result, separators=(",", ":"), default=str)
    return text if len(text) <= PREVIEW_CHARS else text[: PREVIEW_CHARS - 1] + "\u2026"


@dataclass(slots=True)
class JobRecord:
    """One job as the admin API shows it."""

    job_id: str
    job: str
    started_at: float  # wall clock
    started: float  # monotonic
    state: State = "running"
    seconds: float | None = None
    error: str | None = None
    output: str | None = None
    progress: Progress = field(default_factory=Progress)
    result_preview: str | None = None  # the result as JSON text, cut at PREVIEW_CHARS

    def view(self, now: float) -> dict[str, Any]:
        seconds = now - self.started if self.seconds is None else self.seconds
        return {
            "job_id": self.job_id,
            "job": self.job,
            "state": self.state,
            "started_at": datetime.fromtimestamp(self.started_at, UTC).isoformat(),
            "seconds": round(seconds, 3),
            "error": self.error,
            "output": self.output,
            "progress": self.progress.view(),
            "result_preview": self.result_preview,
        }


class JobBoard:
    """Running jobs and the last ``history`` finished ones; safe from any thread.

    ``clock`` gives a job's start as wall time (shown) and its duration on the monotonic
    clock.
    """

    def __init__(self, history: int = 100, *, clock: Clock = SYSTEM_CLOCK) -> None:
        self.clock = clock
        self._lock = threading.Lock()
        self._running: dict[str, JobRecord] = {}
        self._finished: collections.deque[JobRecord] = collections.deque(maxlen=history)

    def begin(self, job_id: str, job: str) -> None:
        with self._lock:
            self._running[job_id] = JobRecord(
                job_id, job, self.clock.time(), self.clock.monotonic()
            )

    def update(self, job_id: str, progress: Progress) -> dict[str, Any] | None:
        """Record ``progress``; the job's view when it changed, else ``None``."""
        with self._lock:
            record = self._running.get(job_id)
            if record is None or record.progress == progress:
                return None
            record.progress = progress
            return record.view(self.clock.monotonic())

    def finish(
        self,
        job_id: str,
        state: State,
        *,
        error: str | None = None,
        output: str | None = None,
        result: Any = None,
    ) -> dict[str, Any] | None:
        """Move a running job to the finished ones; ``result`` (any JSON value) is kept
        as a preview of at most :data:`PREVIEW_CHARS` characters of its JSON text."""
        preview = None if result is None else result_preview(result)
        with self._lock:
            record = self._running.pop(job_id, None)
            if record is None:
                return None
            record.state = state
            record.seconds = self.clock.monotonic() - record.started
            record.error = error
            record.output = output
            record.result_preview = preview
            self._finished.appendleft(record)
            return record.view(self.clock.monotonic())

    @property
    def running_ids(self) -> list[str]:
        with self._lock:
            return list(self._running)

    @property
    def running_count(self) -> int:
        return len(self._running)

    def get(self, job_id: str) -> dict[str, Any] | None:
        now = self.clock.monotonic()
        with self._lock:
            record = self._running.get(job_id)
            if record is None:
                record = next((r for r in self._finished if r.job_id == job_id), None)
            return None if record is None else record.view(now)

    def view(self) -> dict[str, list[dict[str, Any]]]:
        """Running jobs (oldest first) and finished ones (newest first)."""
        now = self.clock.monotonic()
        with self._lock:
            return {
                "running": [r.view(now) for r in self._running.values()],
                "finished": [r.view(now) for r in self._finished],
            }


class ProgressPoller:
    """A daemon thread: every ``interval`` seconds, each running job's progress, and a
    look at the session (which re-makes it when a job stopped it).

    Args:
        board: the jobs.
        tracker: the current status tracker, ``None`` while there is no session.
        check_session: looks at the session (and re-makes it); called every round.
        on_change: called with a job's view when its progress changed.
    """

    def __init__(
        self,
        board: JobBoard,
        tracker: Callable[[], StatusTracker | None],
        check_session: Callable[[], object],
        on_change: Callable[[dict[str, Any]], object] | None = None,
        interval: float = 0.5,
    ) -> None:
        self.board = board
        self.tracker = tracker
        self.check_session = check_session
        self.on_change = on_change
        self.interval = interval
        self._stop = threading.Event()
        # Essential to the service: it also re-makes a session a job stopped.
        self.thread = EssentialThread("zbus-spark-progress", self._run)
        self._thread = self.thread

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._thread.stop()
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout)

    def poll(self) -> None:
        """One round (also called by a job at its end, for its final numbers)."""
        tracker = self.tracker()
        if tracker is None:
            return
        for job_id in self.board.running_ids:
            self.poll_job(tracker, job_id)

    def poll_job(self, tracker: StatusTracker, job_id: str) -> None:
        changed = self.board.update(job_id, read_progress(tracker, job_id))
        if changed is not None and self.on_change is not None:
            self.on_change(changed)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.check_session()
                self.poll()
            except Exception:  # a session going away mid-call; the next round sees it
                log.debug("progress poll failed", exc_info=True)
