"""The asyncio broker client: :class:`AsyncBrokerClient`, on ``zmq.asyncio``."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from collections.abc import Iterable, Sequence
from types import TracebackType
from typing import Any, Self, Unpack

import zmq
import zmq.asyncio

from zbus.broker.client.base import (
    DEFAULT_ENDPOINT,
    BatchOptions,
    JobOptions,
    OneJobOptions,
    open_dealer,
)
from zbus.broker.client.errors import BrokerClientError
from zbus.broker.client.tracker import AckWait, JobResult, JobTracker, TrackerViews
from zbus.common.security import KeyPair

__all__ = ["AsyncBrokerClient"]

# The client library logs under its public module's name, whichever part logs.
log = logging.getLogger("zbus.broker.client")


class AsyncBrokerClient(TrackerViews):
    """The asyncio flavour of :class:`BrokerClient`, with the same methods as coroutines.

    One reader task takes every message and hands ACKs and results to the coroutines
    waiting for them, so any number of coroutines may submit and wait at once.

    Args:
        endpoint, ack_timeout, max_results, curve: as for :class:`BrokerClient`.
        context: the ``zmq.asyncio`` context (default: the process-wide one).
    """

    def __init__(
        self,
        endpoint: str = DEFAULT_ENDPOINT,
        *,
        ack_timeout: float = 5.0,
        max_results: int = 100_000,
        context: zmq.asyncio.Context | None = None,
        curve: tuple[KeyPair, bytes] | None = None,
    ) -> None:
        self.endpoint = endpoint
        self._tracker = tracker = JobTracker(max_results, ack_timeout)
        self.ack_timeout = tracker.ack_timeout
        ctx = context or zmq.asyncio.Context.instance()
        self._sock: zmq.asyncio.Socket = ctx.socket(zmq.DEALER)
        open_dealer(self._sock, endpoint, ack_timeout, curve)
        self._reader: asyncio.Task[None] | None = None
        self._ack_waiters: dict[str, asyncio.Future[None]] = {}
        self._result_waiters: dict[str, list[asyncio.Future[JobResult]]] = {}
        self._progress = asyncio.Event()  # set whenever a submit is answered
        self._acks_seen = 0
        self._closed = False

    async def submit(self, queue: str, callable: str, **options: Unpack[JobOptions]) -> str:
        """As :meth:`BrokerClient.submit`."""
        job_id = await self.submit_nowait(queue, callable, **options)
        tracker = self._tracker
        if job_id in tracker.unacked:
            waiter = self._ack_waiters.get(job_id)
            if waiter is None:
                waiter = self._ack_waiters[job_id] = asyncio.get_running_loop().create_future()
            try:
                async with asyncio.timeout(self.ack_timeout):
                    await asyncio.shield(waiter)
            except TimeoutError:
                self._ack_waiters.pop(job_id, None)
                raise tracker.unavailable(job_id) from None
        return tracker.answer(job_id)

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
            raise self._tracker.unavailable(job_id) from None
        return job_id

    async def wait_acks(self, timeout: float | None = None) -> list[str]:  # noqa: ASYNC109
        """As :meth:`BrokerClient.wait_acks`."""
        loop = asyncio.get_running_loop()
        acks = AckWait(self._tracker, loop.time(), timeout)
        while not acks.done:
            if acks.deadline > loop.time():
                self._progress.clear()
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout_at(acks.deadline):
                        await self._progress.wait()
            acks.check(loop.time())
        return acks.rejected()

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
            while tracker.window_full(window):
                self._progress.clear()
                try:
                    async with asyncio.timeout(self.ack_timeout):
                        await self._progress.wait()
                except TimeoutError:
                    raise tracker.stalled() from None
            ids.append(await self.submit_nowait(queue, callable, args=args, **options))
        await self.wait_acks()
        return ids

    async def result(self, job_id: str, timeout: float | None = None) -> Any:  # noqa: ASYNC109
        """As :meth:`BrokerClient.result`."""
        tracker = self._tracker
        loop = asyncio.get_running_loop()
        deadline = tracker.result_deadline(loop.time(), timeout)
        self._start_reader()
        outcome = tracker.take_result(job_id)
        if outcome is None:
            waiter: asyncio.Future[JobResult] = loop.create_future()
            self._result_waiters.setdefault(job_id, []).append(waiter)
            try:
                async with asyncio.timeout_at(None if math.isinf(deadline) else deadline):
                    outcome = await waiter
            except TimeoutError:
                raise tracker.no_result(job_id, timeout) from None
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
        **options: Unpack[OneJobOptions],
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
