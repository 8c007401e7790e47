"""The broker's jobs: their values, routing to worker slots, endings and timers.

Part of the sans-I/O core (ADR 0003 decision 1): :class:`JobTable` holds every
unfinished job, moves it through the table of :mod:`zbus.broker.core.lifecycle`, records
each new value for the store and queues each message for the wiring to send.
:class:`zbus.broker.core.broker.BrokerCore` drives it from the eMQP dialog.

Two times come with every input: ``now``, monotonic, for what is an interval (a job's
timeout, a retry's backoff, how long a finished job is remembered), and ``wall``, for
what is stored and shown (``created``, ``updated``, ``started``, ``not_before``) and for
a ``delay``. A delayed job is due at a wall time: ``delay:S`` asks to run the job at
the calendar time S seconds after it was sent, it is stored as that time and survives a
restart as that time, so a wall clock set forward makes it due sooner, as it does a
cron line. A retry waits out its backoff on the monotonic clock, so no step of the wall
clock makes a job time out or retry early or late; its ``not_before`` is still stored in
wall time, and a restarted broker converts what is left of the wait (see
:meth:`JobTable.enqueue`).
"""

from __future__ import annotations

import heapq
import itertools
from collections import OrderedDict
from collections.abc import Callable, Collection, Iterable
from dataclasses import replace
from typing import Final

from zbus.broker.core.errors import QueueFullError
from zbus.broker.core.interface import CoreConfig, Outgoing, OutOfRange, Side
from zbus.broker.core.lifecycle import (
    JobEvent,
    backoff,
    dispatched,
    forward_headers,
    give_up_body,
    job_options,
    next_state,
    settled,
    worker_error,
)
from zbus.broker.core.limits import (
    MAX_ID_CHARS,
    MAX_QUEUE_CHARS,
    MAX_STORED_COUNT,
    MAX_WORKER_SLOTS,
    check_identifier,
)
from zbus.broker.core.model import TERMINAL, Headers, Job, JobState
from zbus.broker.core.routing import QueueState, Router, SchedulerPeer, WorkerState
from zbus.common.protocols.emqp import EmqpCommand, Reply, Request

QUEUED: Final = JobState.QUEUED
RUNNING: Final = JobState.RUNNING


class JobTable:
    """Unfinished jobs, recently finished ones, and everything that moves them.

    Attributes:
        jobs: unfinished jobs by id (queued, waiting or running).
        finished: terminal jobs kept to answer duplicate REQUESTs, oldest end first,
            bounded by ``finished_ttl`` and ``max_finished``.
        router: queues and workers.
        peers: eventmq schedulers, which submit jobs but are not answered.
        outbox: messages to send, in order.
        dirty: the latest value of every job changed since the store last took them.
    """

    def __init__(
        self, config: CoreConfig, counters: dict[str, int], new_id: Callable[[], str]
    ) -> None:
        self.config = config
        self.counters = counters
        self.new_id = new_id
        self.jobs: dict[str, Job] = {}
        self.finished: OrderedDict[str, Job] = OrderedDict()
        self.router = Router()
        self.peers: dict[bytes, SchedulerPeer] = {}
        self.outbox: list[Outgoing] = []
        self.dirty: dict[str, Job] = {}
        self._seq = itertools.count()
        # Waiting jobs: (when, seq, job id, the job's not_before it is for); ``when`` is
        # the not_before itself (wall time) for a delay, monotonic for a retry backoff.
        self._delays: list[tuple[float, int, str, float]] = []
        self._backoffs: list[tuple[float, int, str, float]] = []
        self._timeouts: list[tuple[float, int, str, int]] = []  # monotonic (+ attempt)
        self._ended: dict[str, float] = {}  # finished job id -> monotonic time it ended
        self._handoff = config.compat == "eventmq"

    # ------------------------------------------------------------------ messages

    def send(self, side: Side, identity: bytes, command: EmqpCommand) -> None:
        self.outbox.append(Outgoing(side, identity, command))

    def answer(self, client: bytes | None, command: EmqpCommand) -> None:
        """Send to the client that submitted a job, unless there is none to answer."""
        if client is not None and client not in self.peers:
            self.outbox.append(Outgoing("client", client, command))

    # ------------------------------------------------------------------ values

    def get(self, job_id: str) -> Job | None:
        """An unfinished job, or a finished one still remembered."""
        return self.jobs.get(job_id) or self.finished.get(job_id)

    def store(self, job: Job, now: float) -> None:
        """Record ``job`` as the job's new value (held in memory and marked for the store);
        a finished one is remembered from ``now`` (monotonic)."""
        self.dirty[job.id] = job
        if job.state in TERMINAL:
            self.jobs.pop(job.id, None)
            self.remember(job, now)
            q = self.router.queues.get(job.queue)
            if q is not None:
                self.router.drop_if_idle(q)
        else:
            self.jobs[job.id] = job

    def remember(self, job: Job, ended: float) -> None:
        """Keep a finished job that ended at ``ended`` (monotonic) for ``finished_ttl``.

        On the monotonic clock: a wall clock set forward must not forget a job early,
        or a duplicate REQUEST would run it again.
        """
        self.finished[job.id] = job
        self.finished.move_to_end(job.id)
        self._ended[job.id] = ended
        self.evict_finished(ended)

    def forget(self, job_id: str) -> None:
        """Stop remembering a finished job (an admin retry runs it again)."""
        self.finished.pop(job_id, None)
        self._ended.pop(job_id, None)

    def evict_finished(self, now: float) -> None:
        finished, ended = self.finished, self._ended
        ttl, most = self.config.finished_ttl, self.config.max_finished
        while finished and (len(finished) > most or ended[next(iter(finished))] + ttl <= now):
            del ended[finished.popitem(last=False)[0]]

    def create(
        self,
        job_id: str,
        queue: str,
        headers: Headers,
        body: bytes,
        client: bytes | None,
        now: float,
        wall: float,
        schedule: str | None = None,
    ) -> Job:
        """Store a new queued job; route it with :meth:`enqueue`.

        Raises:
            QueueFullError: when ``max_queued`` unfinished jobs are held already.
            RangeError: a job id or queue name of more than 256 characters (or none),
                or (HeaderError) a bad ``retry-count``, ``timeout`` or ``delay``.
        """
        if len(self.jobs) >= self.config.max_queued:
            raise QueueFullError(self.config.max_queued)
        check_identifier("job id", job_id, MAX_ID_CHARS)
        check_identifier("queue", queue, MAX_QUEUE_CHARS)
        options = job_options(headers, self.config.default_retries)
        job = Job(
            id=job_id,
            queue=queue,
            headers=headers,
            body=body,
            client=client,
            state=QUEUED,
            attempts=0,
            max_retries=options.max_retries,
            timeout=options.timeout,
            not_before=wall + options.delay,
            created=wall,
            updated=wall,
            schedule_id=schedule,
        )
        self.store(job, now)
        return job

    def rebuild(
        self, jobs: Iterable[Job], repaired: Collection[str], now: float, wall: float
    ) -> None:
        """Take the store's jobs at start (ADR 0003 decision 2): queued jobs are queued
        again, running ones :meth:`restarted`, terminal ones remembered; the ids in
        ``repaired`` (values the rebuild repaired) are written back.

        A finished job is remembered for what is left of ``finished_ttl`` after its
        stored (wall) end, none of it in the future.
        """
        for job in sorted(jobs, key=lambda j: j.updated if j.state in TERMINAL else j.created):
            if job.id in repaired:
                self.dirty[job.id] = job
            if job.state in TERMINAL:
                self.remember(job, now - max(0.0, wall - job.updated))
            elif job.state is RUNNING:
                self.restarted(job, now, wall)
            else:
                self.jobs[job.id] = job
                self.enqueue(job, now, wall)

    # ------------------------------------------------------------------ routing

    def enqueue(self, job: Job, now: float, wall: float) -> None:
        """Route a queued job: wait for its not_before, or offer it to a worker now.

        A job that never ran waits for a ``delay``: until its not_before on the wall
        clock. One that ran waits out a retry backoff: what is left of it, on the
        monotonic clock. That is the whole wait when the job was just retried, and the
        rest of it when a restarted broker loads the job from the store, at most
        ``backoff_max``, so a wall clock set back while the broker was down cannot hold
        a retry longer than any backoff.
        """
        q = self.router.queue(job.queue)
        if job.not_before > wall:
            q.waiting.add(job.id)
            if job.attempts:
                wait = min(job.not_before - wall, self.config.backoff_max)
                entry = (now + wait, next(self._seq), job.id, job.not_before)
                heapq.heappush(self._backoffs, entry)
            else:
                entry = (job.not_before, next(self._seq), job.id, job.not_before)
                heapq.heappush(self._delays, entry)
        else:
            self.router.push_ready(q, job.client, job.id)
            self._pump(q, now, wall)

    def _pump(self, q: QueueState, now: float, wall: float) -> None:
        router = self.router
        while q.ready and router.has_slot(q):
            job_id = router.pop_ready(q)
            if job_id is None:
                break
            self._dispatch(self.jobs[job_id], router.take_slot(q), q, now, wall)

    def ready(self, worker: WorkerState, now: float, wall: float) -> OutOfRange | None:
        """A READY: the oldest ready job of the worker's highest-priority queue that has
        one (eventmq's router), or else a slot that waits, least recently used first.
        A worker holds at most MAX_WORKER_SLOTS unused slots; a READY beyond is dropped."""
        for q in worker.queues:
            if q.ready:
                job_id = self.router.pop_ready(q)
                if job_id is not None:
                    self._dispatch(self.jobs[job_id], worker, q, now, wall)
                    return None
        if len(worker.tokens) >= MAX_WORKER_SLOTS:
            self.counters["out_of_range"] += 1
            return OutOfRange(f"READY beyond {MAX_WORKER_SLOTS} unused slots of a worker: dropped")
        self.router.add_slot(worker)
        return None

    def _dispatch(
        self, job: Job, worker: WorkerState, q: QueueState, now: float, wall: float
    ) -> None:
        running = dispatched(job, worker.identity, wall)
        self.store(running, now)
        q.running += 1
        worker.running[job.id] = None
        self.counters["dispatched"] += 1
        if running.timeout is not None:
            deadline = now + running.timeout
            heapq.heappush(self._timeouts, (deadline, next(self._seq), job.id, running.attempts))
        # The REQUEST goes on as the client sent it, same msgid (eventmq's router does).
        request = Request(job.id, job.queue, forward_headers(job.headers), job.body)
        self.send("worker", worker.identity, request)
        if self._handoff and running.attempts == 1 and job.client is not None:
            # eventmq's 5-frame "handed to a worker" notice (ADR 0003 decision 4).
            peer = self.peers.get(job.client)
            notice = Reply(self.new_id(), job.id.encode())
            self.send(peer.side if peer else "client", job.client, notice)

    def _detach(self, job: Job) -> None:
        """Take a running job off its worker and off its queue's running count."""
        if job.worker is not None:
            worker = self.router.workers.get(job.worker)
            if worker is not None:
                worker.running.pop(job.id, None)
        self.router.queues[job.queue].running -= 1

    # ------------------------------------------------------------------ endings

    def reply(self, worker: WorkerState, cmd: Reply, now: float, wall: float) -> str | None:
        """A worker's REPLY: the job succeeds, or fails if the body is an error object."""
        job_id = cmd.request_id
        if job_id is None:
            # The spec's 5-frame REPLY names no request: it answers the job whose id it
            # reuses as msgid, or else the worker's only running job.
            if cmd.msgid in worker.running:
                job_id = cmd.msgid
            elif len(worker.running) == 1:
                job_id = next(iter(worker.running))
            else:
                self.counters["replies_unmatched"] += 1
                return f"REPLY {cmd.msgid} without a request id matches no single job: dropped"
        job = self.jobs.get(job_id)
        if job is None or job.state is not RUNNING or job.worker != worker.identity:
            if job is None and job_id not in self.finished:
                self.counters["replies_unknown"] += 1
                return f"REPLY for unknown job {job_id}: dropped"
            self.counters["replies_not_running"] += 1
            return f"REPLY for job {job_id}, not running on this worker: dropped"
        self._detach(job)
        error = worker_error(cmd.body)
        if error is None:
            self.store(settled(job, JobState.SUCCEEDED, wall, result=cmd.body), now)
            self.counters["succeeded"] += 1
            self.answer(job.client, Reply(self.new_id(), cmd.body, job.id))
        else:
            self._fail(job, JobEvent.ERROR, error[0], error[1], now, wall)
        return None

    def _fail(
        self, job: Job, event: JobEvent, kind: str, message: str, now: float, wall: float
    ) -> None:
        """End a failed attempt: retry after the backoff, or give up (ADR 0003 dec. 5).

        ``event`` is ERROR (the worker reported ``kind: message``) or LOST (``message``
        says why: worker gone, timeout, broker restarted).
        """
        state = next_state(job.state, event, retry_left=job.attempts <= job.max_retries)
        reason = f"{kind}: {message}" if event is JobEvent.ERROR else message
        if state is QUEUED:
            wait = backoff(job.attempts, self.config.backoff_base, self.config.backoff_max)
            retried = settled(job, QUEUED, wall, error=reason, not_before=wall + wait)
            self.store(retried, now)
            self.counters["retried"] += 1
            self.enqueue(retried, now, wall)
            return
        assert state is JobState.FAILED or state is JobState.DEAD
        body = give_up_body(state, kind, message)
        self.store(settled(job, state, wall, result=body, error=reason), now)
        self.counters[state.value] += 1
        self.answer(job.client, Reply(self.new_id(), body, job.id))

    def restarted(self, job: Job, now: float, wall: float) -> None:
        """A job the store had as RUNNING when the broker started (ADR 0003 decision 2).

        Its worker's reply, if it ever comes, is for a job no longer running here and
        is dropped.
        """
        # The broker failed, not the job: the attempt does not use up one of the job's
        # retries, so an accepted job with no retries left still runs (nothing
        # acknowledged is lost on a kill -9). The credit stops at what the store holds.
        again = replace(
            job,
            state=JobState.QUEUED,
            max_retries=min(job.max_retries + 1, MAX_STORED_COUNT),
            worker=None,
            started=None,
            not_before=wall,
            updated=wall,
            error=f"broker restarted during attempt {job.attempts}",
        )
        self.jobs[job.id] = again
        self.store(again, now)
        self.enqueue(again, now, wall)

    def drop_worker(self, identity: bytes, reason: str, now: float, wall: float) -> None:
        """A worker is gone: its slots with it, its running jobs failed (retried or dead)."""
        worker = self.router.remove_worker(identity)
        if worker is None:
            return
        for job_id in list(worker.running):
            job = self.jobs[job_id]
            self._detach(job)
            self._fail(job, JobEvent.LOST, "WorkerLost", reason, now, wall)

    def cancel(self, job: Job, reason: str, now: float, wall: float) -> bool:
        """Cancel a job if its state allows it (queued only)."""
        if next_state(job.state, JobEvent.CANCEL) is None:
            return False
        q = self.router.queues[job.queue]
        if job.id in q.ready:
            self.router.unready(q, job.id)
        else:
            q.waiting.discard(job.id)
        body = give_up_body(JobState.CANCELLED, "Cancelled", reason)
        cancelled = replace(job, state=JobState.CANCELLED, error=reason, result=body, updated=wall)
        self.store(cancelled, now)
        self.counters["cancelled"] += 1
        self.answer(job.client, Reply(self.new_id(), body, job.id))
        return True

    # ------------------------------------------------------------------ timers

    def next_timeout(self) -> float | None:
        """The earliest live job timeout (stale heap entries are dropped on the way)."""
        heap, jobs = self._timeouts, self.jobs
        while heap:
            _, _, job_id, attempt = heap[0]
            job = jobs.get(job_id)
            if job is not None and job.state is RUNNING and job.attempts == attempt:
                return heap[0][0]
            heapq.heappop(heap)
        return None

    def expire_timeouts(self, now: float, wall: float) -> None:
        while (deadline := self.next_timeout()) is not None and deadline <= now:
            job = self.jobs[heapq.heappop(self._timeouts)[2]]
            self.counters["timeouts"] += 1
            self._detach(job)
            # The worker keeps the slot until it answers: it may be stuck on this job.
            reason = f"timeout after {job.timeout:g}s"
            self._fail(job, JobEvent.LOST, "Timeout", reason, now, wall)

    def next_delay(self) -> float | None:
        """The earliest not_before (wall time) of a delayed job."""
        return self._earliest(self._delays)

    def next_backoff(self) -> float | None:
        """When (monotonic) the earliest retry backoff ends."""
        return self._earliest(self._backoffs)

    def _earliest(self, heap: list[tuple[float, int, str, float]]) -> float | None:
        """The first time of ``heap``; entries of jobs that no longer wait for the
        not_before they were pushed for are dropped on the way."""
        jobs = self.jobs
        while heap:
            job = jobs.get(heap[0][2])
            if job is not None and job.state is QUEUED and job.not_before == heap[0][3]:
                return heap[0][0]
            heapq.heappop(heap)
        return None

    def release_waiting(self, now: float, wall: float) -> None:
        """Offer to workers the retries whose backoff ended by ``now`` (monotonic) and the
        delayed jobs due by ``wall``."""
        while (due := self.next_backoff()) is not None and due <= now:
            self._release(heapq.heappop(self._backoffs)[2], now, wall)
        while (at := self.next_delay()) is not None and at <= wall:
            self._release(heapq.heappop(self._delays)[2], now, wall)

    def _release(self, job_id: str, now: float, wall: float) -> None:
        job = self.jobs[job_id]
        q = self.router.queues[job.queue]
        if job.id in q.waiting:
            q.waiting.discard(job.id)
            self.router.push_ready(q, job.client, job.id)
            self._pump(q, now, wall)
