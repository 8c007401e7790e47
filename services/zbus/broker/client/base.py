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


def _dealer(
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


def _check_window(window: int) -> int:
    if window < 1:
        raise ValueError(f"window: expected a number >= 1, got {window!r}")
    return window


def _check_timeout(ack_timeout: float) -> float:
    if not (math.isfinite(ack_timeout) and ack_timeout > 0):
        raise ValueError(f"ack_timeout: expected a number of seconds > 0, got {ack_timeout!r}")
    return ack_timeout
