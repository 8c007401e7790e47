"""Routing tables of the broker (ADR 0003 decision 7): who may take which job next.

Per queue: one FIFO of ready job ids per client, served round-robin across clients (the
spec: "the broker SHOULD serve clients on a fair request"), and a least-recently-used
deque of free worker slots, one entry per READY. Every operation is O(1) amortised:
entries that stop being valid (a cancelled job, a slot used through another queue, a
worker gone) are left in place and skipped when reached, and a slot deque is compacted
once it is more than twice as long as the number of free slots there are at all.

Invariant kept by the core: a queue never has ready jobs and a usable slot at once;
whichever arrives second is matched with the first straight away.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from zbus.broker.core.interface import Side
from zbus.common.protocols.emqp import Queues

ClientKey = bytes | None  # None: jobs from the admin API or from a schedule


@dataclass(slots=True, eq=False)
class QueueState:
    """One queue's jobs and free slots."""

    name: str
    fifos: dict[ClientKey, deque[str]] = field(default_factory=dict)
    turns: deque[ClientKey] = field(default_factory=deque)  # clients with a FIFO, in turn
    ready: set[str] = field(default_factory=set)  # ids with a valid FIFO entry
    waiting: set[str] = field(default_factory=set)  # queued with a future not_before
    running: int = 0
    slots: deque[tuple[int, bytes]] = field(default_factory=deque)  # (token, worker), LRU
    consumers: set[bytes] = field(default_factory=set)

    @property
    def idle(self) -> bool:
        return not (self.ready or self.waiting or self.running or self.consumers)


@dataclass(slots=True, eq=False)
class WorkerState:
    """A worker (eventmq: a jobmanager) that sent INFORM."""

    identity: bytes
    queues: tuple[QueueState, ...]  # highest weight first
    last_seen: float  # monotonic
    tokens: set[int] = field(default_factory=set)  # one per READY not yet used
    running: dict[str, None] = field(default_factory=dict)  # job ids, in dispatch order


@dataclass(slots=True, eq=False)
class SchedulerPeer:
    """An eventmq scheduler that sent INFORM: a client the broker heartbeats."""

    identity: bytes
    side: Side  # the ROUTER socket it is on
    last_seen: float  # monotonic


class Router:
    """Queues and workers; knows nothing of job states, only of ids and identities."""

    def __init__(self) -> None:
        self.queues: dict[str, QueueState] = {}
        self.workers: dict[bytes, WorkerState] = {}
        self.free_slots = 0  # all workers' unused READYs
        self._next_token = 0

    def queue(self, name: str) -> QueueState:
        q = self.queues.get(name)
        if q is None:
            q = self.queues[name] = QueueState(name)
        return q

    def drop_if_idle(self, q: QueueState) -> None:
        """Forget a queue with nothing in it, so queue names sent once do not pile up."""
        if q.idle and self.queues.get(q.name) is q:
            q.slots.clear()
            q.fifos.clear()
            q.turns.clear()
            del self.queues[q.name]

    # ------------------------------------------------------------------ workers

    def add_worker(self, identity: bytes, queues: Queues, now: float) -> WorkerState:
        """Register (or re-register) a worker. Its slots start at zero: READY adds them.

        Queues are ordered by weight, highest first, ties in INFORM order: eventmq's
        router offers a returning worker its highest-priority queue first.
        """
        worker = self.workers.get(identity)
        if worker is not None:
            self.free_slots -= len(worker.tokens)
            worker.tokens.clear()
            self._leave_queues(worker)
        names = [name for name, _ in sorted(queues, key=lambda q: -q[1])]
        states = tuple(self.queue(name) for name in dict.fromkeys(names))
        if worker is None:
            worker = self.workers[identity] = WorkerState(identity, states, now)
        else:
            worker.queues, worker.last_seen = states, now
        for q in states:
            q.consumers.add(identity)
        return worker

    def remove_worker(self, identity: bytes) -> WorkerState | None:
        """Forget a worker and its slots; the caller deals with its running jobs."""
        worker = self.workers.pop(identity, None)
        if worker is not None:
            self.free_slots -= len(worker.tokens)
            worker.tokens.clear()
            self._leave_queues(worker)
        return worker

    def _leave_queues(self, worker: WorkerState) -> None:
        # Called with the worker's tokens already cleared, so its entries are invalid.
        for q in worker.queues:
            q.consumers.discard(worker.identity)
            if not q.consumers:
                q.slots.clear()
            self.drop_if_idle(q)

    def add_slot(self, worker: WorkerState) -> None:
        """One READY: a slot usable through any of the worker's queues."""
        self._next_token += 1
        token = self._next_token
        worker.tokens.add(token)
        self.free_slots += 1
        for q in worker.queues:
            q.slots.append((token, worker.identity))
            if len(q.slots) > 2 * self.free_slots + 16:
                self._compact(q)

    def _valid(self, token: int, identity: bytes) -> bool:
        worker = self.workers.get(identity)
        return worker is not None and token in worker.tokens

    def _compact(self, q: QueueState) -> None:
        q.slots = deque(entry for entry in q.slots if self._valid(*entry))

    def has_slot(self, q: QueueState) -> bool:
        """Whether a usable slot is left, dropping used-up entries from the front."""
        slots = q.slots
        while slots:
            if self._valid(*slots[0]):
                return True
            slots.popleft()
        return False

    def take_slot(self, q: QueueState) -> WorkerState:
        """The least recently used worker slot (call after :meth:`has_slot` said yes)."""
        token, identity = q.slots.popleft()
        worker = self.workers[identity]
        worker.tokens.discard(token)
        self.free_slots -= 1
        return worker

    # ------------------------------------------------------------------ jobs

    def push_ready(self, q: QueueState, client: ClientKey, job_id: str) -> None:
        fifo = q.fifos.get(client)
        if fifo is None:
            fifo = q.fifos[client] = deque()
            q.turns.append(client)
        fifo.append(job_id)
        q.ready.add(job_id)

    def pop_ready(self, q: QueueState) -> str | None:
        """The next ready job id: the next client in turn, its oldest job."""
        turns, fifos, ready = q.turns, q.fifos, q.ready
        while turns:
            client = turns.popleft()
            fifo = fifos[client]
            while fifo:
                job_id = fifo.popleft()
                if job_id in ready:
                    ready.discard(job_id)
                    if fifo:
                        turns.append(client)
                    else:
                        del fifos[client]
                    return job_id
            del fifos[client]
        return None

    def unready(self, q: QueueState, job_id: str) -> None:
        """Take a ready job out (cancel); its FIFO entry is skipped when reached."""
        q.ready.discard(job_id)
        if not q.ready:
            q.fifos.clear()
            q.turns.clear()
