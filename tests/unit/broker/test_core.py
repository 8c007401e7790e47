"""The broker core driven by eMQP commands and a time value: no sockets, no sleeping.

Each test plays a dialog (clients, workers, schedulers) against ``BrokerCore`` and checks
what it sends, what it asks the store to write, and its counters. Message ids come from
a counter so the expected outboxes are exact.
"""

from __future__ import annotations

import contextlib
import itertools
import json
from collections.abc import Sequence
from dataclasses import replace
from typing import ClassVar

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from zbus.broker.core.broker import BrokerCore, Changes, CoreConfig, Outgoing
from zbus.broker.core.errors import HeaderError, JobStateError, QueueFullError
from zbus.broker.core.lifecycle import TRANSITIONS, JobEvent, backoff, next_state
from zbus.broker.core.model import Job, JobState
from zbus.broker.core.model import Schedule as StoredSchedule
from zbus.common.protocols.emqp import (
    Ack,
    Disconnect,
    EmqpCommand,
    Headers,
    Heartbeat,
    Inform,
    Kbye,
    Ready,
    Reply,
    Request,
    Schedule,
    Unschedule,
    build_reply_value,
)

T0 = 1_700_000_000.0
VALUE = build_reply_value(42)
ERROR = json.dumps({"error": {"type": "ValueError", "message": "boom"}}).encode()
RR: Headers = (("reply-requested", ""),)


class Broker:
    """A core plus helpers that speak for clients and workers."""

    def __init__(self, jobs: Sequence[Job] = (), now: float = T0, **config: object) -> None:
        ids = itertools.count()
        self.core = BrokerCore(
            CoreConfig(**config),  # type: ignore[arg-type]
            jobs,
            now=now,
            wall=now,
            new_id=lambda: f"m{next(ids)}",
        )

    # ------------------------------------------------------------------ peers

    def worker(
        self, identity: bytes, *queues: str, slots: int = 1, now: float = T0
    ) -> list[Outgoing]:
        names = queues or ("default",)
        self.core.worker_message(
            identity, Inform("inf", tuple((q, 10) for q in names)), now, wall=now
        )
        for _ in range(slots):
            self.core.worker_message(identity, Ready("rdy"), now, wall=now)
        return self.out()

    def ready(self, identity: bytes, now: float = T0) -> list[Outgoing]:
        assert self.core.worker_message(identity, Ready("rdy"), now, wall=now) is None
        return self.out()

    def reply(self, worker: bytes, job_id: str, body: bytes = VALUE, now: float = T0) -> str | None:
        return self.core.worker_message(worker, Reply("rep", body, job_id), now, wall=now)

    def request(
        self,
        client: bytes,
        job_id: str,
        queue: str = "default",
        headers: Headers = (),
        now: float = T0,
    ) -> str | None:
        return self.core.client_message(
            client, Request(job_id, queue, headers, b"call"), now, wall=now
        )

    # ------------------------------------------------------------------ outputs

    def out(self) -> list[Outgoing]:
        return self.core.take_outbox()

    def changes(self) -> Changes:
        return self.core.take_changes()

    def state(self, job_id: str) -> JobState:
        job = self.core.job(job_id)
        assert job is not None
        return job.state

    def dispatched(self, out: list[Outgoing]) -> list[tuple[bytes, str]]:
        """(worker, job id) of each REQUEST sent to a worker."""
        return [
            (o.identity, o.command.msgid)
            for o in out
            if o.side == "worker" and isinstance(o.command, Request)
        ]


def results(out: list[Outgoing]) -> list[tuple[bytes, str | None, bytes]]:
    """(client, request id, body) of each 6-frame REPLY to a client."""
    return [
        (o.identity, o.command.request_id, o.command.body)
        for o in out
        if o.side == "client" and isinstance(o.command, Reply) and o.command.request_id
    ]


def body_of(raw: bytes) -> dict[str, object]:
    data = json.loads(raw)
    assert isinstance(data, dict)
    return data


# =========================================================================== round trip


def test_round_trip_spec() -> None:
    b = Broker()
    assert b.worker(b"W") == [Outgoing("worker", b"W", Ack("m0", "inf"))]
    assert b.request(b"C", "job1", headers=(("timeout", "10"),)) is None
    assert b.out() == [
        Outgoing("client", b"C", Ack("m1", "job1")),
        # forwarded with the same msgid; reply-requested added so the worker answers
        Outgoing(
            "worker",
            b"W",
            Request("job1", "default", (("reply-requested", ""), ("timeout", "10")), b"call"),
        ),
    ]
    changes = b.changes()
    assert [(j.id, j.state, j.attempts, j.worker) for j in changes.jobs] == [
        ("job1", JobState.RUNNING, 1, b"W")
    ]
    assert b.reply(b"W", "job1", now=T0 + 1) is None
    assert b.out() == [Outgoing("client", b"C", Reply("m2", VALUE, "job1"))]
    (done,) = b.changes().jobs
    assert (done.state, done.result, done.worker, done.updated) == (
        JobState.SUCCEEDED,
        VALUE,
        None,
        T0 + 1,
    )
    assert b.core.counters["succeeded"] == 1
    assert b.core.unfinished == 0


def test_eventmq_compat_sends_the_handoff_reply_once() -> None:
    b = Broker(compat="eventmq", default_retries=1, backoff_base=0.0)
    b.worker(b"W")
    b.request(b"C", "job1")
    assert b.out() == [
        Outgoing("client", b"C", Ack("m1", "job1")),
        Outgoing("worker", b"W", Request("job1", "default", RR, b"call")),
        # eventmq's 5-frame "handed to a worker": body is the request msgid
        Outgoing("client", b"C", Reply("m2", b"job1")),
    ]
    # The retry (no backoff here) goes out again without a second hand-off notice.
    b.reply(b"W", "job1", ERROR)
    assert b.out() == []
    assert b.ready(b"W") == [Outgoing("worker", b"W", Request("job1", "default", RR, b"call"))]


def test_job_waits_for_a_worker_and_ready_dispatches_it() -> None:
    b = Broker()
    b.request(b"C", "job1", queue="q")
    assert b.out() == [Outgoing("client", b"C", Ack("m0", "job1"))]
    assert b.state("job1") is JobState.QUEUED
    out = b.worker(b"W", "q")
    assert b.dispatched(out) == [(b"W", "job1")]


# =========================================================================== routing


def test_least_recently_used_worker_first() -> None:
    b = Broker()
    for w in (b"A", b"B", b"C"):
        b.worker(w)
    for i in range(3):
        b.request(b"X", f"j{i}")
    assert b.dispatched(b.out()) == [(b"A", "j0"), (b"B", "j1"), (b"C", "j2")]
    for w in (b"C", b"A", b"B"):
        b.ready(w)
    for i in range(3, 6):
        b.request(b"X", f"j{i}")
    assert b.dispatched(b.out()) == [(b"C", "j3"), (b"A", "j4"), (b"B", "j5")]


def test_round_robin_across_clients_in_a_queue() -> None:
    b = Broker()
    for i in range(4):
        b.request(b"X", f"x{i}")
    for i in range(2):
        b.request(b"Y", f"y{i}")
    b.core.submit("admin0", "default", (), b"", T0, wall=T0)  # the admin API is a client too
    order = b.dispatched(b.worker(b"W"))
    for _ in range(6):
        order += b.dispatched(b.ready(b"W"))
    assert [job_id for _, job_id in order] == ["x0", "y0", "admin0", "x1", "y1", "x2", "x3"]


def test_many_workers_many_clients_everything_runs_once() -> None:
    b = Broker()
    for w in range(5):
        b.worker(f"w{w}".encode(), slots=2)
    seen: list[str] = []
    for i in range(200):
        b.request(f"c{i % 7}".encode(), f"j{i}")
        for worker, job_id in b.dispatched(b.out()):
            seen.append(job_id)
            b.reply(worker, job_id)
            b.ready(worker)
            seen += [j for _, j in b.dispatched(b.out())]
    # Every job ran exactly once; nothing is left.
    assert sorted(set(seen)) == sorted(f"j{i}" for i in range(200))
    assert b.core.counters["succeeded"] == b.core.counters["dispatched"] == 200


def test_worker_queues_by_weight() -> None:
    b = Broker()
    b.request(b"C", "low1", queue="low")
    b.request(b"C", "high1", queue="high")
    b.core.worker_message(b"W", Inform("inf", (("low", 1), ("high", 20))), T0, wall=T0)
    out = b.ready(b"W")
    assert b.dispatched(out) == [(b"W", "high1")]
    assert b.dispatched(b.ready(b"W")) == [(b"W", "low1")]


def test_a_slot_serves_whichever_of_its_queues_gets_a_job() -> None:
    b = Broker()
    b.core.worker_message(b"W", Inform("inf", (("a", 10), ("b", 10))), T0, wall=T0)
    b.ready(b"W")
    b.request(b"C", "jb", queue="b")
    assert b.dispatched(b.out()) == [(b"W", "jb")]
    b.request(b"C", "ja", queue="a")  # the one slot is used: it waits
    assert b.dispatched(b.out()) == []


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


# =========================================================================== identity


def test_duplicate_request_runs_nothing() -> None:
    b = Broker()
    b.request(b"C", "job1")
    b.changes()
    b.out()
    # Same id while queued: an ACK again, no new job.
    b.request(b"C", "job1")
    assert b.out() == [Outgoing("client", b"C", Ack("m1", "job1"))]
    assert b.changes().jobs == []
    # From a new identity (the client reconnected): the result goes there now.
    b.request(b"C2", "job1")
    assert b.out() == [Outgoing("client", b"C2", Ack("m2", "job1"))]
    (moved,) = b.changes().jobs
    assert moved.client == b"C2"
    b.worker(b"W")
    b.reply(b"W", "job1")
    assert results(b.out()) == [(b"C2", "job1", VALUE)]
    # Once finished, a duplicate gets the result, and nothing runs.
    b.request(b"C", "job1")
    assert b.out() == [Outgoing("client", b"C", Reply("m5", VALUE, "job1"))]
    assert b.core.counters["duplicate_requests"] == 3
    assert b.core.counters["dispatched"] == 1
    assert b.core.submit("job1", "default", (), b"", T0, wall=T0).state is JobState.SUCCEEDED
    assert b.core.counters["requests"] == 1


def test_finished_jobs_are_remembered_for_a_while_only() -> None:
    b = Broker(finished_ttl=60.0, max_finished=2)
    b.worker(b"W", slots=3)
    for i in range(3):
        b.request(b"C", f"j{i}")
        b.reply(b"W", f"j{i}")
    assert b.core.job("j0") is None  # pushed out by max_finished
    assert b.core.job("j2") is not None
    b.core.tick(T0 + 60, wall=T0 + 60)
    assert b.core.job("j2") is None


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


# =========================================================================== bounds, errors


def test_max_queued_refuses_new_jobs_with_a_clear_error() -> None:
    b = Broker(max_queued=2)
    b.request(b"C", "j1")
    b.request(b"C", "j2")
    b.changes()
    b.out()
    notice = b.request(b"C", "j3")
    assert notice is not None and "max_queued" in notice
    (refusal,) = b.out()
    assert isinstance(refusal.command, Reply)
    assert refusal.command.request_id == "j3"
    assert body_of(refusal.command.body) == {
        "error": {"type": "QueueFullError", "message": notice},
        "state": "rejected",
    }
    assert b.changes().jobs == []
    assert b.core.job("j3") is None
    with pytest.raises(QueueFullError):
        b.core.submit("j4", "default", (), b"", T0, wall=T0)
    assert b.core.counters["rejected_requests"] == 1


@pytest.mark.parametrize(
    ("headers", "fragment"),
    [
        ((("retry-count", "-1"),), "header retry-count: expected a whole number in 0..1000"),
        ((("retry-count", "two"),), "header retry-count"),
        (
            (("timeout", "-5"),),
            "header timeout: expected a number of seconds in 0..2592000 (30 days; 0: no timeout)",
        ),
        ((("delay", "nan"),), "header delay"),
        ((("delay", "inf"),), "header delay"),
    ],
)
def test_bad_headers_refuse_the_job(headers: Headers, fragment: str) -> None:
    b = Broker()
    notice = b.request(b"C", "j1", headers=headers)
    assert notice is not None and fragment in notice
    (refusal,) = b.out()
    assert isinstance(refusal.command, Reply)
    assert body_of(refusal.command.body)["state"] == "rejected"
    assert b.core.job("j1") is None


@pytest.mark.parametrize("compat", ["spec", "eventmq"])
def test_commands_from_an_uninformed_worker(compat: str) -> None:
    b = Broker(compat=compat)
    notice = b.core.worker_message(b"X", Ready("r"), T0, wall=T0)
    assert notice == "READY from a worker that never sent INFORM: dropped"
    b.core.worker_message(b"X", Reply("r", VALUE, "job1"), T0, wall=T0)
    b.core.worker_message(b"X", Heartbeat("h"), T0, wall=T0)
    assert b.core.counters["uninformed_workers"] == 3
    if compat == "spec":
        assert b.out() == [
            Outgoing("worker", b"X", Disconnect("m0")),
            Outgoing("worker", b"X", Disconnect("m1")),
            Outgoing("worker", b"X", Disconnect("m2")),
        ]
    else:  # an eventmq jobmanager would shut down on DISCONNECT
        assert b.out() == []
    assert b.core.worker_message(b"X", Kbye("k"), T0, wall=T0) is None  # leaving: nothing to say
    assert b.out() == []


def test_replies_that_match_no_running_job_are_counted() -> None:
    b = Broker()
    b.worker(b"W", slots=2)
    b.worker(b"V")
    assert b.reply(b"W", "ghost") == "REPLY for unknown job ghost: dropped"
    b.request(b"C", "job1")  # goes to W
    assert b.reply(b"V", "job1") == "REPLY for job job1, not running on this worker: dropped"
    assert b.reply(b"W", "job1") is None
    assert b.reply(b"W", "job1") == "REPLY for job job1, not running on this worker: dropped"
    assert b.core.counters["replies_unknown"] == 1
    assert b.core.counters["replies_not_running"] == 2
    assert b.core.counters["succeeded"] == 1


def test_spec_reply_without_request_id() -> None:
    b = Broker()
    b.worker(b"W", slots=2)
    b.request(b"C", "job1")
    assert b.core.worker_message(b"W", Reply("x", VALUE), T0, wall=T0) is None  # its only job
    assert b.state("job1") is JobState.SUCCEEDED
    b.ready(b"W")
    b.request(b"C", "job2")
    b.request(b"C", "job3")
    assert b.core.worker_message(b"W", Reply("job3", VALUE), T0, wall=T0) is None  # msgid = job id
    assert b.state("job3") is JobState.SUCCEEDED
    b.ready(b"W")
    b.request(b"C", "job4")
    assert b.core.worker_message(b"W", Reply("x", VALUE), T0, wall=T0) is not None  # two running
    assert b.core.counters["replies_unmatched"] == 1


def test_commands_in_the_wrong_place() -> None:
    b = Broker()
    assert b.core.client_message(b"C", Ready("r"), T0, wall=T0) is not None
    assert b.core.client_message(b"C", Inform("i", (("q", 10),)), T0, wall=T0) is not None
    b.worker(b"W")
    assert b.core.worker_message(b"W", Request("j", "q", (), b""), T0, wall=T0) is not None
    assert b.core.counters["unexpected_commands"] == 3
    assert b.out() == []


# =========================================================================== schedulers


def test_eventmq_scheduler_on_the_client_port_is_a_quiet_client() -> None:
    b = Broker(compat="eventmq")
    b.core.client_message(b"S", Inform("inf", (), "scheduler"), T0, wall=T0)
    assert b.out() == [Outgoing("client", b"S", Ack("m0", "inf"))]
    b.core.client_message(b"S", Request("job1", "default", RR, b"call"), T0, wall=T0)
    assert b.out() == []  # no ACK for a scheduler: eventmq never sends one
    out = b.worker(b"W")
    assert Outgoing("client", b"S", Reply("m2", b"job1")) in out  # the hand-off, as eventmq
    b.reply(b"W", "job1")
    assert b.out() == []  # no result either
    b.core.tick(T0 + 3, wall=T0 + 3)
    assert Outgoing("client", b"S", Heartbeat("m5", str(T0 + 3))) in b.out()
    b.core.client_message(b"S", Kbye("k"), T0 + 4, wall=T0 + 4)
    b.core.tick(T0 + 6, wall=T0 + 6)
    assert all(o.identity != b"S" for o in b.out())


def test_scheduler_on_the_worker_port_may_submit_and_expires() -> None:
    b = Broker()
    b.core.worker_message(b"S", Inform("inf", (), "scheduler"), T0, wall=T0)
    assert b.out() == [Outgoing("worker", b"S", Ack("m0", "inf"))]
    assert b.core.worker_message(b"S", Request("job1", "default", RR, b"call"), T0, wall=T0) is None
    assert b.out() == []  # neither DISCONNECT nor ACK
    assert b.state("job1") is JobState.QUEUED
    assert b.core.worker_message(b"S", Ready("r"), T0, wall=T0) is not None  # not a worker
    b.core.tick(T0 + 6, wall=T0 + 6)
    b.out()
    assert b.core.worker_message(b"S", Heartbeat("h"), T0 + 7, wall=T0 + 7) is not None  # forgotten
    assert b.out() == [Outgoing("worker", b"S", Disconnect("m1"))]


# =========================================================================== schedules


def sched(
    interval: int = -1,
    cron: str = "",
    headers: Headers = (),
    body: bytes = b"tick",
    queue: str = "default",
) -> Schedule:
    return Schedule("s-msg", queue, headers, interval, body, cron)


def fired(changes: Changes) -> list[tuple[float, str | None]]:
    return [(j.created, j.schedule_id) for j in changes.jobs if j.schedule_id]


def test_interval_schedule_fires_at_once_then_every_interval() -> None:
    b = Broker()
    assert b.core.client_message(b"C", sched(interval=60), T0, wall=T0) is None
    assert b.out() == [Outgoing("client", b"C", Ack("m1", "s-msg"))]
    changes = b.changes()
    (stored,) = changes.schedules
    assert (stored.interval, stored.cron, stored.next_run, stored.created) == (
        60.0,
        None,
        T0 + 60,
        T0,
    )
    assert fired(changes) == [(T0, stored.id)]  # eventmq runs it at once (no nohaste)
    assert b.core.next_deadline() == T0 + 60
    b.core.tick(T0 + 59.999, wall=T0 + 59.999)
    assert not b.changes()
    b.core.tick(T0 + 60, wall=T0 + 60)
    changes = b.changes()
    assert fired(changes) == [(T0 + 60, stored.id)]
    assert [s.next_run for s in changes.schedules] == [T0 + 120]
    # Late by 2.5 intervals: one run, and the cadence is kept.
    b.core.tick(T0 + 270, wall=T0 + 270)
    changes = b.changes()
    assert fired(changes) == [(T0 + 270, stored.id)]
    assert [s.next_run for s in changes.schedules] == [T0 + 300]
    assert b.core.counters["schedule_runs"] == 3


def test_cron_schedule_and_nohaste() -> None:
    start = 1_704_067_260.0  # 2024-01-01T00:01:00Z
    b = Broker(now=start)
    b.core.client_message(
        b"C", sched(cron="*/5 * * * *", headers=(("nohaste", ""),)), start, wall=start
    )
    changes = b.changes()
    assert fired(changes) == []
    (stored,) = changes.schedules
    assert stored.next_run == start + 240  # 00:05
    for due in (start + 240, start + 540):
        b.core.tick(due - 0.5, wall=due - 0.5)
        assert not b.changes()
        b.core.tick(due, wall=due)
        assert fired(b.changes()) == [(due, stored.id)]


def test_run_count_limits_runs() -> None:
    b = Broker()
    b.core.client_message(b"C", sched(interval=10, headers=(("run_count", "3"),)), T0, wall=T0)
    changes = b.changes()
    assert len(fired(changes)) == 1
    assert changes.schedules[0].headers == (("run_count", "2"),)
    b.core.tick(T0 + 10, wall=T0 + 10)
    assert b.changes().schedules[0].headers == (("run_count", "1"),)
    b.core.tick(T0 + 20, wall=T0 + 20)
    changes = b.changes()
    assert len(fired(changes)) == 1
    assert changes.schedules == []
    assert changes.deleted_schedules == [changes.jobs[0].schedule_id]
    b.core.tick(T0 + 30, wall=T0 + 30)
    assert not b.changes()
    assert b.core.schedules() == []


def test_unschedule_and_replace() -> None:
    b = Broker()
    b.core.client_message(b"C", sched(interval=10, headers=(("nohaste", ""),)), T0, wall=T0)
    (first,) = b.changes().schedules
    # The same SCHEDULE again replaces it (same id, creation time kept).
    b.core.client_message(b"C", sched(interval=30, headers=(("nohaste", ""),)), T0 + 5, wall=T0 + 5)
    (second,) = b.changes().schedules
    assert (second.id, second.interval, second.created, second.next_run) == (
        first.id,
        30.0,
        T0,
        T0 + 35,
    )
    # eventmq's client sends UNSCHEDULE with its default queue: found by body anyway.
    unsched = Unschedule("u", "other-queue", (), -1, b"tick", "")
    assert b.core.client_message(b"C", unsched, T0 + 6, wall=T0 + 6) is None
    assert b.out()[-1] == Outgoing("client", b"C", Ack("m2", "u"))
    changes = b.changes()
    assert (changes.schedules, changes.deleted_schedules) == ([], [first.id])
    b.core.tick(T0 + 40, wall=T0 + 40)
    assert not b.changes()


@pytest.mark.parametrize(
    ("cmd", "fragment"),
    [
        (sched(cron="61 * * * *"), "cron minute field"),
        (sched(interval=0), "interval"),
        (sched(interval=5, headers=(("retry-count", "x"),)), "header retry-count"),
        (sched(interval=5, headers=(("run_count", "x"),)), "header run_count"),
    ],
)
def test_bad_schedules_are_refused(cmd: Schedule, fragment: str) -> None:
    b = Broker()
    notice = b.core.client_message(b"C", cmd, T0, wall=T0)
    assert notice is not None and fragment in notice
    (refusal,) = b.out()
    assert isinstance(refusal.command, Reply)
    assert body_of(refusal.command.body)["error"] == {"type": "ScheduleError", "message": notice}
    assert not b.changes()
    assert b.core.counters["rejected_schedules"] == 1


def test_schedule_runs_skip_when_full() -> None:
    b = Broker(max_queued=1)
    b.request(b"C", "j1")
    b.core.client_message(b"C", sched(interval=10), T0, wall=T0)
    assert b.core.counters["schedule_runs_skipped"] == 1
    assert len(b.core.schedules()) == 1


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


# =========================================================================== changes


def test_take_changes_holds_exactly_the_changed_values() -> None:
    b = Broker()
    b.worker(b"W")
    b.request(b"C", "a")  # created and dispatched in one round: one value, the latest
    b.request(b"C", "b")
    changes = b.changes()
    assert [(j.id, j.state) for j in changes.jobs] == [
        ("a", JobState.RUNNING),
        ("b", JobState.QUEUED),
    ]
    assert not b.changes()  # nothing changed since
    b.core.worker_message(b"W", Heartbeat("h"), T0 + 1, wall=T0 + 1)
    b.core.tick(T0 + 1, wall=T0 + 1)
    assert not b.changes()  # heartbeats change no job
    b.reply(b"W", "a", now=T0 + 2)  # a ends; the READY hands b out
    b.ready(b"W", now=T0 + 2)
    assert [(j.id, j.state) for j in b.changes().jobs] == [
        ("a", JobState.SUCCEEDED),
        ("b", JobState.RUNNING),
    ]
    b.core.client_message(b"C", sched(interval=5, headers=(("nohaste", ""),)), T0, wall=T0)
    b.core.client_message(b"C", Unschedule("u", "default", (), -1, b"tick", ""), T0, wall=T0)
    changes = b.changes()
    assert (changes.jobs, changes.schedules) == ([], [])
    assert len(changes.deleted_schedules) == 1


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


def test_config_is_checked() -> None:
    with pytest.raises(ValueError, match="heartbeat_interval"):
        CoreConfig(heartbeat_interval=0)
    with pytest.raises(ValueError, match="max_queued"):
        CoreConfig(max_queued=0)
    with pytest.raises(ValueError, match="backoff_base"):
        CoreConfig(backoff_base=-1)
    with pytest.raises(ValueError, match="compat"):
        CoreConfig(compat="zeromq")  # type: ignore[arg-type]


def test_a_worker_that_informs_again_keeps_its_jobs_and_restarts_its_slots() -> None:
    b = Broker()
    b.worker(b"W", "q", slots=3)
    b.request(b"C", "j1", queue="q")
    b.out()
    b.core.worker_message(b"W", Inform("again", (("q", 10), ("r", 5))), T0 + 1, wall=T0 + 1)
    assert b.out() == [Outgoing("worker", b"W", Ack("m2", "again"))]
    (w,) = b.core.worker_views()
    assert (w.queues, w.slots_free, w.jobs_running) == (("q", "r"), 0, ("j1",))
    b.request(b"C", "j2", queue="r")
    assert b.dispatched(b.out()) == []  # no slot until the next READY
    assert b.dispatched(b.ready(b"W")) == [(b"W", "j2")]
    assert b.reply(b"W", "j1") is None


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
