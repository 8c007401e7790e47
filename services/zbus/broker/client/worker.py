"""The worker runner: takes jobs from the broker's worker port and runs them in threads.

A :class:`Worker` connects a DEALER to the broker (ADR 0003), announces its queues with
INFORM and sends one READY per free slot. Each REQUEST's body is eventmq's JSON call; the
callable is looked up among the registered jobs (``path.callable``, then ``callable``) and,
when ``allow_import`` is on and nothing is registered under those names, imported as
eventmq does (``path.callable``, or ``path = "module:Class"`` built with ``class_args``).
It runs in one of ``concurrency`` threads; a coroutine function's coroutine runs on the
worker's own job loop (a separate thread) while its slot waits, so a job that blocks never
stalls the I/O loop and its heartbeats. The answer is the 6-frame REPLY with
``{"value": result}``, or ``{"error": {"type", "message"}}`` when the job raised (the
broker then retries or gives up); then the slot is READY again.

CURVE: with ``curve=(the worker's KeyPair, the broker's public key)`` every socket the
worker opens (the first and each one after a reconnect) is a CURVE client of the broker.
A broker whose ZAP allow-list does not list the worker's key fails every handshake, so
such a worker is never known to the broker and never gets a job.

Liveness: HEARTBEAT every ``heartbeat_interval``; a broker silent for ``heartbeat_interval
x misses``, or one that sends DISCONNECT, gets a new socket with a new identity and a
new INFORM (the broker cannot mix up the two connections). Jobs still running from the
old connection finish and answer (the broker has requeued them and drops the answer);
jobs dispatched but not started yet are dropped, since the broker requeues them.

Stopping (:meth:`Worker.request_stop`): no more READYs, the running jobs finish (up to
``drain_timeout``), then KBYE (when a broker was heard from). Threads are daemons, so a
job stuck forever cannot hold the process up after that. A worker runs once.

The worker is in three modules by role: what a job and a hook see (their types, the
built-in jobs, :func:`current_job_id`, the error bodies) is in
:mod:`zbus.broker.client.jobs`, the job threads and the coroutine jobs' loop are in
:mod:`zbus.broker.client.execution`, and the connection and the dispatch are this
module, which also re-exports the public names of the other two.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import importlib
import inspect
import itertools
import logging
import math
import uuid
from collections.abc import Callable, Sequence
from typing import Any, Final, TypeVar, cast

import zmq
import zmq.asyncio

from zbus.broker.client.base import NO_PATH, check_worker
from zbus.broker.client.execution import JobLoop, JobThreads, RunningJob
from zbus.broker.client.jobs import (
    BUILTIN_JOBS,
    AfterJob,
    BeforeJob,
    JobFunction,
    Outcome,
    current_job_id,
    describe,
    error_body,
    set_current_job_id,
)
from zbus.common.clock import SYSTEM_CLOCK, Clock
from zbus.common.protocols import emqp
from zbus.common.protocols.errors import FrameValueError, ProtocolError
from zbus.common.security import KeyPair, check_client, make_client
from zbus.errors import ZbusError

__all__ = [
    "BUILTIN_JOBS",
    "DEFAULT_ENDPOINT",
    "AfterJob",
    "BeforeJob",
    "Outcome",
    "UnknownJobError",
    "Worker",
    "current_job_id",
]

log = logging.getLogger(__name__)

DEFAULT_ENDPOINT: Final = "tcp://127.0.0.1:47290"
DIALECT: Final = emqp.Dialect(eventmq_commands=True)
_READS_PER_WAKE: Final = 256
_F = TypeVar("_F", bound=JobFunction)


class UnknownJobError(ZbusError, LookupError):
    """No job is registered under the call's name (and importing is off or failed)."""


def _new_id() -> str:
    return str(uuid.uuid4())


class Worker:
    """Runs the broker's jobs: ``await worker.run()`` until :meth:`request_stop`.

    Args:
        endpoint: the broker's worker ROUTER.
        queues: the queues served, in order of preference.
        concurrency: jobs run at once (threads, READY slots).
        heartbeat_interval, misses: HEARTBEAT period; the broker is gone after
            ``heartbeat_interval * misses`` seconds without a message from it.
        allow_import: import unregistered callables from their ``path`` (eventmq's
            behaviour). Off by default: a REQUEST could otherwise run any importable code.
        drain_timeout: seconds a stop waits for running jobs before it says KBYE.
        context: the ``zmq.asyncio`` context (default: the process-wide one).
        curve: ``(this worker's key pair, the broker's public key)`` to connect to a
            broker that runs CURVE. Kept in :attr:`curve`, which is read each time a
            socket is opened, so it may also be set after construction, before
            :meth:`run`.
        clock: monotonic time for the heartbeat schedule, the broker's silence and job
            durations; wall time for HEARTBEAT's time frame (default: the machine's).

    Raises:
        ConfigError: ``curve``'s key pair has no secret key (also from :meth:`run`).
    """

    def __init__(
        self,
        endpoint: str = DEFAULT_ENDPOINT,
        queues: Sequence[str] = ("default",),
        concurrency: int = 4,
        heartbeat_interval: float = 3.0,
        misses: int = 3,
        *,
        allow_import: bool = False,
        drain_timeout: float = 10.0,
        context: zmq.asyncio.Context | None = None,
        curve: tuple[KeyPair, bytes] | None = None,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        check_worker(queues, concurrency, heartbeat_interval, misses, drain_timeout)
        self.endpoint = endpoint
        self.queues = tuple(queues)
        self.concurrency = concurrency
        self.heartbeat_interval = heartbeat_interval
        self.misses = misses
        self.allow_import = allow_import
        self.drain_timeout = drain_timeout
        check_client(curve)
        #: ``(key pair, broker public key)`` for CURVE, or None; read at every connect.
        self.curve = curve
        self.clock = clock
        self.before_job: list[BeforeJob] = []
        self.after_job: list[AfterJob] = []
        self.counters = {
            "succeeded": 0,
            "failed": 0,
            "reconnects": 0,
            "malformed": 0,  # messages that do not decode
            "unexpected": 0,  # commands a broker does not send to a worker
            "overflow": 0,  # REQUESTs beyond the READY slots, run once a slot frees
            "abandoned": 0,  # dispatched but not started when the connection was replaced
            "send_failed": 0,  # messages the socket had no room for
        }
        self._ctx = context or zmq.asyncio.Context.instance()
        self._jobs: dict[str, JobFunction] = {}
        self._running: dict[int, RunningJob] = {}
        self._backlog: collections.deque[emqp.Request] = collections.deque()
        self._seq = itertools.count()
        self._job_loop = JobLoop()
        self._threads: JobThreads | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._stop_requested = False
        self._idle = asyncio.Event()
        self._draining = False
        self._sock: zmq.asyncio.Socket | None = None
        self._raw: zmq.Socket[Any] | None = None  # the same socket, for non-blocking calls
        self.identity = ""
        self.connected = False  # heard from the broker since the last (re)connect
        self._last_seen = 0.0
        self._next_heartbeat = 0.0

    # ------------------------------------------------------------------ registry
    def register(self, name: str, fn: JobFunction) -> None:
        """Run ``fn`` for calls named ``name`` (``"send_mail"`` or ``"pkg.mod.send_mail"``).

        Raises:
            ValueError: the name is empty or already registered.
        """
        if not name:
            raise ValueError("a job needs a non-empty name")
        if name in self._jobs:
            raise ValueError(f"a job is already registered as {name!r}")
        self._jobs[name] = fn

    def job(self, name: str | None = None) -> Callable[[_F], _F]:
        """Decorator form of :meth:`register` (the name defaults to the function's)."""

        def decorate(fn: _F) -> _F:
            self.register(name or fn.__name__, fn)
            return fn

        return decorate

    def register_builtins(self) -> None:
        """Register :data:`BUILTIN_JOBS`: ``noop``, ``echo``, ``sleep``, ``fail``."""
        for name, fn in BUILTIN_JOBS.items():
            self.register(name, fn)

    @property
    def jobs(self) -> list[str]:
        return sorted(self._jobs)

    # ------------------------------------------------------------------ views
    @property
    def running(self) -> int:
        return len(self._running)

    def stats(self) -> dict[str, Any]:
        """What the admin API shows."""
        now = self.clock.monotonic()
        return {
            "endpoint": self.endpoint,
            "identity": self.identity,
            "connected": self.connected,
            "curve": self.curve is not None,
            "queues": list(self.queues),
            "concurrency": self.concurrency,
            "running": [
                {
                    "job_id": r.job_id,
                    "callable": r.call.callable,
                    "path": r.call.path,
                    "seconds": round(now - r.started, 3),
                }
                for r in self._running.values()
            ],
            "backlog": len(self._backlog),
            "jobs_done": self.counters["succeeded"],
            "jobs_failed": self.counters["failed"],
            "counters": dict(self.counters),
            "jobs": self.jobs,
        }

    # ------------------------------------------------------------------ running
    def request_stop(self) -> None:
        """Stop gracefully; safe from any thread, before or while :meth:`run` runs."""
        self._stop_requested = True
        # At once, not in the loop callback: a job that ends meanwhile must not say READY.
        self._draining = True
        loop, stop = self._loop, self._stop
        if loop is not None and stop is not None:
            with contextlib.suppress(RuntimeError):  # the loop has closed meanwhile
                loop.call_soon_threadsafe(stop.set)

    async def run(self) -> None:
        """Serve until :meth:`request_stop`; then finish the running jobs and say KBYE."""
        if self._loop is not None:
            raise RuntimeError("this worker is already running")
        check_client(self.curve)  # now, rather than on a reconnect in the middle of work
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        if self._stop_requested:
            self._stop.set()
        self._idle = asyncio.Event()
        threads = self._threads = JobThreads(self.concurrency)
        self._connect()
        io = asyncio.create_task(self._io(), name="zbus-worker-io")
        stopping = asyncio.create_task(self._stop.wait())
        try:
            await asyncio.wait({io, stopping}, return_when=asyncio.FIRST_COMPLETED)
            if io.done():
                io.result()  # it only ends by failing
            await self._drain()
            io.cancel()
            await asyncio.gather(io, return_exceptions=True)
            if self.connected:
                self._send(emqp.Kbye(_new_id()))
                # A short linger, so that the KBYE has a chance to leave; with no broker
                # heard from, there is nobody to tell, and nothing to wait for.
                self._close(linger=int(min(1.0, self.heartbeat_interval) * 1000))
        finally:
            for task in (io, stopping):
                task.cancel()
            await asyncio.gather(io, stopping, return_exceptions=True)
            self._close(linger=0)
            threads.stop()
            self._threads = None
            self._job_loop.stop()
            self._loop = None
            self._stop = None

    async def _drain(self) -> None:
        self._draining = True  # already, unless the worker failed
        try:
            async with asyncio.timeout(self.drain_timeout):
                while self._running or self._backlog:
                    self._idle.clear()
                    await self._idle.wait()
        except TimeoutError:
            ids = [r.job_id for r in self._running.values()]
            log.warning("stopping with jobs still running", extra={"job_ids": ids})

    async def _io(self) -> None:
        expiry = self.heartbeat_interval * self.misses
        while True:
            now = self.clock.monotonic()
            if now >= self._next_heartbeat:
                self._next_heartbeat = now + self.heartbeat_interval
                self._send(emqp.Heartbeat(_new_id(), repr(self.clock.time())))
            if now >= self._last_seen + expiry:
                log.warning("broker silent; reconnecting", extra={"silent_seconds": expiry})
                self._reconnect()
                continue
            sock = self._sock
            assert sock is not None
            wake = min(self._next_heartbeat, self._last_seen + expiry)
            await sock.poll(max(1, math.ceil((wake - now) * 1000)))
            raw = self._raw
            # A bounded batch, so that a flood cannot hold back the job completions.
            for _ in range(_READS_PER_WAKE):
                if self._sock is not sock or raw is None:
                    break
                try:
                    frames = raw.recv_multipart(zmq.NOBLOCK)
                except zmq.Again:
                    break
                self._handle(frames)

    # ------------------------------------------------------------------ connection
    def _connect(self) -> None:
        sock = self._ctx.socket(zmq.DEALER)
        sock.linger = 0
        if self.curve is not None:
            # Before connect: CURVE options apply to connections made afterwards.
            make_client(sock, *self.curve)
        self.identity = _new_id()
        sock.setsockopt(zmq.ROUTING_ID, self.identity.encode())
        sock.connect(self.endpoint)
        self._sock, self._raw = sock, zmq.Socket.shadow(sock.underlying)
        self.connected = False
        now = self.clock.monotonic()
        self._last_seen = now
        self._next_heartbeat = now + self.heartbeat_interval
        queues = tuple((name, emqp.DEFAULT_QUEUE_WEIGHT) for name in self.queues)
        self._send(emqp.Inform(_new_id(), queues, "worker"))
        if not self._draining:
            for _ in range(max(0, self.concurrency - len(self._running))):
                self._send(emqp.Ready(_new_id()))

    def _reconnect(self) -> None:
        self.counters["reconnects"] += 1
        if self._backlog:
            # Never started; the broker requeues them with the lost connection.
            self.counters["abandoned"] += len(self._backlog)
            self._backlog.clear()
        self._close(linger=0)
        self._connect()

    def _close(self, linger: int) -> None:
        if self._sock is not None:
            self._sock.close(linger=linger)
            self._sock = self._raw = None

    def _send(self, cmd: emqp.EmqpCommand) -> None:
        if self._sock is None:
            return
        # Through the asyncio socket, not the raw one: a send also takes the socket's
        # pending signals, and only zmq.asyncio then re-arms the reader's wait. A
        # non-blocking send resolves its future at once.
        frames = emqp.encode(cmd, DIALECT)
        sent = cast("asyncio.Future[Any]", self._sock.send_multipart(frames, zmq.NOBLOCK))
        error = sent.exception() if sent.done() else None
        if error is not None:
            # Full: the broker is not reading, and the liveness check replaces the
            # connection soon. Anything else is as bad, and handled the same way.
            self.counters["send_failed"] += 1
            log.warning(
                "cannot send to the broker", extra={"command": cmd.COMMAND, "error": str(error)}
            )

    def _handle(self, frames: list[bytes]) -> None:
        try:
            cmd = emqp.decode(frames, DIALECT)
        except ProtocolError as exc:
            self.counters["malformed"] += 1
            log.debug("malformed message from the broker dropped", extra={"error": str(exc)})
            return
        self._last_seen = self.clock.monotonic()
        self.connected = True
        if isinstance(cmd, emqp.Request):
            if len(self._running) < self.concurrency:
                self._start(cmd)
            else:
                self.counters["overflow"] += 1
                self._backlog.append(cmd)
        elif isinstance(cmd, emqp.Disconnect | emqp.Kbye):
            log.info("broker said %s; reconnecting", cmd.COMMAND)
            self._reconnect()
        elif not isinstance(cmd, emqp.Heartbeat | emqp.Ack):
            self.counters["unexpected"] += 1
            log.debug("unexpected command from the broker", extra={"command": cmd.COMMAND})

    # ------------------------------------------------------------------ jobs
    def _start(self, request: emqp.Request) -> None:
        try:
            call = emqp.parse_call_body(request.body)
        except FrameValueError as exc:
            self._answer(request.msgid, error_body("BadRequest", str(exc)))
            self._count(request.msgid, None, "failed", 0.0)
            self._slot_freed()
            return
        key = next(self._seq)
        self._running[key] = RunningJob(request.msgid, call, self.clock.monotonic())
        for hook in self.before_job:
            try:
                hook(request.msgid, call)
            except Exception:
                log.exception("before_job hook failed")
        assert self._threads is not None  # requests arrive only while running
        self._threads.submit(lambda: self._work(key, call, request.msgid))

    def _work(self, key: int, call: emqp.EventmqCall, job_id: str) -> None:
        """In a job thread: run the call, then hand the answer to the worker's loop."""
        started = self.clock.monotonic()
        set_current_job_id(job_id)
        try:
            value = self._resolve(call)(*call.args, **call.kwargs)
            if inspect.isawaitable(value):
                value = self._job_loop.run(value)
            try:
                body = emqp.build_reply_value(value)
            except FrameValueError:
                raise TypeError(f"job result is not a JSON value: {value!r:.200}") from None
            outcome: Outcome = "succeeded"
        except BaseException as exc:  # a job never takes the worker down, whatever it raises
            log.info("job failed", exc_info=True, extra={"callable": call.callable})
            body = error_body(type(exc).__name__, describe(exc))
            outcome = "failed"
        set_current_job_id(None)
        seconds = self.clock.monotonic() - started
        loop = self._loop
        if loop is not None:
            with contextlib.suppress(RuntimeError):  # the worker stopped and its loop closed
                loop.call_soon_threadsafe(self._finished, key, body, outcome, seconds)

    def _resolve(self, call: emqp.EventmqCall) -> JobFunction:
        jobs, path = self._jobs, call.path
        named = bool(path) and path != NO_PATH
        fn = jobs.get(f"{path}.{call.callable}") if named else None
        if fn is None:
            fn = jobs.get(call.callable)
        if fn is not None:
            return fn
        if named and self.allow_import:
            module_name, _, class_name = path.partition(":")
            target: Any = importlib.import_module(module_name)
            if class_name:  # eventmq: "module:Class", built per job with class_args
                target = getattr(target, class_name)(*call.class_args, **call.class_kwargs)
            found: JobFunction = getattr(target, call.callable)
            return found
        hint = "" if not named or self.allow_import else " (importing is off: allow_import)"
        raise UnknownJobError(f"no job registered as {call.callable!r}{hint}")

    def _finished(self, key: int, body: bytes, outcome: Outcome, seconds: float) -> None:
        running = self._running.pop(key, None)
        if running is None:
            return
        self._answer(running.job_id, body)
        self._count(running.job_id, running.call, outcome, seconds)
        self._slot_freed()

    def _answer(self, job_id: str, body: bytes) -> None:
        self._send(emqp.Reply(_new_id(), body, job_id))

    def _count(
        self, job_id: str, call: emqp.EventmqCall | None, outcome: Outcome, seconds: float
    ) -> None:
        self.counters[outcome] += 1
        for hook in self.after_job:
            try:
                hook(job_id, call, outcome, seconds)
            except Exception:
                log.exception("after_job hook failed")

    def _slot_freed(self) -> None:
        if self._backlog:
            self._start(self._backlog.popleft())
        elif not self._draining:
            self._send(emqp.Ready(_new_id()))
        if not self._running and not self._backlog:
            self._idle.set()
