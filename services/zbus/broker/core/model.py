"""The broker's data: jobs and schedules, shared by the core, the store and the admin API."""

from __future__ import annotations

import enum
from dataclasses import dataclass

Headers = tuple[tuple[str, str], ...]


class JobState(enum.StrEnum):
    QUEUED = "queued"  # waiting for a worker (a retry waits here too, with not_before)
    RUNNING = "running"  # handed to a worker
    SUCCEEDED = "succeeded"
    FAILED = "failed"  # a zbus worker reported an error and no retry is left: see DEAD
    DEAD = "dead"  # retries spent; `error` says why
    CANCELLED = "cancelled"

    @property
    def terminal(self) -> bool:
        return self in TERMINAL


TERMINAL = frozenset({JobState.SUCCEEDED, JobState.FAILED, JobState.DEAD, JobState.CANCELLED})


@dataclass(frozen=True, slots=True)
class Job:
    """One job. Immutable: every change is a new value (``dataclasses.replace``).

    Attributes:
        id: the REQUEST msgid; the idempotency key.
        queue: queue name.
        headers: eMQP headers as sent.
        body: request body as sent (opaque to the broker).
        client: ROUTER identity of the submitting client (None: scheduled or admin API).
        state: see JobState.
        attempts: how many times it was handed to a worker.
        max_retries: retries allowed after the first attempt.
        timeout: seconds a worker may take, or None.
        not_before: wall time before which it is not dispatched (delay, retry backoff;
            the core waits for a delay on the wall clock, for a backoff on the
            monotonic one: see :mod:`zbus.broker.core.jobs`).
        created, updated: wall times.
        worker: ROUTER identity of the worker running it (RUNNING only).
        started: wall time it was last handed to a worker.
        result: the worker's REPLY body (terminal states).
        error: why it failed / died / was cancelled.
        schedule_id: the schedule that created it, if any.
    """

    id: str
    queue: str
    headers: Headers
    body: bytes
    client: bytes | None
    state: JobState
    attempts: int
    max_retries: int
    timeout: float | None
    not_before: float
    created: float
    updated: float
    worker: bytes | None = None
    started: float | None = None
    result: bytes | None = None
    error: str | None = None
    schedule_id: str | None = None


@dataclass(frozen=True, slots=True)
class Schedule:
    """A recurring job (eventmq SCHEDULE): every ``interval`` seconds or on a cron line.

    ``id`` is derived from the body as eventmq's scheduler does (UNSCHEDULE names a
    schedule by its body), so re-sending the same SCHEDULE replaces it.
    """

    id: str
    queue: str
    headers: Headers
    body: bytes
    interval: float | None
    cron: str | None
    next_run: float  # wall time
    created: float
