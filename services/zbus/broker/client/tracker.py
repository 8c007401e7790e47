"""The broker client written once, without I/O: the shells
(:mod:`zbus.broker.client.blocking`, :mod:`zbus.broker.client.asyncio`) move the frames,
wait, and pass the time in.

:class:`JobTracker` checks the options and builds REQUESTs, takes what the broker sends,
and decides what each call answers: it knows the jobs still waiting for their ACK, keeps
results (each a :class:`JobResult`) until they are asked for, counts what it drops, and
names the error a call raises once its wait is over. :class:`AckWait` is one
``wait_acks``: when it gives up, from the ACKs that came and the time it is given.
"""

from __future__ import annotations

import json
import logging
import uuid
from dataclasses import dataclass
from typing import Any

from zbus.broker.client.base import (
    DIALECT,
    OPTION_NAMES,
    JobOptions,
    call_body,
    check_ack_timeout,
    check_job,
    check_max_results,
    check_wait,
    check_window,
    job_headers,
)
from zbus.broker.client.errors import BrokerUnavailable, JobFailed
from zbus.common.protocols import emqp
from zbus.common.protocols.errors import ProtocolError

# The client library logs under its public module's name, whichever part logs.
log = logging.getLogger("zbus.broker.client")


@dataclass(frozen=True, slots=True)
class JobResult:
    """A job's result: ``value``, or the error fields when ``state`` is set."""

    value: Any = None
    state: str | None = None
    error_type: str = ""
    message: str = ""

    def unwrap(self, job_id: str) -> Any:
        if self.state is not None:
            raise JobFailed(job_id, self.state, self.error_type, self.message)
        return self.value


def _parse_outcome(body: bytes) -> JobResult | None:
    """The outcome in a result REPLY body; ``None`` when it is neither value nor error."""
    try:
        data = json.loads(body)
    except (ValueError, RecursionError):
        return None
    if not isinstance(data, dict):
        return None
    if "value" in data:
        return JobResult(data["value"])
    error = data.get("error")
    if error is None:
        return None
    state = str(data.get("state", "failed"))
    if isinstance(error, dict):
        return JobResult(
            None, state, str(error.get("type", "Error")), str(error.get("message", ""))
        )
    return JobResult(None, state, "Error", str(error))


class JobTracker:
    """What both clients know and decide, without I/O: missing ACKs, kept results, drop
    counters, and the answer of each call.

    Raises:
        ValueError: ``ack_timeout`` or ``max_results`` out of range.
    """

    def __init__(self, max_results: int, ack_timeout: float) -> None:
        self.ack_timeout = check_ack_timeout(ack_timeout)
        self.max_results = check_max_results(max_results)
        self.unacked: dict[str, None] = {}  # an ordered set: oldest first
        self.results: dict[str, JobResult] = {}
        self.acks = 0  # answers to submits seen; wait_acks measures progress by it
        self.counters = {"malformed": 0, "unexpected": 0, "handoffs": 0, "results_dropped": 0}
        self._headers: dict[tuple[object, ...], emqp.Headers] = {}

    def request(self, queue: str, callable: str, options: JobOptions) -> tuple[str, list[bytes]]:
        """A new job id (unless given) and the REQUEST frames; the id now awaits its ACK."""
        unknown = options.keys() - OPTION_NAMES
        if unknown:
            raise TypeError(f"unknown job options: {', '.join(sorted(unknown))}")
        check_job(queue, options.get("job_id") or None)
        values = (options.get("retries"), options.get("timeout"), options.get("delay"))
        # With the types: True == 1 and 1.0 == 1 as keys, but only an int is a count.
        key = (*values, *map(type, values))
        headers = self._headers.get(key)
        if headers is None:
            headers = job_headers(*values)
            if len(self._headers) < 64:
                self._headers[key] = headers
        body = call_body(
            callable, options.get("args", ()), options.get("kwargs"), options.get("path", "")
        )
        job_id = options.get("job_id") or str(uuid.uuid4())
        frames = emqp.encode(emqp.Request(job_id, queue, headers, body), DIALECT)
        self.unacked[job_id] = None
        return job_id, frames

    def feed(self, frames: list[bytes]) -> str | None:
        """Take one message; returns the job id it answers (ACK or result), if any."""
        try:
            cmd = emqp.decode(frames, DIALECT)
        except ProtocolError as exc:
            self.counters["malformed"] += 1
            log.debug("malformed message from the broker dropped", extra={"error": str(exc)})
            return None
        if isinstance(cmd, emqp.Ack):
            if cmd.ref_id in self.unacked:  # otherwise late, after a BrokerUnavailable
                del self.unacked[cmd.ref_id]
                self.acks += 1
            return cmd.ref_id
        if isinstance(cmd, emqp.Reply):
            job_id = cmd.request_id
            if job_id is None:
                self.counters["handoffs"] += 1  # eventmq: "handed to a worker", no result
                return None
            outcome = _parse_outcome(cmd.body)
            if outcome is None:
                self.counters["malformed"] += 1
                log.debug("result with a malformed body dropped", extra={"job_id": job_id})
                return None
            # A REPLY also answers a submit: a duplicate of a finished job, or a refusal.
            if job_id in self.unacked:
                del self.unacked[job_id]
                self.acks += 1
                if outcome.state == "rejected":
                    log.warning("broker refused job", extra={"job_id": job_id})
            self.keep(job_id, outcome)
            return job_id
        if isinstance(cmd, emqp.Heartbeat | emqp.Disconnect | emqp.Kbye):
            return None  # the broker's liveness is not the client's concern: ZeroMQ reconnects
        self.counters["unexpected"] += 1
        log.debug("unexpected command from the broker dropped", extra={"command": cmd.COMMAND})
        return None

    def keep(self, job_id: str, outcome: JobResult) -> None:
        results = self.results
        results.pop(job_id, None)  # a repeated result moves to the newest end
        results[job_id] = outcome
        if len(results) > self.max_results:
            del results[next(iter(results))]
            self.counters["results_dropped"] += 1

    def answer(self, job_id: str) -> str:
        """What a submit of ``job_id`` returns once its ACK came: the id.

        Raises:
            JobFailed: the broker refused the job (state ``"rejected"``).
        """
        outcome = self.results.get(job_id)
        if outcome is None or outcome.state != "rejected":
            return job_id
        del self.results[job_id]
        raise JobFailed(job_id, outcome.state, outcome.error_type, outcome.message)

    def unavailable(self, job_id: str) -> BrokerUnavailable:
        """The error of a submit whose REQUEST could not be sent or was not acknowledged
        in time; ``job_id`` no longer awaits its ACK (answered late or never:
        ``wait_acks`` must not wait for it)."""
        self.unacked.pop(job_id, None)
        return BrokerUnavailable([job_id], self.ack_timeout)

    def window_full(self, window: int) -> bool:
        """Whether ``submit_many`` must wait for ACKs before its next REQUEST.

        Raises:
            ValueError: ``window`` out of range.
        """
        return len(self.unacked) >= check_window(window)

    def stalled(self) -> BrokerUnavailable:
        """The error of a ``submit_many`` whose ACKs stopped coming for ``ack_timeout``."""
        return BrokerUnavailable(list(self.unacked), self.ack_timeout)

    def result_deadline(self, now: float, timeout: float | None) -> float:
        """When a ``result`` call started at ``now`` gives up (infinity: never).

        Raises:
            ValueError: ``timeout`` is not None or seconds >= 0.
        """
        return now + check_wait(timeout)

    def take_result(self, job_id: str) -> JobResult | None:
        """The kept result of ``job_id``, handed out once."""
        return self.results.pop(job_id, None)

    def no_result(self, job_id: str, timeout: float | None) -> TimeoutError:
        """The error of a ``result`` call whose ``timeout`` passed."""
        return TimeoutError(f"no result for job {job_id} within {timeout:g}s")


class AckWait:
    """One ``wait_acks`` from ``now``: it waits while ACKs keep coming, up to
    ``ack_timeout`` seconds between two and ``timeout`` seconds in all.

    The shell waits until :attr:`deadline` (or an ACK), then calls :meth:`check` with the
    time, as long as :attr:`done` is false; then :meth:`rejected` is the answer.

    Raises:
        ValueError: ``timeout`` is not None or seconds >= 0.
    """

    __slots__ = ("_acks", "_end", "_start", "_tracker", "deadline", "waiting")

    def __init__(self, tracker: JobTracker, now: float, timeout: float | None) -> None:
        self._tracker = tracker
        self.waiting = list(tracker.unacked)
        self._start = now
        self._end = now + check_wait(timeout)
        self._acks = tracker.acks
        #: When to give up unless an ACK comes before.
        self.deadline = min(self._end, now + tracker.ack_timeout)

    @property
    def done(self) -> bool:
        """Every job is acknowledged."""
        return not self._tracker.unacked

    def check(self, now: float) -> None:
        """After a wait: a new :attr:`deadline` if ACKs came, else give up once it passed.

        Raises:
            BrokerUnavailable: naming the jobs still unacknowledged; they stay pending, so
                a later ``wait_acks`` may still see them answered.
        """
        tracker = self._tracker
        if not tracker.unacked:
            return
        if tracker.acks != self._acks:
            if now < self._end:
                self._acks = tracker.acks
                self.deadline = min(self._end, now + tracker.ack_timeout)
                return
        elif now < self.deadline:
            return
        raise BrokerUnavailable(list(tracker.unacked), now - self._start)

    def rejected(self) -> list[str]:
        """The ids of the waited-for jobs the broker refused."""
        results = self._tracker.results
        return [
            j for j in self.waiting if (o := results.get(j)) is not None and o.state == "rejected"
        ]


class TrackerViews:
    """What both broker clients show of their :class:`JobTracker`, read-only."""

    _tracker: JobTracker

    @property
    def counters(self) -> dict[str, int]:
        """Messages dropped (``malformed``, ``unexpected``), ``handoffs``, ``results_dropped``."""
        return dict(self._tracker.counters)

    @property
    def pending_acks(self) -> int:
        """Submitted jobs the broker has not acknowledged yet."""
        return len(self._tracker.unacked)
