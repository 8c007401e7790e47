"""The broker core's admin side: cancel, purge, submit and retry, its views, and what
it does with the jobs and schedules it reads back from the store at a restart.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from tests.support.broker_core import T0, VALUE, Broker, results
from zbus.broker.core.broker import BrokerCore, CoreConfig
from zbus.broker.core.errors import HeaderError, JobStateError
from zbus.broker.core.model import Job, JobState
from zbus.broker.core.model import Schedule as StoredSchedule
from zbus.common.protocols.emqp import Kbye

# =========================================================================== admin


def test_cancel() -> None:
    b = Broker()
    b.request(b"C", "queued")
    b.request(b"C", "delayed", headers=(("delay", "5"),))
    b.out()
    assert b.core.cancel("queued", T0 + 1, wall=T0 + 1)
    assert b.core.cancel("delayed", T0 + 1, wall=T0 + 1)
    assert not b.core.cancel("queued", T0 + 1, wall=T0 + 1)  # already cancelled
    assert not b.core.cancel("nope", T0 + 1, wall=T0 + 1)
    cancelled = b.core.job("queued")
    assert cancelled is not None
    assert (cancelled.state, cancelled.error) == (JobState.CANCELLED, "cancelled")
    assert [r[1] for r in results(b.out())] == ["queued", "delayed"]
    # A worker arriving later gets nothing.
    assert b.dispatched(b.worker(b"W")) == []
    b.core.tick(T0 + 5, wall=T0 + 5)
    assert b.dispatched(b.out()) == []
    b.request(b"C", "running")
    b.out()
    assert not b.core.cancel("running", T0 + 1, wall=T0 + 1)
    assert b.core.counters["cancelled"] == 2


def test_purge_queue_cancels_queued_jobs_only() -> None:
    b = Broker()
    b.worker(b"W", "q")
    b.request(b"C", "running", queue="q")
    for i in range(3):
        b.request(b"C", f"q{i}", queue="q")
    b.request(b"C", "later", queue="q", headers=(("delay", "9"),))
    b.request(b"C", "other", queue="r")
    assert b.core.purge_queue("q", T0 + 1, wall=T0 + 1) == 4
    assert b.core.purge_queue("nope", T0 + 1, wall=T0 + 1) == 0
    assert b.state("running") is JobState.RUNNING
    assert b.state("other") is JobState.QUEUED
    (q,) = [v for v in b.core.queue_views() if v.name == "q"]
    assert (q.ready, q.waiting, q.running) == (0, 0, 1)
    b.out()
    assert b.dispatched(b.ready(b"W")) == []


def test_submit_and_retry_from_the_admin_api() -> None:
    b = Broker()
    job = b.core.submit("a1", "default", (("retry-count", "0"),), b"x", T0, wall=T0)
    assert (job.state, job.client, job.max_retries) == (JobState.QUEUED, None, 0)
    assert b.out() == []  # no client to ACK
    b.worker(b"W")
    b.core.worker_message(b"W", Kbye("bye"), T0 + 1, wall=T0 + 1)
    dead = b.core.job("a1")
    assert dead is not None
    assert dead.state is JobState.DEAD
    again = b.core.retry(dead, T0 + 2, wall=T0 + 2)
    assert (again.state, again.attempts, again.error, again.result) == (
        JobState.QUEUED,
        0,
        None,
        None,
    )
    with pytest.raises(JobStateError, match="cannot retry a job in state queued"):
        b.core.retry(dead, T0 + 2, wall=T0 + 2)
    # A dead job read back from the store after it left memory can be retried too.
    stored = replace(dead, id="old", state=JobState.FAILED)
    assert b.core.retry(stored, T0 + 3, wall=T0 + 3).state is JobState.QUEUED
    with pytest.raises(JobStateError):
        b.core.retry(replace(dead, id="ok", state=JobState.SUCCEEDED), T0 + 3, wall=T0 + 3)
    with pytest.raises(HeaderError, match="header timeout"):
        b.core.submit("bad", "default", (("timeout", "soon"),), b"", T0, wall=T0)


def test_views() -> None:
    b = Broker()
    b.worker(b"W", "q", slots=3, now=T0 + 1)
    b.request(b"C", "j1", queue="q")
    b.request(b"C", "j2", queue="r", headers=(("delay", "5"),))
    b.request(b"C", "j3", queue="r")
    (q, r) = b.core.queue_views()
    assert (q.name, q.ready, q.running, q.waiting, q.consumers, q.free_slots) == (
        "q",
        0,
        1,
        0,
        1,
        2,
    )
    assert (r.name, r.ready, r.running, r.waiting, r.consumers, r.free_slots) == (
        "r",
        1,
        0,
        1,
        0,
        0,
    )
    (w,) = b.core.worker_views()
    assert (w.identity, w.queues, w.slots_free, w.last_heartbeat, w.jobs_running) == (
        b"W",
        ("q",),
        2,
        T0 + 1,
        ("j1",),
    )
    assert b.core.unfinished == 3


# =========================================================================== restart


def stored_job(job_id: str, state: JobState, **fields: object) -> Job:
    job = Job(job_id, "default", (), b"call", b"C", state, 0, 0, None, T0, T0, T0)
    return replace(job, **fields)  # type: ignore[arg-type]


def test_restart_requeues_running_jobs_without_using_a_retry() -> None:
    later = T0 + 100
    jobs = [
        stored_job("run-retry", JobState.RUNNING, attempts=1, max_retries=2, worker=b"W"),
        stored_job("run-last", JobState.RUNNING, attempts=1, worker=b"W"),
        stored_job("queued", JobState.QUEUED, created=T0 - 1),
        stored_job("waiting", JobState.QUEUED, not_before=later + 50),
        stored_job("done", JobState.SUCCEEDED, result=VALUE, updated=later - 10),
    ]
    b = Broker(jobs, now=later)
    changes = b.changes()
    by_id = {j.id: j for j in changes.jobs}
    assert sorted(by_id) == ["run-last", "run-retry"]  # only what changed
    for job_id, retries in (("run-retry", 3), ("run-last", 1)):
        job = by_id[job_id]
        assert (job.state, job.attempts, job.max_retries, job.not_before, job.worker) == (
            JobState.QUEUED,
            1,
            retries,
            later,
            None,
        )
        assert job.error == "broker restarted during attempt 1"
    assert b.out() == []  # nothing to tell the client: its job simply runs again
    # The old worker's reply is dropped; jobs run again in the order they were created.
    assert b.dispatched(b.worker(b"W", now=later)) == [(b"W", "queued")]
    assert b.reply(b"W", "run-last", now=later) is not None
    assert b.core.counters["replies_not_running"] == 1
    # A duplicate of the finished job still gets its result.
    b.request(b"C", "done", now=later)
    assert results(b.out()) == [(b"C", "done", VALUE)]
    assert b.core.queue_views()[0].waiting == 1


def test_restart_keeps_schedules() -> None:
    schedule = StoredSchedule("sid", "default", (), b"tick", 10.0, None, T0 + 5, T0)
    core = BrokerCore(CoreConfig(), (), (schedule,), now=T0, wall=T0)
    assert core.schedules() == [schedule]
    assert core.next_deadline() == T0 + 5
    core.tick(T0 + 5, wall=T0 + 5)
    changes = core.take_changes()
    assert [s.next_run for s in changes.schedules] == [T0 + 15]
    assert [j.schedule_id for j in changes.jobs] == ["sid"]
