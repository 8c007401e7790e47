"""The blocking broker client: :class:`BrokerClient`, one DEALER socket, no threads."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from types import TracebackType
from typing import Any, Final, Self, Unpack

import zmq

from zbus.broker.client.base import (
    DEFAULT_ENDPOINT,
    BatchOptions,
    JobOptions,
    OneJobOptions,
    open_dealer,
)
from zbus.broker.client.tracker import AckWait, JobTracker, TrackerViews
from zbus.common.clock import SYSTEM_CLOCK, Clock
from zbus.common.security import KeyPair
from zbus.common.wire import send_frames

__all__ = ["BrokerClient"]

_READ_EVERY: Final = 64  # submit_nowait reads what arrived every this many sends


class BrokerClient(TrackerViews):
    """Blocking client of the broker's client port.

    Args:
        endpoint: the broker's client ROUTER.
        ack_timeout: seconds a submit waits for the broker's ACK (and a send for room).
        max_results: results kept for later :meth:`result` calls; the oldest go first.
        context: the ZeroMQ context (default: the process-wide one).
        curve: ``(this client's key pair, the broker's public key)`` to talk to a broker
            that runs CURVE (see :mod:`zbus.common.security`). A broker with a ZAP
            allow-list that does not list the client's key fails the handshake, and the
            client sees no ACK: :class:`BrokerUnavailable`.
        clock: its monotonic time bounds the waits (default: the machine's).

    The submit methods take the keyword options of :class:`JobOptions`.

    Raises:
        ConfigError: ``curve``'s key pair has no secret key.
    """

    def __init__(
        self,
        endpoint: str = DEFAULT_ENDPOINT,
        *,
        ack_timeout: float = 5.0,
        max_results: int = 100_000,
        context: zmq.Context[Any] | None = None,
        curve: tuple[KeyPair, bytes] | None = None,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.endpoint = endpoint
        self.clock = clock
        self._tracker = tracker = JobTracker(max_results, ack_timeout)
        self.ack_timeout = tracker.ack_timeout
        self._sock: zmq.Socket[Any] = (context or zmq.Context.instance()).socket(zmq.DEALER)
        open_dealer(self._sock, endpoint, ack_timeout, curve)
        self._sent = 0
        self._closed = False

    def submit(self, queue: str, callable: str, **options: Unpack[JobOptions]) -> str:
        """Submit ``callable(*args, **kwargs)`` on ``queue``; returns once it is stored.

        Raises:
            BrokerUnavailable: no ACK within ``ack_timeout``.
            JobFailed: the broker refused the job (state ``"rejected"``).
        """
        job_id = self.submit_nowait(queue, callable, **options)
        tracker = self._tracker
        unacked = tracker.unacked
        deadline = self.clock.monotonic() + self.ack_timeout
        while job_id in unacked:
            if not self._read_until(deadline):
                raise tracker.unavailable(job_id)
        return tracker.answer(job_id)

    def submit_nowait(self, queue: str, callable: str, **options: Unpack[JobOptions]) -> str:
        """Send the REQUEST without waiting for its ACK (see :meth:`wait_acks`).

        Raises:
            BrokerUnavailable: not even room to send within ``ack_timeout``.
        """
        job_id, frames = self._tracker.request(queue, callable, options)
        try:
            send_frames(self._sock, frames)
        except zmq.Again:
            raise self._tracker.unavailable(job_id) from None
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
        clock = self.clock
        acks = AckWait(self._tracker, clock.monotonic(), timeout)
        while not acks.done:
            self._read_until(acks.deadline)
            acks.check(clock.monotonic())
        return acks.rejected()

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
            if tracker.window_full(window):
                deadline = self.clock.monotonic() + self.ack_timeout
                while tracker.window_full(window):
                    if not self._read_until(deadline):
                        raise tracker.stalled()
            ids.append(self.submit_nowait(queue, callable, args=args, **options))
        self.wait_acks()
        return ids

    def result(self, job_id: str, timeout: float | None = None) -> Any:
        """The value of job ``job_id``, waiting up to ``timeout`` seconds (None: forever).

        Raises:
            JobFailed: the broker gave up on the job (or refused it).
            TimeoutError: no result within ``timeout``.
        """
        tracker = self._tracker
        results = tracker.results
        deadline = tracker.result_deadline(self.clock.monotonic(), timeout)
        while job_id not in results:
            if not self._read_until(deadline):
                raise tracker.no_result(job_id, timeout)
        return results.pop(job_id).unwrap(job_id)

    def submit_and_wait(
        self,
        queue: str,
        callable: str,
        *,
        timeout: float | None = None,
        job_timeout: float | None = None,
        **options: Unpack[OneJobOptions],
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
        left = deadline - self.clock.monotonic()
        if left <= 0:
            return False
        # A day at most per poll (ZeroMQ's timeout is a C long); the caller loops.
        ms = -1 if math.isinf(left) else int(min(left, 86_400.0) * 1000) + 1
        self._sock.poll(ms, zmq.POLLIN)
        self._read()
        return True
