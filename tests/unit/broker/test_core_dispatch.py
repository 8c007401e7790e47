"""The broker core hands jobs out: the round trip, routing across workers, queues and
clients, duplicate requests, the changes it asks the store to write, and a worker
that informs again.
"""

from __future__ import annotations

from tests.support.broker_core import ERROR, RR, T0, VALUE, Broker, results, sched
from zbus.broker.core.broker import Outgoing
from zbus.broker.core.model import JobState
from zbus.common.protocols.emqp import Ack, Heartbeat, Inform, Reply, Request, Unschedule

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
