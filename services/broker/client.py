"""Clients of the job broker: submit jobs, learn they are stored, wait for their results.

:class:`BrokerClient` (blocking) and :class:`AsyncBrokerClient` (``zmq.asyncio``) speak
eMQP on the broker's client port (ADR 0003) with one DEALER socket each:

- :meth:`~BrokerClient.submit` sends a REQUEST and returns the job id once the broker has
  stored the job (its ACK). The job id is the REQUEST msgid: submitting the same id again
  runs nothing twice, it only asks for the job's state again, so a submit that raised
  :class:`BrokerUnavailable` can be repeated safely *with the same job id*.
- :meth:`~BrokerClient.result` waits for the job's result: its value, or
  :class:`JobFailed` once the broker gave up on it. Results that arrive while waiting for
  another job are kept (up to ``max_results``, oldest dropped first) for a later call;
  each result is handed out once.
- Pipelining, for throughput: :meth:`~BrokerClient.submit_nowait` sends without waiting
  and :meth:`~BrokerClient.wait_acks` then waits for every acknowledgement still missing;
  :meth:`~BrokerClient.submit_many` does both for a batch of argument lists, keeping at
  most ``window`` unacknowledged jobs in flight. A job the broker refuses (full, or a bad
  header) is listed by ``wait_acks`` and its :meth:`~BrokerClient.result` raises
  :class:`JobFailed` with state ``"rejected"``; :meth:`~BrokerClient.submit` raises it at once.

Job bodies are eventmq's JSON call, so these clients can drive eventmq jobmanagers too. A
call without a ``path`` names a job registered on zbus workers; its body carries
:data:`NO_PATH`, because eventmq's format requires a non-empty path.

Whatever arrives from the wire that is not a well-formed answer is counted in
``counters`` (``malformed``, ``unexpected``) and dropped, never raised to the caller.
eventmq's 5-frame hand-off notices are counted as ``handoffs`` and otherwise ignored.

Each client keeps one socket identity for its lifetime, so the results of its jobs still
reach it after ZeroMQ reconnects or the broker restarts (the broker answers the
submitter's last known identity). A client is used by one thread (or one event loop) at a
time; sockets close with linger 0, so :meth:`~BrokerClient.close` drops REQUESTs not yet
sent.

Example::

    with BrokerClient() as broker:
        job_id = broker.submit("default", "resize", args=["a.png", 64], retries=3)
        print(broker.result(job_id, timeout=30))
        ids = broker.submit_many("default", "noop", ([] for _ in range(10_000)))
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Final, Self, TypedDict, Unpack

import zmq
import zmq.asyncio

from services.common.protocols import emqp
from services.common.protocols.errors import FrameValueError, ProtocolError
from services.common.wire import send_frames

__all__ = [
    "DEFAULT_ENDPOINT",
    "DIALECT",
    "NO_PATH",
    "AsyncBrokerClient",
    "BatchOptions",
    "BrokerClient",
    "BrokerClientError",
    "BrokerUnavailable",
    "JobFailed",
    "JobOptions",
    "call_body",
    "job_headers",
]

log = logging.getLogger(__name__)

DEFAULT_ENDPOINT: Final = "tcp://127.0.0.1:47291"
#: ACK and KBYE are eventmq commands; bodies stay opaque (results are parsed here).
DIALECT: Final = emqp.Dialect(eventmq_commands=True)
#: The ``path`` of a call to a job registered by name on zbus workers.
NO_PATH: Final = "-"
_READ_EVERY: Final = 64  # submit_nowait reads what arrived every this many sends


class BrokerClientError(Exception):
    """Base of the errors the broker clients raise."""


class BrokerUnavailable(BrokerClientError, ConnectionError):
    """The broker did not acknowledge in time.

    The REQUESTs may still reach the broker later (ZeroMQ queues them), so submit them
    again with the same ``job_ids`` rather than new ones.
    """

    def __init__(self, job_ids: Sequence[str], waited: float) -> None:
        more = f" and {len(job_ids) - 3} more" if len(job_ids) > 3 else ""
        shown = ", ".join(job_ids[:3]) + more
        super().__init__(f"no acknowledgement from the broker after {waited:g}s for {shown}")
        self.job_ids = list(job_ids)
        self.waited = waited

    def __reduce__(self) -> tuple[Any, ...]:  # picklable, e.g. across process pools
        return type(self), (self.job_ids, self.waited)


class JobFailed(BrokerClientError):
    """The broker ended the job without a value.

    Attributes:
        job_id: the job.
        state: ``"failed"`` (its worker reported errors), ``"dead"`` (its attempts were
            lost: worker gone, timeout), ``"rejected"`` (never stored), or what the broker said.
        error_type, message: the last error, e.g. ``"ValueError"``, ``"bad input"``.
    """

    def __init__(self, job_id: str, state: str, error_type: str, message: str) -> None:
        super().__init__(f"job {job_id} {state}: {error_type}: {message}")
        self.job_id = job_id
        self.state = state
        self.error_type = error_type
        self.message = message

    def __reduce__(self) -> tuple[Any, ...]:
        return type(self), (self.job_id, self.state, self.error_type, self.message)


# --------------------------------------------------------------------------- requests


class _CommonOptions(TypedDict, total=False):
    kwargs: Mapping[str, Any] | None
    path: str
    retries: int | None
    delay: float | None


class BatchOptions(_CommonOptions, total=False):
    """The options of :meth:`BrokerClient.submit_many`: every job of the batch gets them."""

    timeout: float | None


class _OneJobOptions(_CommonOptions, total=False):
    args: Sequence[Any]
    job_id: str | None


class JobOptions(_OneJobOptions, total=False):
    """The keyword options of a submit (all optional).

    Attributes:
        args, kwargs: the call's arguments, JSON values.
        path: the module of ``callable`` for workers that import it (eventmq); empty for
            a job registered by name on zbus workers.
        job_id: the job's id (default: a new uuid4). Reuse it to resubmit safely.
        retries: the ``retry-count`` header (default: the broker's).
        timeout: seconds one run may take (``timeout`` header; default: none).
        delay: seconds before the first run (``delay`` header).
    """

    timeout: float | None


_OPTION_NAMES: Final = JobOptions.__required_keys__ | JobOptions.__optional_keys__


def _seconds_text(name: str, value: float) -> str:
    if not (math.isfinite(value) and value >= 0):
        raise ValueError(f"{name}: expected a number of seconds >= 0, got {value!r}")
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def job_headers(
    retries: int | None = None, timeout: float | None = None, delay: float | None = None
) -> emqp.Headers:
    """The REQUEST headers for these options (``reply-requested`` first, as eventmq sends)."""
    headers: list[tuple[str, str]] = [("reply-requested", "")]
    if retries is not None:
        if type(retries) is not int or retries < 0:
            raise ValueError(f"retries: expected a whole number >= 0, got {retries!r}")
        headers.append(("retry-count", str(retries)))
    if timeout is not None:
        headers.append(("timeout", _seconds_text("timeout", timeout)))
    if delay is not None:
        headers.append(("delay", _seconds_text("delay", delay)))
    return tuple(headers)


def call_body(
    callable: str, args: Sequence[Any] = (), kwargs: Mapping[str, Any] | None = None, path: str = ""
) -> bytes:
    """eventmq's JSON call body; ``path=""`` names a job registered on zbus workers.

    Raises:
        ValueError: when ``callable`` is empty.
        TypeError: when an argument is not something JSON can encode.
    """
    if not callable:
        raise ValueError("callable: expected a non-empty name")
    call = emqp.EventmqCall(
        callable=callable, path=path or NO_PATH, args=tuple(args), kwargs=dict(kwargs or {})
    )
    try:
        return emqp.build_call_body(call)
    except FrameValueError as exc:
        raise TypeError(f"job arguments must be JSON values: {exc}") from None


# --------------------------------------------------------------------------- answers


@dataclass(frozen=True, slots=True)
class _Outcome:
    """A job's result: ``value``, or the error fields when ``state`` is set."""

    value: Any = None
    state: str | None = None
    error_type: str = ""
    message: str = ""

    def unwrap(self, job_id: str) -> Any:
        if self.state is not None:
            raise JobFailed(job_id, self.state, self.error_type, self.message)
        return self.value


def _parse_outcome(body: bytes) -> _Outcome | None:
    """The outcome in a result REPLY body; ``None`` when it is neither value nor error."""
    try:
        data = json.loads(body)
    except (ValueError, RecursionError):
        return None
    if not isinstance(data, dict):
        return None
    if "value" in data:
        return _Outcome(data["value"])
    error = data.get("error")
    if error is None:
        return None
    state = str(data.get("state", "failed"))
    if isinstance(error, dict):
        return _Outcome(None, state, str(error.get("type", "Error")), str(error.get("message", "")))
    return _Outcome(None, state, "Error", str(error))


class _Tracker:
    """What both clients know, without I/O: missing ACKs, kept results, drop counters."""

    def __init__(self, max_results: int) -> None:
        if max_results < 1:
            raise ValueError(f"max_results: expected a number >= 1, got {max_results!r}")
        self.max_results = max_results
        self.unacked: dict[str, None] = {}  # an ordered set: oldest first
        self.results: dict[str, _Outcome] = {}
        self.acks = 0  # answers to submits seen; wait_acks measures progress by it
        self.counters = {"malformed": 0, "unexpected": 0, "handoffs": 0, "results_dropped": 0}
        self._headers: dict[tuple[int | None, float | None, float | None], emqp.Headers] = {}

    def request(self, queue: str, callable: str, options: JobOptions) -> tuple[str, list[bytes]]:
        """A new job id (unless given) and the REQUEST frames; the id now awaits its ACK."""
        unknown = options.keys() - _OPTION_NAMES
        if unknown:
            raise TypeError(f"unknown job options: {', '.join(sorted(unknown))}")
        key = (options.get("retries"), options.get("timeout"), options.get("delay"))
        headers = self._headers.get(key)
        if headers is None:
            headers = job_headers(*key)
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

    def keep(self, job_id: str, outcome: _Outcome) -> None:
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


def _rejected(tracker: _Tracker, job_ids: list[str]) -> list[str]:
    results = tracker.results
    return [j for j in job_ids if (o := results.get(j)) is not None and o.state == "rejected"]


def _dealer(sock: zmq.Socket[Any], endpoint: str, ack_timeout: float) -> None:
    sock.linger = 0
    # Nothing the broker sends may be dropped at its ROUTER while this client is busy
    # submitting, so this side queues without limit; it is drained on every call.
    sock.rcvhwm = 0
    sock.sndtimeo = max(1, int(ack_timeout * 1000))
    # A fixed identity: after a reconnect the broker still routes results to this client
    # (ADR 0003: results go to the submitter's last known identity).
    sock.setsockopt(zmq.ROUTING_ID, str(uuid.uuid4()).encode())
    sock.connect(endpoint)


def _check_window(window: int) -> int:
    if window < 1:
        raise ValueError(f"window: expected a number >= 1, got {window!r}")
    return window


def _check_timeout(ack_timeout: float) -> float:
    if not (math.isfinite(ack_timeout) and ack_timeout > 0):
        raise ValueError(f"ack_timeout: expected a number of seconds > 0, got {ack_timeout!r}")
    return ack_timeout


# --------------------------------------------------------------------------- blocking


class BrokerClient:
    """Blocking client of the broker's client port.

    Args:
        endpoint: the broker's client ROUTER.
        ack_timeout: seconds a submit waits for the broker's ACK (and a send for room).
        max_results: results kept for later :meth:`result` calls; the oldest go first.
        context: the ZeroMQ context (default: the process-wide one).

    The submit methods take the keyword options of :class:`JobOptions`.
    """

    def __init__(
        self,
        endpoint: str = DEFAULT_ENDPOINT,
        *,
        ack_timeout: float = 5.0,
        max_results: int = 100_000,
        context: zmq.Context[Any] | None = None,
    ) -> None:
        self.endpoint = endpoint
        self.ack_timeout = _check_timeout(ack_timeout)
        self._tracker = _Tracker(max_results)
        self._sock: zmq.Socket[Any] = (context or zmq.Context.instance()).socket(zmq.DEALER)
        _dealer(self._sock, endpoint, ack_timeout)
        self._sent = 0
        self._closed = False

    @property
    def counters(self) -> dict[str, int]:
        """Messages dropped (``malformed``, ``unexpected``), ``handoffs``, ``results_dropped``."""
        return dict(self._tracker.counters)

    @property
    def pending_acks(self) -> int:
        """Submitted jobs the broker has not acknowledged yet."""
        return len(self._tracker.unacked)

    def submit(self, queue: str, callable: str, **options: Unpack[JobOptions]) -> str:
        """Submit ``callable(*args, **kwargs)`` on ``queue``; returns once it is stored.

        Raises:
            BrokerUnavailable: no ACK within ``ack_timeout``.
            JobFailed: the broker refused the job (state ``"rejected"``).
        """
        job_id = self.submit_nowait(queue, callable, **options)
        unacked = self._tracker.unacked
        deadline = time.monotonic() + self.ack_timeout
        while job_id in unacked:
            if not self._read_until(deadline):
                del unacked[job_id]  # answered late or never: wait_acks must not wait for it
                raise BrokerUnavailable([job_id], self.ack_timeout)
        rejection = self._tracker.take_rejection(job_id)
        if rejection is not None:
            raise rejection
        return job_id

    def submit_nowait(self, queue: str, callable: str, **options: Unpack[JobOptions]) -> str:
        """Send the REQUEST without waiting for its ACK (see :meth:`wait_acks`).

        Raises:
            BrokerUnavailable: not even room to send within ``ack_timeout``.
        """
        job_id, frames = self._tracker.request(queue, callable, options)
        try:
            send_frames(self._sock, frames)
        except zmq.Again:
            self._tracker.unacked.pop(job_id, None)
            raise BrokerUnavailable([job_id], self.ack_timeout) from None
        self._sent += 1
        if self._sent % _READ_EVERY == 0:
            self._read()
        return job_id

    def wait_acks(self, timeout: float | None = None) -> list[str]:
        """Wait until every submitted job is acknowledged.

        Args:
            timeout: at most this many seconds in all; ``None`` waits as long as answers
                keep coming, until none arrived for ``ack_timeout`` seconds.

        Returns:
            The ids of jobs the broker refused (their :meth:`result` raises JobFailed).

        Raises:
            BrokerUnavailable: naming the jobs still unacknowledged; they stay pending, so
                a later ``wait_acks`` may still see them answered.
        """
        tracker = self._tracker
        waiting = list(tracker.unacked)
        start = time.monotonic()
        end = math.inf if timeout is None else start + timeout
        while tracker.unacked:
            before = tracker.acks
            deadline = min(end, time.monotonic() + self.ack_timeout)
            while tracker.unacked and tracker.acks == before and self._read_until(deadline):
                pass
            if tracker.unacked and (tracker.acks == before or time.monotonic() >= end):
                raise BrokerUnavailable(list(tracker.unacked), time.monotonic() - start)
        return _rejected(tracker, waiting)

    def submit_many(
        self,
        queue: str,
        callable: str,
        args_list: Iterable[Sequence[Any]],
        *,
        window: int = 1000,
        **options: Unpack[BatchOptions],
    ) -> list[str]:
        """Submit one job per item of ``args_list``, pipelined; returns their ids in order.

        At most ``window`` jobs are unacknowledged at any time; returns once all are
        acknowledged. Refused jobs are logged and their :meth:`result` raises JobFailed.

        Raises:
            BrokerUnavailable: acknowledgements stopped coming for ``ack_timeout``.
        """
        tracker = self._tracker
        ids: list[str] = []
        for args in args_list:
            if len(tracker.unacked) >= _check_window(window):
                deadline = time.monotonic() + self.ack_timeout
                while len(tracker.unacked) >= window:
                    if not self._read_until(deadline):
                        raise BrokerUnavailable(list(tracker.unacked), self.ack_timeout)
            ids.append(self.submit_nowait(queue, callable, args=args, **options))
        self.wait_acks()
        return ids

    def result(self, job_id: str, timeout: float | None = None) -> Any:
        """The value of job ``job_id``, waiting up to ``timeout`` seconds (None: forever).

        Raises:
            JobFailed: the broker gave up on the job (or refused it).
            TimeoutError: no result within ``timeout``.
        """
        results = self._tracker.results
        deadline = math.inf if timeout is None else time.monotonic() + timeout
        while job_id not in results:
            if not self._read_until(deadline):
                raise TimeoutError(f"no result for job {job_id} within {timeout:g}s")
        return results.pop(job_id).unwrap(job_id)

    def submit_and_wait(
        self,
        queue: str,
        callable: str,
        *,
        timeout: float | None = None,
        job_timeout: float | None = None,
        **options: Unpack[_OneJobOptions],
    ) -> Any:
        """:meth:`submit` then :meth:`result`: ``timeout`` bounds the wait for the result,
        ``job_timeout`` is the job's own ``timeout`` option."""
        job_id = self.submit(queue, callable, timeout=job_timeout, **options)
        return self.result(job_id, timeout)

    def close(self) -> None:
        """Close the socket (linger 0: REQUESTs not yet sent are dropped)."""
        if not self._closed:
            self._closed = True
            self._sock.close(linger=0)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def _read(self) -> bool:
        """Take every message already arrived; True if there was one."""
        got = False
        sock, feed = self._sock, self._tracker.feed
        while True:
            try:
                frames = sock.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return got
            got = True
            feed(frames)

    def _read_until(self, deadline: float) -> bool:
        """Wait for messages until ``deadline`` and take them; False once it has passed."""
        if self._read():
            return True
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        ms = -1 if math.isinf(left) else int(left * 1000) + 1
        self._sock.poll(ms, zmq.POLLIN)
        self._read()
        return True


# --------------------------------------------------------------------------- asyncio


class AsyncBrokerClient:
    """The asyncio flavour of :class:`BrokerClient`, with the same methods as coroutines.

    One reader task takes every message and hands ACKs and results to the coroutines
    waiting for them, so any number of coroutines may submit and wait at once.
    """

    def __init__(
        self,
        endpoint: str = DEFAULT_ENDPOINT,
        *,
        ack_timeout: float = 5.0,
        max_results: int = 100_000,
        context: zmq.asyncio.Context | None = None,
    ) -> None:
        self.endpoint = endpoint
        self.ack_timeout = _check_timeout(ack_timeout)
        self._tracker = _Tracker(max_results)
        ctx = context or zmq.asyncio.Context.instance()
        self._sock: zmq.asyncio.Socket = ctx.socket(zmq.DEALER)
        _dealer(self._sock, endpoint, ack_timeout)
        self._reader: asyncio.Task[None] | None = None
        self._ack_waiters: dict[str, asyncio.Future[None]] = {}
        self._result_waiters: dict[str, list[asyncio.Future[_Outcome]]] = {}
        self._progress = asyncio.Event()  # set whenever a submit is answered
        self._acks_seen = 0
        self._closed = False

    @property
    def counters(self) -> dict[str, int]:
        """As :attr:`BrokerClient.counters`."""
        return dict(self._tracker.counters)

    @property
    def pending_acks(self) -> int:
        return len(self._tracker.unacked)

    async def submit(self, queue: str, callable: str, **options: Unpack[JobOptions]) -> str:
        """As :meth:`BrokerClient.submit`."""
        job_id = await self.submit_nowait(queue, callable, **options)
        if job_id in self._tracker.unacked:
            waiter = self._ack_waiters.get(job_id)
            if waiter is None:
                waiter = self._ack_waiters[job_id] = asyncio.get_running_loop().create_future()
            try:
                async with asyncio.timeout(self.ack_timeout):
                    await asyncio.shield(waiter)
            except TimeoutError:
                self._ack_waiters.pop(job_id, None)
                self._tracker.unacked.pop(job_id, None)
                raise BrokerUnavailable([job_id], self.ack_timeout) from None
        rejection = self._tracker.take_rejection(job_id)
        if rejection is not None:
            raise rejection
        return job_id

    async def submit_nowait(self, queue: str, callable: str, **options: Unpack[JobOptions]) -> str:
        """As :meth:`BrokerClient.submit_nowait` (it waits only for room to send)."""
        self._start_reader()
        job_id, frames = self._tracker.request(queue, callable, options)
        try:
            try:  # the common case, without a timer
                await self._sock.send_multipart(frames, zmq.NOBLOCK)
            except zmq.Again:
                async with asyncio.timeout(self.ack_timeout):
                    await self._sock.send_multipart(frames)
        except (TimeoutError, zmq.Again):
            self._tracker.unacked.pop(job_id, None)
            raise BrokerUnavailable([job_id], self.ack_timeout) from None
        return job_id

    async def wait_acks(self, timeout: float | None = None) -> list[str]:  # noqa: ASYNC109
        """As :meth:`BrokerClient.wait_acks`."""
        tracker = self._tracker
        waiting = list(tracker.unacked)
        loop = asyncio.get_running_loop()
        start = loop.time()
        end = math.inf if timeout is None else start + timeout
        while tracker.unacked:
            before = tracker.acks
            deadline = min(end, loop.time() + self.ack_timeout)
            while tracker.unacked and tracker.acks == before:
                left = deadline - loop.time()
                if left <= 0:
                    raise BrokerUnavailable(list(tracker.unacked), loop.time() - start)
                self._progress.clear()
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(left):
                        await self._progress.wait()
            if tracker.unacked and loop.time() >= end:
                raise BrokerUnavailable(list(tracker.unacked), loop.time() - start)
        return _rejected(tracker, waiting)

    async def submit_many(
        self,
        queue: str,
        callable: str,
        args_list: Iterable[Sequence[Any]],
        *,
        window: int = 1000,
        **options: Unpack[BatchOptions],
    ) -> list[str]:
        """As :meth:`BrokerClient.submit_many`."""
        tracker = self._tracker
        ids: list[str] = []
        for args in args_list:
            while len(tracker.unacked) >= _check_window(window):
                self._progress.clear()
                try:
                    async with asyncio.timeout(self.ack_timeout):
                        await self._progress.wait()
                except TimeoutError:
                    raise BrokerUnavailable(list(tracker.unacked), self.ack_timeout) from None
            ids.append(await self.submit_nowait(queue, callable, args=args, **options))
        await self.wait_acks()
        return ids

    async def result(self, job_id: str, timeout: float | None = None) -> Any:  # noqa: ASYNC109
        """As :meth:`BrokerClient.result`."""
        self._start_reader()
        outcome = self._tracker.results.pop(job_id, None)
        if outcome is None:
            waiter: asyncio.Future[_Outcome] = asyncio.get_running_loop().create_future()
            self._result_waiters.setdefault(job_id, []).append(waiter)
            try:
                async with asyncio.timeout(timeout):
                    outcome = await waiter
            except TimeoutError:
                raise TimeoutError(f"no result for job {job_id} within {timeout:g}s") from None
            finally:
                waiters = self._result_waiters.get(job_id)
                if waiters is not None and waiter in waiters:
                    waiters.remove(waiter)
                    if not waiters:
                        del self._result_waiters[job_id]
        return outcome.unwrap(job_id)

    async def submit_and_wait(
        self,
        queue: str,
        callable: str,
        *,
        timeout: float | None = None,  # noqa: ASYNC109
        job_timeout: float | None = None,
        **options: Unpack[_OneJobOptions],
    ) -> Any:
        """As :meth:`BrokerClient.submit_and_wait`."""
        job_id = await self.submit(queue, callable, timeout=job_timeout, **options)
        return await self.result(job_id, timeout)

    def close(self) -> None:
        """Stop the reader and close the socket (linger 0)."""
        if self._closed:
            return
        self._closed = True
        if self._reader is not None:
            self._reader.cancel()
        self._sock.close(linger=0)

    async def aclose(self) -> None:
        """:meth:`close`, then wait for the reader task to end."""
        reader = self._reader
        self.close()
        if reader is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await reader

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    def _start_reader(self) -> None:
        if self._closed:
            raise BrokerClientError("the client is closed")
        if self._reader is None:
            self._reader = asyncio.create_task(self._read_loop(), name="zbus-broker-client")

    async def _read_loop(self) -> None:
        sock, feed, dispatch = self._sock, self._tracker.feed, self._dispatch
        try:
            while True:
                await sock.poll()
                # Take everything that has arrived before waiting again.
                while True:
                    try:
                        frames = await sock.recv_multipart(zmq.NOBLOCK)
                    except zmq.Again:
                        break
                    dispatch(feed(frames))
        except zmq.ZMQError as exc:  # the socket closed under the reader
            if not self._closed:
                log.error("broker client reader stopped", extra={"error": str(exc)})

    def _dispatch(self, job_id: str | None) -> None:
        if job_id is None:
            return
        tracker = self._tracker
        if tracker.acks != self._acks_seen:
            self._acks_seen = tracker.acks
            self._progress.set()
        if job_id not in tracker.unacked:
            ack = self._ack_waiters.pop(job_id, None)
            if ack is not None and not ack.done():
                ack.set_result(None)
        if job_id in tracker.results:
            waiters = self._result_waiters.pop(job_id, None)
            if waiters:
                outcome = tracker.results.pop(job_id)
                for waiter in waiters:
                    if not waiter.done():
                        waiter.set_result(outcome)
