"""The bookkeeping both broker clients share, without I/O.

:class:`JobTracker` builds REQUESTs and takes what the broker sends: it knows the jobs
still waiting for their ACK, keeps results (each an :class:`JobResult`) until they are
asked for, and counts what it drops.
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
    check_job,
    check_max_results,
    job_headers,
)
from zbus.broker.client.errors import JobFailed
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
    """What both clients know, without I/O: missing ACKs, kept results, drop counters."""

    def __init__(self, max_results: int) -> None:
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

    def take_rejection(self, job_id: str) -> JobFailed | None:
        outcome = self.results.get(job_id)
        if outcome is None or outcome.state != "rejected":
            return None
        del self.results[job_id]
        return JobFailed(job_id, outcome.state, outcome.error_type, outcome.message)


def rejected_ids(tracker: JobTracker, job_ids: list[str]) -> list[str]:
    results = tracker.results
    return [j for j in job_ids if (o := results.get(j)) is not None and o.state == "rejected"]
