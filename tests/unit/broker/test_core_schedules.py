"""The broker core's schedulers and schedules: eventmq schedulers on either port,
interval and cron schedules, run counts, unschedule and replace, and refusals.
"""

from __future__ import annotations

import pytest

from tests.support.broker_core import RR, T0, Broker, body_of, sched
from zbus.broker.core.broker import Changes, Outgoing
from zbus.broker.core.model import JobState
from zbus.common.protocols.emqp import (
    Ack,
    Disconnect,
    Heartbeat,
    Inform,
    Kbye,
    Ready,
    Reply,
    Request,
    Schedule,
    Unschedule,
)

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
