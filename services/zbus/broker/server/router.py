"""The broker's routing thread: both ROUTER sockets, the core and the store writer.

One round: take what is queued on the sockets (up to batch_max messages), feed it to the
core, let the core act on the time, write every changed job in one transaction, and only
then send what the core wants sent (ADR 0003). Admin operations run in the same thread,
between rounds, so the core is never shared.

The clock is read once per round after the poll, monotonic and wall time, and both go
to every input of that round (the core's deadlines are monotonic; see
:mod:`zbus.broker.core.broker`); the poll's timeout reads the monotonic clock once more.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import logging
import math
import queue
import time
from collections.abc import Callable
from typing import Any, TypeVar

import zmq

from zbus.broker.core.broker import BrokerCore
from zbus.broker.core.interface import CoreConfig, OutOfRange
from zbus.broker.server.config import BrokerSettings
from zbus.broker.server.metrics import BrokerMetrics
from zbus.broker.server.store import JobStore, StoreError
from zbus.common.clock import Clock
from zbus.common.protocols import emqp
from zbus.common.protocols.errors import ProtocolError
from zbus.common.rejects import LogLimiter, reject_reason
from zbus.common.threads import SocketThread
from zbus.common.wire import send_frames

log = logging.getLogger(__name__)

POLL_MS = 100
PURGE_EVERY = 60.0
_REPAIRS_LOGGED = 100  # repaired rows logged one by one at start; the rest are counted
T = TypeVar("T")
AdminCall = Callable[[BrokerCore, float, float], Any]  # (core, monotonic now, wall)


class Router(SocketThread):
    def __init__(
        self,
        ctx: zmq.Context[Any],
        settings: BrokerSettings,
        store: JobStore,
        metrics: BrokerMetrics,
        clock: Clock,
        secure: Callable[[zmq.Socket[Any]], None],
    ) -> None:
        super().__init__("broker-router", ctx, clock)
        self.settings = settings
        self.store = store
        self.metrics = metrics
        self.secure = secure
        self.dialect = emqp.Dialect(eventmq_commands=True, json_queues=settings.compat == "eventmq")
        self.endpoints: dict[str, str] = {}
        self.wake_endpoint = f"inproc://zbus-broker-wake-{id(self):x}"
        self._calls: queue.SimpleQueue[tuple[AdminCall, concurrent.futures.Future[Any]]] = (
            queue.SimpleQueue()
        )
        self._limiter = LogLimiter()
        self._next_purge = -math.inf  # monotonic
        self._next_gauges = -math.inf  # monotonic

    # ------------------------------------------------------------------ control
    def submit_call(self, fn: AdminCall) -> concurrent.futures.Future[Any]:
        """Run ``fn(core, now, wall)`` in the routing thread; its changes are durable on
        return. ``now`` is monotonic, ``wall`` wall time."""
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        self._calls.put((fn, future))
        return future

    def close(self) -> None:
        for name in ("clients", "workers", "wake"):
            sock = getattr(self, name, None)
            if sock is not None:
                sock.close(linger=0)
        while not self._calls.empty():
            _, future = self._calls.get_nowait()
            future.set_exception(RuntimeError("the broker is stopping"))

    def open(self) -> None:
        s = self.settings
        self.clients = self.ctx.socket(zmq.ROUTER)
        self.workers = self.ctx.socket(zmq.ROUTER)
        for name, sock, port in (
            ("clients", self.clients, s.client_port),
            ("workers", self.workers, s.worker_port),
        ):
            sock.linger = 0
            sock.maxmsgsize = 16 * 1024 * 1024
            sock.rcvhwm = sock.sndhwm = 100_000
            self.secure(sock)
            sock.bind(f"tcp://{s.host}:{port}")
            self.endpoints[name] = sock.getsockopt_string(zmq.LAST_ENDPOINT)
        self.wake = self.ctx.socket(zmq.PULL)
        self.wake.linger = 0
        self.wake.bind(self.wake_endpoint)
        jobs, schedules = self.store.load()
        config = CoreConfig(
            heartbeat_interval=s.heartbeat_interval,
            heartbeat_misses=s.heartbeat_misses,
            default_retries=s.default_retries,
            backoff_base=s.backoff_base,
            backoff_max=s.backoff_max,
            compat=s.compat,
            max_queued=s.max_queued,
        )
        self.core = BrokerCore(
            config, jobs, schedules, now=self.clock.monotonic(), wall=self.clock.time()
        )
        self.metrics.counters(self.core.counters)
        for note in self.core.repairs[:_REPAIRS_LOGGED]:
            log.warning("stored row out of range, repaired", extra={"repair": note})
        if len(self.core.repairs) > _REPAIRS_LOGGED:
            log.warning(
                "more stored rows repaired",
                extra={"repaired": len(self.core.repairs) - _REPAIRS_LOGGED},
            )
        self._flush()  # the rebuild requeues jobs that were running: write that first
        log.info(
            "job store loaded",
            extra={"unfinished": self.core.unfinished, "schedules": len(schedules)},
        )

    # --------------------------------------------------------------------- loop
    def loop(self) -> None:
        poller = zmq.Poller()
        for sock in (self.clients, self.workers, self.wake):
            poller.register(sock, zmq.POLLIN)
        clock = self.clock
        while not self.halted:
            deadline = self.core.next_deadline()
            timeout = POLL_MS
            if deadline is not None:
                # In float first: a deadline far ahead must not overflow into the int.
                wait_ms = (deadline - clock.monotonic()) * 1000 + 1
                timeout = int(max(0.0, min(POLL_MS, wait_ms)))
            ready = dict(poller.poll(timeout))
            now, wall = clock.monotonic(), clock.time()
            if self.clients in ready:
                self._drain(self.clients, "client", now, wall)
            if self.workers in ready:
                self._drain(self.workers, "worker", now, wall)
            if self.wake in ready:
                self._drain_wake()
            self._run_calls(now, wall)
            self.core.tick(now, wall=wall)
            self._flush()
            self._housekeeping(now, wall)
        # Stop: what was already taken in is written and answered.
        self._run_calls(clock.monotonic(), clock.time())
        self._flush()

    def _drain(self, sock: zmq.Socket[Any], side: str, now: float, wall: float) -> None:
        handle = self.core.client_message if side == "client" else self.core.worker_message
        decode, dialect = emqp.decode, self.dialect
        for _ in range(self.settings.batch_max):
            try:
                frames = sock.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return
            identity = frames[0]
            try:
                cmd = decode(frames[1:], dialect)
            except ProtocolError as exc:
                self._reject(side, identity, reject_reason(exc), str(exc))
                continue
            problem = handle(identity, cmd, now, wall=wall)
            if problem is not None:
                reason = "out_of_range" if isinstance(problem, OutOfRange) else "refused"
                self._reject(side, identity, reason, problem)

    def _reject(self, side: str, identity: bytes, reason: str, detail: str) -> None:
        self.metrics.rejected.labels(side, reason).inc()
        if self._limiter.allow(self.clock.monotonic()):
            log.warning(
                "message rejected",
                extra={"port": side, "peer": identity.hex(), "reason": reason, "error": detail},
            )

    def _drain_wake(self) -> None:
        with contextlib.suppress(zmq.Again):
            while True:
                self.wake.recv(zmq.NOBLOCK)

    def _run_calls(self, now: float, wall: float) -> None:
        done: list[tuple[concurrent.futures.Future[Any], Any, BaseException | None]] = []
        while True:
            try:
                fn, future = self._calls.get_nowait()
            except queue.Empty:
                break
            try:
                done.append((future, fn(self.core, now, wall), None))
            except Exception as exc:  # an admin error goes back to the admin caller
                done.append((future, None, exc))
        if not done:
            return
        self._flush()  # durable before the admin API answers
        for future, result, error in done:
            if error is not None:
                future.set_exception(error)
            else:
                future.set_result(result)

    def _flush(self) -> None:
        changes = self.core.take_changes()
        if changes:
            started = time.perf_counter()
            try:
                self.store.write(changes.jobs, changes.schedules, changes.deleted_schedules)
            except StoreError:
                # Nothing unsaved may be acknowledged: stop rather than send the outbox.
                log.exception("job store write failed; stopping the broker")
                raise
            self.metrics.commit_seconds.observe(time.perf_counter() - started)
            self.metrics.transitions(changes.jobs)
        for out in self.core.take_outbox():
            sock = self.clients if out.side == "client" else self.workers
            with contextlib.suppress(zmq.ZMQError):  # a peer that left: nothing to do
                send_frames(
                    sock, [out.identity, *emqp.encode(out.command, self.dialect)], block=False
                )

    def _housekeeping(self, now: float, wall: float) -> None:
        # Paced on the monotonic clock: a step of the wall clock neither stops the gauges
        # nor the purge for as long as it went back.
        if now >= self._next_gauges:
            self._next_gauges = now + 1.0
            self.metrics.workers.set(len(self.core.worker_views()))
            for view in self.core.queue_views():
                for state in ("ready", "waiting", "running"):
                    self.metrics.depth.labels(view.name, state).set(getattr(view, state))
        if now >= self._next_purge:
            self._next_purge = now + PURGE_EVERY
            try:
                # The stored finish times are wall times.
                purged = self.store.purge(wall, self.settings.result_ttl, max_delete=10_000)
            except StoreError as exc:
                log.error("purging finished jobs failed", extra={"error": str(exc)})
                return
            if purged:
                log.info("finished jobs purged", extra={"purged": purged})
