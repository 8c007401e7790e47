"""The broker core's job states: every (state, event) pair of the transition table,
reached through the core's inputs, and random dialogs of clients, workers and admin
calls under which the routing invariants hold.
"""

from __future__ import annotations

import contextlib
import itertools
from typing import ClassVar

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from tests.support.broker_core import ERROR, T0, VALUE, Broker
from zbus.broker.core.errors import JobStateError
from zbus.broker.core.lifecycle import TRANSITIONS, JobEvent, next_state
from zbus.broker.core.model import JobState
from zbus.common.protocols.emqp import Inform, Kbye, Ready, Reply, Request

# =========================================================================== transition table

EVENTS = list(JobEvent)
STATES = list(JobState)


def job_in(state: JobState) -> tuple[Broker, str]:
    """A broker holding job "j" in ``state`` (no retries), reached through the API."""
    b = Broker(default_retries=0)
    waits = state in (JobState.QUEUED, JobState.CANCELLED)
    b.worker(b"W", slots=0 if waits else 1)
    b.request(b"C", "j")
    if state is JobState.SUCCEEDED:
        b.reply(b"W", "j")
    elif state is JobState.FAILED:
        b.reply(b"W", "j", ERROR)
    elif state is JobState.DEAD:
        b.core.worker_message(b"W", Kbye("k"), T0, wall=T0)
    elif state is JobState.CANCELLED:
        assert b.core.cancel("j", T0, wall=T0)
    assert b.state("j") is state
    b.worker(b"W2", slots=0)
    b.out()
    b.changes()
    return b, "j"


def apply(b: Broker, job_id: str, event: JobEvent) -> None:
    """Make ``event`` happen to the job through the broker's inputs."""
    job = b.core.job(job_id)
    assert job is not None
    worker = job.worker or b"W2"
    if event is JobEvent.DISPATCH:
        b.core.worker_message(b"W2", Ready("r"), T0 + 1, wall=T0 + 1)
    elif event is JobEvent.SUCCEED:
        b.core.worker_message(worker, Reply("r", VALUE, job_id), T0 + 1, wall=T0 + 1)
    elif event is JobEvent.ERROR:
        b.core.worker_message(worker, Reply("r", ERROR, job_id), T0 + 1, wall=T0 + 1)
    elif event is JobEvent.LOST:
        b.core.worker_message(worker, Kbye("k"), T0 + 1, wall=T0 + 1)
    elif event is JobEvent.CANCEL:
        b.core.cancel(job_id, T0 + 1, wall=T0 + 1)
    elif event is JobEvent.RETRY:
        with contextlib.suppress(JobStateError):
            b.core.retry(job, T0 + 1, wall=T0 + 1)


@pytest.mark.parametrize("state", STATES, ids=str)
@pytest.mark.parametrize("event", EVENTS, ids=lambda e: e.value)
def test_every_state_event_pair(state: JobState, event: JobEvent) -> None:
    """Each (state, event) does what the table says, and a pair not in it changes nothing."""
    b, job_id = job_in(state)
    expected = next_state(state, event, retry_left=False)
    apply(b, job_id, event)
    after = b.state(job_id)
    if expected is None:
        assert after is state
        assert b.changes().jobs == []
    else:
        assert after is expected
        assert [j.state for j in b.changes().jobs] == [expected]


@pytest.mark.parametrize("event", [JobEvent.ERROR, JobEvent.LOST])
def test_failures_with_a_retry_left_go_back_to_queued(event: JobEvent) -> None:
    assert next_state(JobState.RUNNING, event, retry_left=True) is JobState.QUEUED
    b = Broker(default_retries=1)
    b.worker(b"W")
    b.request(b"C", "j")
    apply(b, "j", event)
    assert b.state("j") is JobState.QUEUED


def test_the_table_lists_exactly_these_pairs() -> None:
    assert {(s.value, e.value) for s, e in TRANSITIONS} == {
        ("queued", "dispatch"),
        ("queued", "cancel"),
        ("running", "succeed"),
        ("running", "error"),
        ("running", "lost"),
        ("failed", "retry"),
        ("dead", "retry"),
    }


# =========================================================================== random dialogs


class Dialog(RuleBasedStateMachine):
    """Random clients, workers and admin calls; the routing invariants hold throughout.

    Workers behave as eventmq's jobmanager does (READY per slot, REPLY then READY),
    leave and come back, and time jumps past backoffs, expiries and heartbeats.
    """

    WORKERS: ClassVar = {b"w1": ("a",), b"w2": ("a", "b"), b"w3": ("b",)}

    def __init__(self) -> None:
        super().__init__()
        self.b = Broker(default_retries=1, backoff_base=0.5, heartbeat_interval=50.0)
        self.now = T0
        self.ids = itertools.count()
        self.job_ids: list[str] = []

    def _inform(self, worker: bytes) -> None:
        cmd = Inform("i", tuple((q, 10) for q in self.WORKERS[worker]))
        self.b.core.worker_message(worker, cmd, self.now, wall=self.now)

    @initialize()
    def start_workers(self) -> None:
        for worker in self.WORKERS:
            self._inform(worker)
            self.b.core.worker_message(worker, Ready("r"), self.now, wall=self.now)

    @rule(client=st.sampled_from([b"c1", b"c2", b"c3"]), queue=st.sampled_from(["a", "b"]))
    def request(self, client: bytes, queue: str) -> None:
        job_id = f"j{next(self.ids)}"
        self.job_ids.append(job_id)
        self.b.request(client, job_id, queue, now=self.now)

    @rule(worker=st.sampled_from(sorted(WORKERS)))
    def ready(self, worker: bytes) -> None:
        self.b.core.worker_message(worker, Ready("r"), self.now, wall=self.now)

    @rule(data=st.data(), error=st.booleans(), then_ready=st.booleans())
    def reply(self, data: st.DataObject, error: bool, then_ready: bool) -> None:
        running = [(w.identity, j) for w in self.b.core.worker_views() for j in w.jobs_running]
        if running:
            worker, job_id = data.draw(st.sampled_from(running))
            assert self.b.reply(worker, job_id, ERROR if error else VALUE, self.now) is None
            if then_ready:
                self.b.core.worker_message(worker, Ready("r"), self.now, wall=self.now)

    @rule(worker=st.sampled_from(sorted(WORKERS)))
    def leave_and_return(self, worker: bytes) -> None:
        self.b.core.worker_message(worker, Kbye("k"), self.now, wall=self.now)
        self._inform(worker)
        self.b.core.worker_message(worker, Ready("r"), self.now, wall=self.now)

    @rule(data=st.data())
    def cancel(self, data: st.DataObject) -> None:
        if self.job_ids:
            self.b.core.cancel(data.draw(st.sampled_from(self.job_ids)), self.now, wall=self.now)

    @rule(queue=st.sampled_from(["a", "b"]))
    def purge(self, queue: str) -> None:
        self.b.core.purge_queue(queue, self.now, wall=self.now)

    @rule(seconds=st.sampled_from([0.25, 0.5, 1.0, 60.0, 200.0]))
    def tick(self, seconds: float) -> None:
        self.now += seconds
        self.b.core.tick(self.now, wall=self.now)
        for worker in self.WORKERS:  # back after an expiry, as a jobmanager would be
            if worker not in {w.identity for w in self.b.core.worker_views()}:
                self._inform(worker)
                self.b.core.worker_message(worker, Ready("r"), self.now, wall=self.now)

    @invariant()
    def routing_is_consistent(self) -> None:
        core = self.b.core
        jobs = [j for j in map(core.job, self.job_ids) if j is not None]
        live = [j for j in jobs if not j.state.terminal]
        assert core.unfinished == len(live)
        workers = {w.identity: w for w in core.worker_views()}
        for job in live:
            if job.state is JobState.RUNNING:
                assert job.worker in workers
                assert job.id in workers[job.worker].jobs_running
        for w in workers.values():
            for job_id in w.jobs_running:
                job = core.job(job_id)
                assert job is not None and job.state is JobState.RUNNING
        for view in core.queue_views():
            mine = [j for j in live if j.queue == view.name]
            assert view.ready + view.waiting == sum(j.state is JobState.QUEUED for j in mine)
            assert view.running == sum(j.state is JobState.RUNNING for j in mine)
            # A queue never holds ready jobs while a worker slot for it is free.
            assert not (view.ready and view.free_slots)
        held = {v.name for v in core.queue_views()}
        assert {j.queue for j in live} <= held

    @invariant()
    def outputs_are_well_formed(self) -> None:
        for out in self.b.out():
            if isinstance(out.command, Request):
                assert out.side == "worker" and out.identity in {b"w1", b"w2", b"w3"}
        for job in self.b.changes().jobs:
            assert job.attempts <= job.max_retries + 1


TestDialog = Dialog.TestCase
TestDialog.settings = settings(max_examples=200, stateful_step_count=40, deadline=None)
