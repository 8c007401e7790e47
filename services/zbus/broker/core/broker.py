"""The job broker's sans-I/O core (ADR 0003 decision 1).

The wiring feeds it decoded eMQP commands with the ROUTER identity they came from and the
time, calls :meth:`BrokerCore.tick` when :meth:`BrokerCore.next_deadline` passes, and
after each round writes :meth:`BrokerCore.take_changes` in one transaction and only then
sends :meth:`BrokerCore.take_outbox`. The core never reads a clock, a socket or the
store. Jobs live in :mod:`zbus.broker.core.jobs`, their rules in
:mod:`zbus.broker.core.lifecycle`, schedules in :mod:`zbus.broker.core.schedules`; this
module is the eMQP dialog, peer liveness, schedules and the admin operations.

Every input carries two times. ``now`` is monotonic: peer liveness, the heartbeat
schedule, job timeouts, retry backoffs and how long finished jobs are remembered are
intervals and run on it alone, so a step of the wall clock (an hour either way, by an
operator or NTP) expires no worker and times out or retries no job early or late.
``wall`` is wall time, for what is stored and shown (a job's ``created``, ``updated``,
``started`` and ``not_before``, a worker's last heartbeat in the admin API), for the
time eventmq's heartbeats carry, and for calendar times: a cron line, an interval
schedule's stored next run and a ``delay`` name a time of day, and fire when the wall
clock reaches it, sooner when it is set forward. :meth:`BrokerCore.next_deadline` is
monotonic; it converts those wall times with the offset between the two clocks at the
last :meth:`BrokerCore.tick`.

Peers on the two ROUTER sockets:

- clients (client port) send REQUEST, SCHEDULE, UNSCHEDULE; they get ACK once a job (or
  schedule) is stored, a job's result as the 6-frame REPLY, and in ``eventmq`` compat
  the 5-frame hand-off REPLY when the job goes to a worker.
- workers (worker port) INFORM, then READY per free slot, REPLY per job, HEARTBEAT;
  they get ACK of the INFORM, REQUESTs and HEARTBEATs.
- eventmq schedulers INFORM with type ``scheduler`` (or with no queues) on either port.
  zbus keeps schedules itself, so it forwards nothing to them: a scheduler is a quiet
  client that may send REQUEST, SCHEDULE and UNSCHEDULE and is kept alive by heartbeats
  like a worker. It gets what eventmq's router sends it (ACK of its INFORM, HEARTBEAT,
  the hand-off REPLY in ``eventmq`` compat), never job ACKs or results, for which it
  has no handler.
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Callable, Sequence
from dataclasses import replace

from zbus.broker.core.errors import JobStateError, QueueFullError, RangeError
from zbus.broker.core.interface import (
    COUNTERS,
    Changes,
    CoreConfig,
    Outgoing,
    OutOfRange,
    QueueView,
    Side,
    WorkerView,
)
from zbus.broker.core.jobs import JobTable
from zbus.broker.core.lifecycle import (
    JobEvent,
    give_up_body,
    job_options,
    next_state,
    queued_anew,
    run_count,
    schedule_id,
)
from zbus.broker.core.limits import (
    MAX_QUEUE_CHARS,
    MAX_WORKER_QUEUES,
    check_count,
    check_identifier,
    check_schedule,
)
from zbus.broker.core.liveness import Liveness
from zbus.broker.core.model import TERMINAL, Headers, Job, JobState
from zbus.broker.core.model import Schedule as StoredSchedule
from zbus.broker.core.repair import repair_job, repair_stored
from zbus.broker.core.routing import SchedulerPeer, WorkerState
from zbus.broker.core.schedules import ScheduleBook
from zbus.common.protocols.emqp import (
    Ack,
    Disconnect,
    EmqpCommand,
    Heartbeat,
    Inform,
    Kbye,
    Ready,
    Reply,
    Request,
    Schedule,
    Unschedule,
    has_header,
)

__all__ = [
    "COUNTERS",
    "BrokerCore",
    "Changes",
    "CoreConfig",
    "Outgoing",
    "QueueView",
    "WorkerView",
]


def _id_source() -> Callable[[], str]:
    """Message ids and scheduled job ids: a random uuid4-shaped prefix and a counter.

    Unique across broker runs (the prefix is random each time) and much cheaper than a
    uuid4 per message, which matters at three ids per job.
    """
    h = uuid.uuid4().hex
    prefix = f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-"
    counter = itertools.count(1)
    return lambda: f"{prefix}{next(counter):012x}"


class BrokerCore:
    """All routing, liveness, retry, timeout and schedule logic of the broker.

    Args:
        config: the tunables.
        jobs: the store's jobs, to rebuild from at start (ADR 0003 decision 2): queued
            jobs are queued again, running ones count as an attempt that failed with
            "broker restarted", terminal ones answer duplicate REQUESTs until
            ``config.finished_ttl`` after they ended.
        schedules: the store's schedules.
        now: monotonic time of the start.
        wall: wall time of the start.
        new_id: source of message ids and of the ids of jobs fired by schedules.

    The rebuild itself changes jobs (running ones are requeued or dead) and may answer
    clients, so the wiring takes the changes and the outbox once right after
    construction, as after any other round.
    """

    def __init__(
        self,
        config: CoreConfig,
        jobs: Sequence[Job] = (),
        schedules: Sequence[StoredSchedule] = (),
        *,
        now: float,
        wall: float,
        new_id: Callable[[], str] | None = None,
    ) -> None:
        self.config = config
        #: Event counts for metrics; every key of COUNTERS is present from the start.
        self.counters: dict[str, int] = dict.fromkeys(COUNTERS, 0)
        self._new_id = new_id or _id_source()
        self._table = JobTable(config, self.counters, self._new_id)
        self._workers = self._table.router.workers
        self._peers = self._table.peers
        self._book = ScheduleBook(config.cron_tz)
        self._dirty_schedules: dict[str, StoredSchedule] = {}
        self._deleted_schedules: dict[str, None] = {}
        self._liveness = Liveness(config, self._workers, self._peers, now)
        self._eventmq = config.compat == "eventmq"
        self._wall_offset = wall - now  # wall minus monotonic, at the last tick

        # Rows out of range (written before the checks) are repaired, never refused.
        jobs, schedules, repairs = repair_stored(jobs, schedules, wall, self._book)
        #: What the rebuild repaired or dropped in the stored rows, one line each.
        self.repairs = repairs.notes
        self.counters["repaired_rows"] = len(repairs.notes)
        self._table.rebuild(jobs, repairs.jobs, now, wall)
        for schedule in schedules:
            self._book.put(schedule)
            if schedule.id in repairs.schedules:
                self._dirty_schedules[schedule.id] = schedule
        self._deleted_schedules.update(dict.fromkeys(repairs.dropped))

    # ================================================================== outputs

    def take_outbox(self) -> list[Outgoing]:
        """The messages to send, in order; send them once the changes are durable."""
        out, self._table.outbox = self._table.outbox, []
        return out

    def take_changes(self) -> Changes:
        """Every job and schedule whose value changed since the last call (latest value)."""
        changes = Changes(
            list(self._table.dirty.values()),
            list(self._dirty_schedules.values()),
            list(self._deleted_schedules),
        )
        self._table.dirty, self._dirty_schedules, self._deleted_schedules = {}, {}, {}
        return changes

    def next_deadline(self) -> float | None:
        """When (monotonic) :meth:`tick` next has something to do; ``None`` when nothing
        is pending. A calendar time is converted with the clocks' offset at the last
        tick: were the wall clock stepped since, the next tick finds it out."""
        table, offset = self._table, self._wall_offset
        delay, run = table.next_delay(), self._book.next_deadline()
        candidates = [
            self._liveness.next_expiry(),
            table.next_timeout(),
            table.next_backoff(),
            None if delay is None else delay - offset,
            None if run is None else run - offset,
        ]
        if self._workers or self._peers:
            candidates.append(self._liveness.next_heartbeat)
        return min((c for c in candidates if c is not None), default=None)

    def _send(self, side: Side, identity: bytes, command: EmqpCommand) -> None:
        self._table.outbox.append(Outgoing(side, identity, command))

    def _refusal(self, exc: Exception) -> str:
        if isinstance(exc, RangeError):
            self.counters["out_of_range"] += 1
            return OutOfRange(exc)
        return str(exc)

    def _unexpected(self, role: str, what: str) -> str:
        self.counters["unexpected_commands"] += 1
        return f"{what} is not a command a {role} sends: dropped"

    # ================================================================== client port

    def client_message(
        self, identity: bytes, cmd: EmqpCommand, now: float, *, wall: float
    ) -> str | None:
        """Handle a command from the client port at ``now`` (monotonic) and ``wall``.

        Returns:
            ``None`` when handled; otherwise why it was refused or dropped, for a log
            line (the matching counter is already counted).
        """
        peer = self._peers.get(identity)
        if peer is not None and peer.side == "client":
            peer.last_seen = now
        if isinstance(cmd, Request):
            return self._on_request("client", identity, cmd, now, wall)
        if isinstance(cmd, Schedule | Unschedule):
            return self._on_schedule("client", identity, cmd, now, wall)
        if isinstance(cmd, Inform):
            if cmd.worker_type == "scheduler" or not cmd.queues:
                return self._add_peer("client", identity, cmd, now)
            return self._unexpected("client", "INFORM with queues (a worker's, on the client port)")
        if isinstance(cmd, Heartbeat):
            return None
        if isinstance(cmd, Disconnect | Kbye):
            if peer is not None and peer.side == "client":
                del self._peers[identity]
            return None
        return self._unexpected("client", cmd.COMMAND)

    def _on_request(
        self, side: Side, identity: bytes, cmd: Request, now: float, wall: float
    ) -> str | None:
        table = self._table
        quiet = identity in self._peers
        existing = table.get(cmd.msgid)
        if existing is not None:
            # The msgid is the job's identity: nothing runs twice (ADR 0003 decision 3).
            self.counters["duplicate_requests"] += 1
            if quiet:
                return None
            if existing.state in TERMINAL:
                result = existing.result or b""
                self._send(side, identity, Reply(self._new_id(), result, cmd.msgid))
                return None
            if existing.client != identity:  # results go to its last known identity
                table.store(replace(existing, client=identity), now)
            self._send(side, identity, Ack(self._new_id(), cmd.msgid))
            return None
        try:
            job = table.create(cmd.msgid, cmd.queue, cmd.headers, cmd.body, identity, now, wall)
        except (QueueFullError, RangeError) as exc:
            self.counters["rejected_requests"] += 1
            if not quiet:
                body = give_up_body("rejected", type(exc).__name__, str(exc))
                self._send(side, identity, Reply(self._new_id(), body, cmd.msgid))
            return self._refusal(exc)
        self.counters["requests"] += 1
        if not quiet:
            self._send(side, identity, Ack(self._new_id(), cmd.msgid))
        table.enqueue(job, now, wall)
        return None

    # ================================================================== schedules

    def _on_schedule(
        self, side: Side, identity: bytes, cmd: Schedule | Unschedule, now: float, wall: float
    ) -> str | None:
        quiet = identity in self._peers
        sid = schedule_id(cmd.queue, cmd.body)
        if isinstance(cmd, Unschedule):
            # eventmq's scheduler knows a schedule by its body alone, so an UNSCHEDULE
            # naming another queue (eventmq's client defaults it) still finds it.
            found = [sid] if sid in self._book.schedules else self._book.with_body(cmd.body)
            for each in found:
                self._delete_schedule(each)
        else:
            refused = self._add_schedule(sid, cmd, now, wall)
            if refused is not None:
                self.counters["rejected_schedules"] += 1
                if not quiet:
                    body = give_up_body("rejected", "ScheduleError", refused)
                    self._send(side, identity, Reply(self._new_id(), body, cmd.msgid))
                return refused
        if not quiet:
            self._send(side, identity, Ack(self._new_id(), cmd.msgid))
        return None

    def _add_schedule(self, sid: str, cmd: Schedule, now: float, wall: float) -> str | None:
        """Store (or replace) a schedule; returns why it was refused, if it was.

        Its runs are calendar times (wall time), stored as such.
        """
        interval = None if cmd.interval == -1 else float(cmd.interval)
        cron = cmd.cron if interval is None else None
        try:
            check_schedule(cmd.interval, cmd.cron)
            check_identifier("queue", cmd.queue, MAX_QUEUE_CHARS)
            job_options(cmd.headers, self.config.default_retries)  # refuse now, not per run
            count = run_count(cmd.headers)
            first = self._book.first_run(interval, cron, wall)
        except ValueError as exc:  # RangeError (HeaderError), CronError
            return self._refusal(exc)
        if count is not None and count <= 0:
            self._delete_schedule(sid)  # eventmq drops a schedule with no run left
            return None
        old = self._book.schedules.get(sid)
        created = old.created if old is not None else wall
        schedule = StoredSchedule(
            sid, cmd.queue, cmd.headers, cmd.body, interval, cron, first, created
        )
        kept: StoredSchedule | None = schedule
        # eventmq's scheduler runs a new schedule at once unless it has `nohaste`.
        if not has_header(cmd.headers, "nohaste"):
            self._fire(schedule, now, wall)
            kept = self._book.spend_run(schedule)
        if kept is None:
            self._delete_schedule(sid)
        else:
            self._put_schedule(kept)
        return None

    def _put_schedule(self, schedule: StoredSchedule) -> None:
        self._book.put(schedule)
        self._dirty_schedules[schedule.id] = schedule
        self._deleted_schedules.pop(schedule.id, None)

    def _delete_schedule(self, sid: str) -> None:
        self._book.remove(sid)
        self._dirty_schedules.pop(sid, None)
        self._deleted_schedules[sid] = None

    def _fire(self, schedule: StoredSchedule, now: float, wall: float) -> None:
        table = self._table
        try:
            s = schedule
            job = table.create(self._new_id(), s.queue, s.headers, s.body, None, now, wall, s.id)
        except (QueueFullError, RangeError):  # a RangeError only from a hand-made row
            self.counters["schedule_runs_skipped"] += 1
            return
        self.counters["schedule_runs"] += 1
        table.enqueue(job, now, wall)

    # ================================================================== worker port

    def worker_message(
        self, identity: bytes, cmd: EmqpCommand, now: float, *, wall: float
    ) -> str | None:
        """Handle a command from the worker port at ``now`` (monotonic) and ``wall``.

        Returns:
            ``None`` when handled; otherwise why it was refused or dropped.
        """
        worker = self._workers.get(identity)
        if worker is not None:
            worker.last_seen = now  # any command counts as a heartbeat (spec)
            if isinstance(cmd, Ready):
                return self._table.ready(worker, now, wall)
            if isinstance(cmd, Reply):
                return self._table.reply(worker, cmd, now, wall)
            if isinstance(cmd, Heartbeat):
                return None
            if isinstance(cmd, Inform):
                return self._on_inform(identity, cmd, now, wall)
            if isinstance(cmd, Disconnect | Kbye):
                self.counters["workers_left"] += 1
                self._table.drop_worker(identity, "worker disconnected", now, wall)
                return None
            return self._unexpected("worker", cmd.COMMAND)
        peer = self._peers.get(identity)
        if peer is not None and peer.side == "worker":
            peer.last_seen = now
            return self._peer_command(peer, cmd, now, wall)
        if isinstance(cmd, Inform):
            return self._on_inform(identity, cmd, now, wall)
        if isinstance(cmd, Disconnect | Kbye):
            return None  # leaving anyway
        self.counters["uninformed_workers"] += 1
        if not self._eventmq:
            # The spec's answer to a worker that never sent INFORM (ADR 0003 decision
            # 7). An eventmq jobmanager shuts down on DISCONNECT, so in eventmq compat it
            # is dropped, as eventmq's router does: the jobmanager misses the broker's
            # heartbeats and INFORMs again (after a broker restart, say).
            self._send("worker", identity, Disconnect(self._new_id()))
        return f"{cmd.COMMAND} from a worker that never sent INFORM: dropped"

    def _peer_command(
        self, peer: SchedulerPeer, cmd: EmqpCommand, now: float, wall: float
    ) -> str | None:
        if isinstance(cmd, Request):
            return self._on_request(peer.side, peer.identity, cmd, now, wall)
        if isinstance(cmd, Schedule | Unschedule):
            return self._on_schedule(peer.side, peer.identity, cmd, now, wall)
        if isinstance(cmd, Heartbeat):
            return None
        if isinstance(cmd, Inform):
            return self._on_inform(peer.identity, cmd, now, wall)
        if isinstance(cmd, Disconnect | Kbye):
            del self._peers[peer.identity]
            return None
        return self._unexpected("scheduler", cmd.COMMAND)

    def _on_inform(self, identity: bytes, cmd: Inform, now: float, wall: float) -> str | None:
        if cmd.worker_type == "scheduler" or not cmd.queues:
            self._table.drop_worker(identity, "worker disconnected", now, wall)
            return self._add_peer("worker", identity, cmd, now)
        try:
            check_count("INFORM queues", len(cmd.queues), 1, MAX_WORKER_QUEUES)
            for name, _ in cmd.queues:
                check_identifier("INFORM queue name", name, MAX_QUEUE_CHARS)
        except RangeError as exc:  # nothing changes: a known worker keeps what it had
            return self._refusal(exc)
        self._peers.pop(identity, None)
        self._liveness.start(now)
        known = identity in self._workers
        # A known worker that INFORMs again keeps its running jobs; its slots restart
        # from its next READYs.
        worker = self._table.router.add_worker(identity, cmd.queues, now)
        if not known:
            self._liveness.watch(worker, now)
        self._send("worker", identity, Ack(self._new_id(), cmd.msgid))
        return None

    def _add_peer(self, side: Side, identity: bytes, cmd: Inform, now: float) -> str | None:
        self._liveness.start(now)
        peer = SchedulerPeer(identity, side, now)
        self._peers[identity] = peer
        self._liveness.watch(peer, now)
        self._send(side, identity, Ack(self._new_id(), cmd.msgid))
        return None

    # ================================================================== time

    def tick(self, now: float, *, wall: float) -> None:
        """Do what is due at ``now`` (monotonic: expiries, timeouts, retries, heartbeats)
        and at ``wall`` (calendar times: delayed jobs and schedules)."""
        table = self._table
        self._wall_offset = wall - now
        self._expire_peers(now, wall)
        table.expire_timeouts(now, wall)
        table.release_waiting(now, wall)
        for schedule in self._book.pop_due(wall):
            self._fire(schedule, now, wall)
            following = self._book.advance(schedule, wall)
            if following is None:
                self._delete_schedule(schedule.id)
            else:
                self._put_schedule(following)
        if self._liveness.heartbeat_due(now):
            stamp = str(wall) if self._eventmq else None  # eventmq sends its time.time()
            for identity in self._workers:
                self._send("worker", identity, Heartbeat(self._new_id(), stamp))
            for peer in self._peers.values():
                self._send(peer.side, peer.identity, Heartbeat(self._new_id(), stamp))
        table.evict_finished(now)

    def _expire_peers(self, now: float, wall: float) -> None:
        # Silent for interval x misses: the spec's "disconnected" (zguide's mdbroker).
        for peer in self._liveness.expired(now):
            if isinstance(peer, WorkerState):
                self.counters["workers_expired"] += 1
                reason = f"worker lost: no message for {self._liveness.expiry:g}s"
                self._table.drop_worker(peer.identity, reason, now, wall)
            else:
                del self._peers[peer.identity]

    # ================================================================== admin

    def job(self, job_id: str) -> Job | None:
        """An unfinished job, or a finished one still in memory; ``None`` otherwise."""
        return self._table.get(job_id)

    def submit(
        self, job_id: str, queue: str, headers: Headers, body: bytes, now: float, *, wall: float
    ) -> Job:
        """Submit a job from the admin API (no client to answer) at ``now`` and ``wall``.

        Returns:
            the job: new, or the one already known under ``job_id`` (nothing runs twice).

        Raises:
            QueueFullError: at ``max_queued`` unfinished jobs.
            HeaderError: for a bad ``retry-count``, ``timeout`` or ``delay``.
        """
        existing = self._table.get(job_id)
        if existing is not None:
            self.counters["duplicate_requests"] += 1
            return existing
        job = self._table.create(job_id, queue, headers, body, None, now, wall)
        self.counters["requests"] += 1
        self._table.enqueue(job, now, wall)
        return self._table.get(job_id) or job

    def cancel(self, job_id: str, now: float, *, wall: float) -> bool:
        """Cancel a queued job (waiting for a worker, a delay or a retry).

        Returns:
            False when the job is unknown, running or finished.
        """
        job = self._table.jobs.get(job_id)
        return job is not None and self._table.cancel(job, "cancelled", now, wall)

    def purge_queue(self, queue: str, now: float, *, wall: float) -> int:
        """Cancel every queued job of ``queue``; running ones finish. Returns the count."""
        queued = [
            j for j in self._table.jobs.values() if j.queue == queue and j.state is JobState.QUEUED
        ]
        for job in queued:
            self._table.cancel(job, "cancelled: queue purged", now, wall)
        return len(queued)

    def retry(self, job: Job, now: float, *, wall: float) -> Job:
        """Run again a job zbus gave up on (``dead`` or ``failed``), as read from the store.

        It starts over with its full retry count; its client still gets the result.

        Raises:
            JobStateError: when the job is unfinished here, or in another state.
            QueueFullError: at ``max_queued`` unfinished jobs.
        """
        table = self._table
        known = table.get(job.id) or job
        if known.state not in TERMINAL or next_state(known.state, JobEvent.RETRY) is None:
            raise JobStateError(job.id, known.state.value, "retry")
        if len(table.jobs) >= self.config.max_queued:
            raise QueueFullError(self.config.max_queued)
        table.forget(job.id)
        # Repaired first: the stored row may be from before the range checks. Its times
        # are stored and shown: wall time.
        again = queued_anew(repair_job(known, wall)[0], wall)
        table.store(again, now)
        self.counters["requests"] += 1
        table.enqueue(again, now, wall)
        return table.get(job.id) or again

    def schedules(self) -> list[StoredSchedule]:
        """The schedules held, by id."""
        return sorted(self._book.schedules.values(), key=lambda s: s.id)

    def queue_views(self) -> list[QueueView]:
        """Every queue that has jobs or workers, by name."""
        workers = self._workers
        return [
            QueueView(
                name=q.name,
                ready=len(q.ready),
                running=q.running,
                waiting=len(q.waiting),
                consumers=len(q.consumers),
                free_slots=sum(len(workers[w].tokens) for w in q.consumers),
            )
            for q in sorted(self._table.router.queues.values(), key=lambda q: q.name)
        ]

    def worker_views(self) -> list[WorkerView]:
        """Every registered worker, by identity."""
        return [
            WorkerView(
                identity=w.identity,
                queues=tuple(q.name for q in w.queues),
                slots_free=len(w.tokens),
                # Shown as a wall time: its monotonic time moved by the clocks' offset.
                last_heartbeat=w.last_seen + self._wall_offset,
                jobs_running=tuple(w.running),
            )
            for w in sorted(self._workers.values(), key=lambda w: w.identity)
        ]

    @property
    def unfinished(self) -> int:
        """Jobs held (queued, waiting or running): never more than ``max_queued``."""
        return len(self._table.jobs)
