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

A broker that runs CURVE (``curve_secret_key``) is reached with
``curve=(this client's KeyPair, the broker's public key)``, e.g.
``(load_keys(Path("client.key_secret")), load_keys(Path("broker.key")).public)`` with
:func:`zbus.common.security.load_keys`. With a ZAP allow-list that does not list the
client's key the handshake fails, nothing reaches the broker, and a submit raises
:class:`BrokerUnavailable` once ``ack_timeout`` has passed.

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

The library is in parts; this module is its public face and re-exports their names:

- :mod:`zbus.broker.client.errors`: :class:`BrokerClientError` and its subclasses.
- :mod:`zbus.broker.client.base`: the endpoint, the job options
  (:class:`JobOptions`, :class:`BatchOptions`), REQUEST headers and bodies.
- :mod:`zbus.broker.client.tracker`: both clients' logic, written once and without I/O.
- :mod:`zbus.broker.client.blocking`: :class:`BrokerClient`.
- :mod:`zbus.broker.client.asyncio`: :class:`AsyncBrokerClient`.
"""

from __future__ import annotations

from zbus.broker.client.asyncio import AsyncBrokerClient
from zbus.broker.client.base import (
    DEFAULT_ENDPOINT,
    DIALECT,
    NO_PATH,
    BatchOptions,
    JobOptions,
    call_body,
    job_headers,
)
from zbus.broker.client.blocking import BrokerClient
from zbus.broker.client.errors import BrokerClientError, BrokerUnavailable, JobFailed

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
