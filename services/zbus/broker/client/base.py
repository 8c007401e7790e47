"""What the broker clients send: the REQUEST options, headers and body; their DEALER
socket and the checks of their arguments.

A job's body is eventmq's JSON call; a call to a job registered by name on zbus workers
carries :data:`NO_PATH`, because eventmq's format requires a non-empty path.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Mapping, Sequence
from typing import Any, Final, TypedDict

import zmq

from zbus.broker.core import limits
from zbus.common.protocols import emqp
from zbus.common.protocols.errors import FrameValueError
from zbus.common.security import KeyPair, make_client

__all__ = [
    "DEFAULT_ENDPOINT",
    "DIALECT",
    "NO_PATH",
    "BatchOptions",
    "JobOptions",
    "call_body",
    "job_headers",
]

DEFAULT_ENDPOINT: Final = "tcp://127.0.0.1:47291"
#: ACK and KBYE are eventmq commands; bodies stay opaque (results are parsed here).
DIALECT: Final = emqp.Dialect(eventmq_commands=True)
#: The ``path`` of a call to a job registered by name on zbus workers.
NO_PATH: Final = "-"


class _CommonOptions(TypedDict, total=False):
    kwargs: Mapping[str, Any] | None
    path: str
    retries: int | None
    delay: float | None


class BatchOptions(_CommonOptions, total=False):
    """The options of :meth:`BrokerClient.submit_many`: every job of the batch gets them."""

    timeout: float | None


class OneJobOptions(_CommonOptions, total=False):
    args: Sequence[Any]
    job_id: str | None


class JobOptions(OneJobOptions, total=False):
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


OPTION_NAMES: Final = JobOptions.__required_keys__ | JobOptions.__optional_keys__


def _seconds_text(name: str, value: float, zero: str = "") -> str:
    seconds = limits.check_seconds(name, value, limits.MAX_SECONDS, zero=zero)
    return str(int(seconds)) if seconds.is_integer() else repr(seconds)


def job_headers(
    retries: int | None = None, timeout: float | None = None, delay: float | None = None
) -> emqp.Headers:
    """The REQUEST headers for these options (``reply-requested`` first, as eventmq sends).

    Raises:
        ValueError: naming the option, for a value outside its range (docs/broker.md,
            "Ranges"): retries 0..1000, timeout and delay 0..30 days (timeout 0: none).
    """
    headers: list[tuple[str, str]] = [("reply-requested", "")]
    if retries is not None:
        limits.check_count("retries", retries, 0, limits.MAX_RETRIES)
        headers.append(("retry-count", str(retries)))
    if timeout is not None:
        headers.append(("timeout", _seconds_text("timeout", timeout, "0: no timeout")))
    if delay is not None:
        headers.append(("delay", _seconds_text("delay", delay)))
    return tuple(headers)


def check_job(queue: str, job_id: str | None) -> None:
    """A queue name and a job id (when given) of 1 to 256 characters.

    Raises:
        ValueError: naming ``queue`` or ``job_id``.
    """
    limits.check_identifier("queue", queue, limits.MAX_QUEUE_CHARS)
    if job_id is not None:
        limits.check_identifier("job_id", job_id, limits.MAX_ID_CHARS)


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


def open_dealer(
    sock: zmq.Socket[Any],
    endpoint: str,
    ack_timeout: float,
    curve: tuple[KeyPair, bytes] | None = None,
) -> None:
    sock.linger = 0
    if curve is not None:
        # CURVE options take effect at connect, so they are set before it.
        try:
            make_client(sock, *curve)
        except Exception:
            sock.close(linger=0)  # e.g. a public key file given as the client's own
            raise
    # Nothing the broker sends may be dropped at its ROUTER while this client is busy
    # submitting, so this side queues without limit; it is drained on every call.
    sock.rcvhwm = 0
    sock.sndtimeo = max(1, int(ack_timeout * 1000))
    # A fixed identity: after a reconnect the broker still routes results to this client
    # (ADR 0003: results go to the submitter's last known identity).
    sock.setsockopt(zmq.ROUTING_ID, str(uuid.uuid4()).encode())
    sock.connect(endpoint)


def check_worker(
    queues: Sequence[str],
    concurrency: int,
    heartbeat_interval: float,
    misses: int,
    drain_timeout: float,
) -> None:
    """The arguments of a :class:`~zbus.broker.client.worker.Worker`, in the broker's
    ranges (docs/broker.md, "Ranges"): refused before any INFORM is sent.

    Raises:
        ValueError: naming the argument.
    """
    if isinstance(queues, str) or not queues or not all(queues):
        raise ValueError(f"queues: expected a sequence of non-empty names, got {queues!r}")
    limits.check_count("queues", len(queues), 1, limits.MAX_WORKER_QUEUES)
    for name in queues:
        limits.check_identifier("queues", name, limits.MAX_QUEUE_CHARS)
    limits.check_count("concurrency", concurrency, 1, limits.MAX_WORKER_SLOTS)
    limits.check_count("misses", misses, 1, limits.MAX_HEARTBEAT_MISSES)
    limits.check_seconds(
        "heartbeat_interval", heartbeat_interval, limits.MAX_HEARTBEAT_INTERVAL, positive=True
    )
    limits.check_seconds("drain_timeout", drain_timeout, limits.DAY, positive=True)


#: Jobs one ``submit_many`` keeps unacknowledged at most (its ``window``).
MAX_WINDOW: Final = 1_000_000
#: Results a client keeps for later ``result`` calls at most (``max_results``).
MAX_RESULTS: Final = 10_000_000
#: Seconds a client waits for an ACK at most (``ack_timeout``): one day.
MAX_ACK_TIMEOUT: Final = float(limits.DAY)


def check_window(window: int) -> int:
    return limits.check_count("window", window, 1, MAX_WINDOW)


def check_ack_timeout(ack_timeout: float) -> float:
    return limits.check_seconds("ack_timeout", ack_timeout, MAX_ACK_TIMEOUT, positive=True)


def check_max_results(max_results: int) -> int:
    return limits.check_count("max_results", max_results, 1, MAX_RESULTS)


def check_wait(timeout: float | None) -> float:
    """A wait's ``timeout``: None (no limit), or seconds >= 0 (infinity: no limit)."""
    if timeout is None:
        return math.inf
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not timeout >= 0:
        raise limits.RangeError(
            "timeout", timeout, "None or a number of seconds >= 0 (inf: no limit)"
        )
    try:
        return float(timeout)
    except OverflowError:  # an int beyond any float: no limit either
        return math.inf
