"""Job lifecycle rules as data: the transition table, retry backoff, headers, answers.

The states are ADR 0003 decision 6 (``model.JobState``). Every change the core makes is
a pair of :data:`TRANSITIONS`, and a pair the table does not list changes nothing: that
is how a REPLY for a job that is not running, or a cancel of a running job, is refused.
Failures, cancels and admin retries look their pair up with :func:`next_state`; dispatch
and success, the per-job hot path, check the one state they accept directly. The unit
tests drive every (state, event) pair through the core's inputs against this table.
"""

from __future__ import annotations

import enum
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from zbus.broker.core.limits import (
    MAX_RETRIES,
    MAX_RUN_COUNT,
    MAX_SECONDS,
    parse_count,
    parse_seconds,
)
from zbus.broker.core.model import Headers, Job, JobState


class JobEvent(enum.Enum):
    """What can happen to a job."""

    DISPATCH = "dispatch"  # handed to a worker slot
    SUCCEED = "succeed"  # the worker's REPLY carries a result
    ERROR = "error"  # the worker's REPLY is zbus's {"error": ...} object
    LOST = "lost"  # worker expired or left, timeout, broker restarted
    CANCEL = "cancel"  # admin cancel or purge
    RETRY = "retry"  # admin retry of a job zbus gave up on


@dataclass(frozen=True, slots=True)
class Transition:
    """Where an event takes a job: ``target``, or ``exhausted`` when no retry is left."""

    target: JobState
    exhausted: JobState | None = None


_Q, _R = JobState.QUEUED, JobState.RUNNING  # short names keep the table readable

#: Every allowed (state, event). A failure with a retry left goes back to QUEUED (with a
#: ``not_before``: ADR 0003 decision 6); without one a worker-reported error ends FAILED
#: and a lost attempt (worker gone, timeout, restart) ends DEAD, as ``model.JobState``
#: defines them. Terminal states take no event except an admin RETRY of a given-up job.
TRANSITIONS: Final[Mapping[tuple[JobState, JobEvent], Transition]] = {
    (_Q, JobEvent.DISPATCH): Transition(_R),
    (_Q, JobEvent.CANCEL): Transition(JobState.CANCELLED),
    (_R, JobEvent.SUCCEED): Transition(JobState.SUCCEEDED),
    (_R, JobEvent.ERROR): Transition(_Q, JobState.FAILED),
    (_R, JobEvent.LOST): Transition(_Q, JobState.DEAD),
    (JobState.FAILED, JobEvent.RETRY): Transition(_Q),
    (JobState.DEAD, JobEvent.RETRY): Transition(_Q),
}


def next_state(state: JobState, event: JobEvent, *, retry_left: bool = True) -> JobState | None:
    """The state ``event`` leads to from ``state``, or ``None`` if the pair is not allowed."""
    rule = TRANSITIONS.get((state, event))
    if rule is None:
        return None
    if rule.exhausted is not None and not retry_left:
        return rule.exhausted
    return rule.target


def backoff(attempts: int, base: float, cap: float) -> float:
    """Seconds to wait before retrying after failed attempt number ``attempts`` (1-based).

    ``min(cap, base * 2**(attempts-1))``: the first retry waits ``base`` (ADR 0003
    decision 5). The exponent is bounded so a large retry count cannot overflow a float.
    """
    return min(cap, base * 2.0 ** min(max(attempts - 1, 0), 64))


# --------------------------------------------------------------------------- new values
# The hot paths build the next Job directly: a keyword constructor costs half of what
# dataclasses.replace does, and the broker makes two or three values per job.


def _moved(
    job: Job,
    state: JobState,
    attempts: int,
    not_before: float,
    now: float,
    worker: bytes | None,
    started: float | None,
    result: bytes | None,
    error: str | None,
) -> Job:
    """``job`` in ``state``, updated at ``now``, with the fields a transition sets; the
    job's identity, request and limits kept."""
    return Job(
        id=job.id,
        queue=job.queue,
        headers=job.headers,
        body=job.body,
        client=job.client,
        state=state,
        attempts=attempts,
        max_retries=job.max_retries,
        timeout=job.timeout,
        not_before=not_before,
        created=job.created,
        updated=now,
        worker=worker,
        started=started,
        result=result,
        error=error,
        schedule_id=job.schedule_id,
    )


def dispatched(job: Job, worker: bytes, now: float) -> Job:
    """``job`` handed to ``worker``: RUNNING, one more attempt."""
    return _moved(
        job, JobState.RUNNING, job.attempts + 1, job.not_before, now, worker, now, None, job.error
    )


def settled(
    job: Job,
    state: JobState,
    now: float,
    *,
    result: bytes | None = None,
    error: str | None = None,
    not_before: float | None = None,
) -> Job:
    """``job`` off its worker in ``state``: a final one, or QUEUED for a retry."""
    when = job.not_before if not_before is None else not_before
    return _moved(job, state, job.attempts, when, now, None, job.started, result, error)


def queued_anew(job: Job, now: float) -> Job:
    """``job`` queued again from the start (an admin's retry): no attempt made, no worker,
    no outcome, due now."""
    return _moved(job, JobState.QUEUED, 0, now, now, None, None, None, None)


# --------------------------------------------------------------------------- headers


@dataclass(frozen=True, slots=True)
class JobOptions:
    """What a REQUEST's headers ask of the broker (ADR 0003 decisions 5 and 8)."""

    max_retries: int
    timeout: float | None
    delay: float


# Header tuples repeat from job to job (the codec shares one per header text), so the
# options read from the short ones are kept: the per-job cost is one dict lookup.
_OPTIONS: dict[tuple[Headers, int], JobOptions] = {}
_CACHE_LIMIT: Final = 512
_CACHED_HEADERS_MAX: Final = 256  # characters: large header sets are not kept


def job_options(headers: Headers, default_retries: int) -> JobOptions:
    """Read ``retry-count:N``, ``timeout:S`` and ``delay:S``; other headers pass through.

    ``timeout:0`` means no timeout, as eventmq's jobmanager reads it. The ranges are
    :mod:`zbus.broker.core.limits`'s: retries 0..1000, seconds 0..30 days.

    Raises:
        HeaderError: for a value that is not a count / a number of seconds in its range.
    """
    key = (headers, default_retries)
    options = _OPTIONS.get(key)
    if options is not None:
        return options
    retries, timeout, delay = default_retries, None, 0.0
    size = 0
    for name, value in headers:
        size += len(name) + len(value)
        if name == "retry-count":
            retries = parse_count(name, value, 0, MAX_RETRIES)
        elif name == "timeout":
            timeout = parse_seconds(name, value, MAX_SECONDS, zero="0: no timeout") or None
        elif name == "delay":
            delay = parse_seconds(name, value, MAX_SECONDS)
    options = JobOptions(retries, timeout, delay)
    if size <= _CACHED_HEADERS_MAX:
        if len(_OPTIONS) >= _CACHE_LIMIT:
            _OPTIONS.clear()
        _OPTIONS[key] = options
    return options


def forward_headers(headers: Headers) -> Headers:
    """The headers sent to the worker: the client's, plus ``reply-requested``.

    eventmq's jobmanager sends a REPLY only for ``reply-requested`` jobs and otherwise
    just a READY, which cannot say which job ended. The broker needs every job's end to
    keep its state, so it always asks.
    """
    if any(name == "reply-requested" for name, _ in headers):
        return headers
    return (("reply-requested", ""), *headers)


def run_count(headers: Headers) -> int | None:
    """eventmq's ``run_count:N`` SCHEDULE header: how many more times it may fire.

    ``None`` for no limit: no header, or eventmq's ``-1``.

    Raises:
        HeaderError: for a value that is not -1 or a count in 0..1,000,000,000.
    """
    for name, value in headers:
        if name == "run_count":
            count = parse_count(name, value, -1, MAX_RUN_COUNT)
            return None if count == -1 else count
    return None


def with_run_count(headers: Headers, count: int) -> Headers:
    """``headers`` with ``run_count`` set to ``count`` (eventmq stores it the same way)."""
    return tuple((name, str(count) if name == "run_count" else value) for name, value in headers)


# --------------------------------------------------------------------------- bodies

_ERROR_KEY: Final = b'"error"'


def worker_error(body: bytes) -> tuple[str, str] | None:
    """``(type, message)`` when a worker REPLY body is zbus's ``{"error": ...}`` object.

    Anything else, eventmq's ``{"value": ...}`` included, is a result. The substring test
    keeps JSON parsing off the path of ordinary results.
    """
    if _ERROR_KEY not in body:
        return None
    try:
        data = json.loads(body)
    except (ValueError, RecursionError):
        return None
    if not isinstance(data, dict) or "error" not in data or "value" in data:
        return None
    error = data["error"]
    if isinstance(error, dict):
        kind, message = error.get("type", "Error"), error.get("message", "")
        return str(kind), str(message)
    return "Error", str(error)


def give_up_body(state: JobState | str, kind: str, message: str) -> bytes:
    """What a client gets when zbus ends a job without a result (ADR 0003 decision 4)."""
    return json.dumps(
        {"error": {"type": kind, "message": message}, "state": str(state)},
        separators=(",", ":"),
    ).encode()


def schedule_id(queue: str, body: bytes) -> str:
    """A schedule's id: sha1 of its queue and body, so re-sending it replaces it."""
    return hashlib.sha1(queue.encode() + b"\x00" + body, usedforsecurity=False).hexdigest()
