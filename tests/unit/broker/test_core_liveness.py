"""The broker core's liveness and retries: workers expiring, heartbeats, goodbyes,
job timeouts, retry backoff and delayed jobs.
"""

from __future__ import annotations

import pytest

from tests.support.broker_core import ERROR, T0, Broker, body_of, results
from zbus.broker.core.broker import Outgoing
from zbus.broker.core.lifecycle import backoff
from zbus.broker.core.model import JobState
from zbus.common.protocols.emqp import Disconnect, EmqpCommand, Heartbeat, Kbye

# =========================================================================== liveness


def test_worker_expires_at_interval_times_misses_not_a_tick_before() -> None:
    b = Broker(heartbeat_interval=3.0, heartbeat_misses=2, default_retries=1)
    b.worker(b"W")
    b.request(b"C", "job1")
    b.out()
    b.core.tick(T0 + 5.999, wall=T0 + 5.999)
    assert b.state("job1") is JobState.RUNNING
    assert [w.identity for w in b.core.worker_views()] == [b"W"]
    assert b.core.next_deadline() == T0 + 6.0
    b.core.tick(T0 + 6.0, wall=T0 + 6.0)
    assert b.core.worker_views() == []
    job = b.core.job("job1")
    assert job is not None
    assert (job.state, job.attempts, job.error, job.not_before) == (
        JobState.QUEUED,
        1,
        "worker lost: no message for 6s",
        T0 + 6.0 + 1.0,
    )
    assert b.core.counters["workers_expired"] == 1
    # Its slots are gone with it: a new worker gets the retry once the backoff ends.
    b.worker(b"V", now=T0 + 6.5)
    b.core.tick(T0 + 6.999, wall=T0 + 6.999)
    assert b.dispatched(b.out()) == []
    b.core.tick(T0 + 7.0, wall=T0 + 7.0)
    assert b.dispatched(b.out()) == [(b"V", "job1")]
    # The second attempt is lost too: no retry left, dead with the reason.
    b.core.tick(T0 + 6.5 + 6.0, wall=T0 + 6.5 + 6.0)
    dead = b.core.job("job1")
    assert dead is not None
    assert (dead.state, dead.attempts, dead.error) == (
        JobState.DEAD,
        2,
        "worker lost: no message for 6s",
    )
    assert dead.result is not None
    assert body_of(dead.result) == {
        "error": {"type": "WorkerLost", "message": "worker lost: no message for 6s"},
        "state": "dead",
    }
    assert results(b.out()) == [(b"C", "job1", dead.result)]


def test_any_message_counts_as_a_heartbeat() -> None:
    b = Broker()
    b.worker(b"W")
    b.core.worker_message(b"W", Heartbeat("hb", "1.0"), T0 + 5, wall=T0 + 5)
    b.core.tick(T0 + 6, wall=T0 + 6)
    assert len(b.core.worker_views()) == 1
    b.ready(b"W", now=T0 + 10)  # READY counts as well
    b.core.tick(T0 + 15.9, wall=T0 + 15.9)
    assert len(b.core.worker_views()) == 1
    b.core.tick(T0 + 16, wall=T0 + 16)
    assert b.core.worker_views() == []


def test_broker_heartbeats_every_interval() -> None:
    b = Broker(compat="eventmq")
    assert b.core.next_deadline() is None  # nobody to heartbeat, nothing pending
    b.worker(b"W", now=T0 + 1)
    b.worker(b"V", now=T0 + 1)
    assert b.core.next_deadline() == T0 + 4
    b.core.tick(T0 + 3.9, wall=T0 + 3.9)
    assert b.out() == []
    b.core.tick(T0 + 4, wall=T0 + 4)
    assert b.out() == [
        Outgoing("worker", b"W", Heartbeat("m2", str(T0 + 4))),
        Outgoing("worker", b"V", Heartbeat("m3", str(T0 + 4))),
    ]
    assert b.core.next_deadline() == T0 + 7


@pytest.mark.parametrize("goodbye", [Disconnect("bye"), Kbye("bye")])
def test_worker_goodbye_fails_its_jobs_at_once(goodbye: EmqpCommand) -> None:
    b = Broker(default_retries=1)
    b.worker(b"W", slots=2)
    b.request(b"C", "job1")
    b.request(b"C", "job2")
    b.out()
    assert b.core.worker_message(b"W", goodbye, T0 + 1, wall=T0 + 1) is None
    assert b.core.worker_views() == []
    for job_id in ("job1", "job2"):
        job = b.core.job(job_id)
        assert job is not None
        assert (job.state, job.error, job.not_before) == (
            JobState.QUEUED,
            "worker disconnected",
            T0 + 2,
        )
    assert b.core.counters["workers_left"] == 1


def test_timeout_retries_then_dead_and_late_reply_is_dropped() -> None:
    b = Broker(backoff_base=2.0)
    b.worker(b"W", slots=2)
    b.request(b"C", "job1", headers=(("timeout", "10"), ("retry-count", "1")))
    b.out()
    assert b.core.next_deadline() == T0 + 3  # heartbeat before the timeout
    b.core.worker_message(b"W", Heartbeat("hb"), T0 + 5, wall=T0 + 5)
    b.core.tick(T0 + 9.999, wall=T0 + 9.999)
    assert b.state("job1") is JobState.RUNNING
    b.core.tick(T0 + 10, wall=T0 + 10)
    job = b.core.job("job1")
    assert job is not None
    assert (job.state, job.error, job.not_before) == (
        JobState.QUEUED,
        "timeout after 10s",
        T0 + 12,
    )
    # The late answer of the first attempt is not taken as the job's result.
    assert (
        b.reply(b"W", "job1", now=T0 + 11)
        == "REPLY for job job1, not running on this worker: dropped"
    )
    assert b.core.counters["replies_not_running"] == 1
    b.core.tick(T0 + 12, wall=T0 + 12)  # the second slot takes the retry
    assert b.dispatched(b.out()) == [(b"W", "job1")]
    b.core.worker_message(b"W", Heartbeat("hb"), T0 + 21, wall=T0 + 21)
    b.core.tick(T0 + 22, wall=T0 + 22)
    dead = b.core.job("job1")
    assert dead is not None
    assert (dead.state, dead.attempts, dead.error) == (JobState.DEAD, 2, "timeout after 10s")
    assert b.core.counters["timeouts"] == 2


def test_backoff_doubles_and_is_capped() -> None:
    b = Broker(backoff_base=10.0, backoff_max=25.0, heartbeat_interval=100.0)
    b.worker(b"W")
    b.request(b"C", "job1", headers=(("retry-count", "3"),))
    b.out()
    now = T0
    for attempt, wait in ((1, 10.0), (2, 20.0), (3, 25.0)):
        b.reply(b"W", "job1", ERROR, now=now)
        job = b.core.job("job1")
        assert job is not None
        assert (job.state, job.attempts, job.not_before) == (JobState.QUEUED, attempt, now + wait)
        assert job.error == "ValueError: boom"
        b.ready(b"W", now=now)
        b.core.tick(now + wait - 0.001, wall=now + wait - 0.001)
        assert b.dispatched(b.out()) == []
        assert b.core.next_deadline() == now + wait
        now += wait
        b.core.tick(now, wall=now)
        assert b.dispatched(b.out()) == [(b"W", "job1")]
    b.reply(b"W", "job1", ERROR, now=now)
    failed = b.core.job("job1")
    assert failed is not None
    assert (failed.state, failed.attempts, failed.error) == (
        JobState.FAILED,
        4,
        "ValueError: boom",
    )
    assert failed.result is not None
    assert body_of(failed.result) == {
        "error": {"type": "ValueError", "message": "boom"},
        "state": "failed",
    }
    assert b.core.counters["retried"] == 3
    assert b.core.counters["failed"] == 1


def test_backoff_formula() -> None:
    assert [backoff(n, 1.0, 60.0) for n in (1, 2, 3, 4, 7, 8, 500)] == [
        1.0,
        2.0,
        4.0,
        8.0,
        60.0,
        60.0,
        60.0,
    ]


def test_delay_header_holds_the_job() -> None:
    b = Broker(heartbeat_interval=100.0)
    b.worker(b"W")
    b.request(b"C", "job1", headers=(("delay", "30"),))
    assert b.dispatched(b.out()) == []
    assert b.core.queue_views()[0].waiting == 1
    assert b.core.next_deadline() == T0 + 30
    b.core.tick(T0 + 29.9, wall=T0 + 29.9)
    assert b.dispatched(b.out()) == []
    b.core.tick(T0 + 30, wall=T0 + 30)
    assert b.dispatched(b.out()) == [(b"W", "job1")]
