"""The broker core on two clocks: intervals on monotonic time, calendar times on wall time.

A ``ManualClock`` drives the core as the router does; its wall clock is stepped an hour
forward and back (as an operator or NTP may) while monotonic time goes on as usual. No
worker expires, no job times out or retries early or late and the heartbeats keep their
schedule because of a step. Delayed jobs and schedules name calendar times, so they do
follow the wall clock: set forward past a delayed job's time, the job is due at once.
"""

from __future__ import annotations

import json

import pytest

from zbus.broker.core.broker import BrokerCore, CoreConfig
from zbus.broker.core.model import Job, JobState
from zbus.common.clock import ManualClock
from zbus.common.protocols.emqp import (
    Headers,
    Heartbeat,
    Inform,
    Ready,
    Reply,
    Request,
    Schedule,
    build_reply_value,
)

HOUR = 3600.0
TICK = 0.25  # exact in binary: sums of it land on the deadlines
VALUE = build_reply_value(42)
ERROR = json.dumps({"error": {"type": "ValueError", "message": "boom"}}).encode()


class Driven:
    """A core and the clock that feeds it, read the way the broker's router reads it."""

    def __init__(self, jobs: tuple[Job, ...] = (), clock: ManualClock | None = None) -> None:
        self.clock = clock or ManualClock()
        config = CoreConfig(heartbeat_interval=1.0, heartbeat_misses=3, backoff_base=4.0)
        self.core = BrokerCore(config, jobs, now=self.clock.monotonic(), wall=self.clock.time())
        #: (monotonic time, identity) of every HEARTBEAT the broker sent.
        self.heartbeats: list[tuple[float, bytes]] = []
        #: (monotonic time, job id) of every REQUEST handed to a worker.
        self.dispatches: list[tuple[float, str]] = []

    def client(self, cmd: Request | Schedule) -> None:
        now, wall = self.clock.monotonic(), self.clock.time()
        assert self.core.client_message(b"C", cmd, now, wall=wall) is None
        self._collect()

    def worker(self, identity: bytes, cmd: Inform | Ready | Reply | Heartbeat) -> None:
        now, wall = self.clock.monotonic(), self.clock.time()
        assert self.core.worker_message(identity, cmd, now, wall=wall) is None
        self._collect()

    def tick(self) -> None:
        self.core.tick(self.clock.monotonic(), wall=self.clock.time())
        self._collect()

    def _collect(self) -> None:
        now = self.clock.monotonic()
        for out in self.core.take_outbox():
            if isinstance(out.command, Heartbeat):
                self.heartbeats.append((now, out.identity))
            elif isinstance(out.command, Request):
                self.dispatches.append((now, out.command.msgid))

    def state(self, job_id: str) -> JobState:
        job = self.core.job(job_id)
        assert job is not None
        return job.state


def request(job_id: str, *headers: tuple[str, str]) -> Request:
    return Request(job_id, "q", tuple(headers), b"call")


def run(d: Driven, seconds: float, step_at: dict[float, float], beat: bool = True) -> None:
    """Let ``seconds`` of monotonic time pass in ticks; the worker beats every second;
    at each monotonic time in ``step_at`` the wall clock is stepped by its value."""
    start = d.clock.monotonic()
    while d.clock.monotonic() < start + seconds:
        d.clock.advance(TICK)
        elapsed = d.clock.monotonic() - start
        if elapsed in step_at:
            d.clock.step(step_at[elapsed])
        if beat and elapsed % 1.0 == 0:
            d.worker(b"W", Heartbeat("hb"))
        d.tick()


@pytest.mark.parametrize("step", [HOUR, -HOUR])
def test_a_wall_clock_step_expires_no_worker_and_moves_no_timer(step: float) -> None:
    d = Driven()
    d.worker(b"W", Inform("inf", (("q", 10),)))
    for _ in range(2):
        d.worker(b"W", Ready("rdy"))
    d.client(request("slow", ("timeout", "10"), ("retry-count", "0")))
    d.client(request("flaky", ("retry-count", "1")))
    assert d.dispatches == [(0.0, "slow"), (0.0, "flaky")]
    d.clock.advance(1.0)
    d.worker(b"W", Reply("rep", ERROR, "flaky"))  # at 1 s: retried after a 4 s backoff
    d.worker(b"W", Ready("rdy"))
    d.tick()
    # The wall clock is stepped at 2 s, and back at 9.25 s; the worker is silent from
    # 3 s to 5.75 s, less than the 3 s it may be (interval 1 s x 3 misses).
    run(d, 2.0, {1.0: step})
    run(d, 1.75, {}, beat=False)
    run(d, 21.25, {4.5: -step})

    assert d.core.counters["workers_expired"] == 0
    assert [w.identity for w in d.core.worker_views()] == [b"W"]
    # The retry went out when its backoff ended on the monotonic clock, not before, not after.
    assert d.dispatches[2:] == [(5.0, "flaky")]
    # The timeout came at 10 s of monotonic time.
    assert d.core.counters["timeouts"] == 1
    slow = d.core.job("slow")
    assert slow is not None and slow.state is JobState.DEAD
    # Heartbeats every second from the first INFORM, whatever the wall clock did.
    assert d.heartbeats == [(float(s), b"W") for s in range(1, 27)]


@pytest.mark.parametrize("step", [HOUR, -HOUR])
def test_a_wall_clock_step_keeps_a_finished_job_remembered(step: float) -> None:
    d = Driven()
    d.worker(b"W", Inform("inf", (("q", 10),)))
    d.worker(b"W", Ready("rdy"))
    d.client(request("job1"))
    d.worker(b"W", Reply("rep", VALUE, "job1"))
    d.clock.step(step)
    d.clock.advance(1.0)
    d.tick()
    assert d.core.job("job1") is not None  # kept for finished_ttl (300 s) of monotonic time
    d.clock.advance(299.0)
    d.tick()
    assert d.core.job("job1") is None


def test_a_delayed_job_follows_the_wall_clock() -> None:
    """A ``delay`` names a calendar time: set forward past it, the job is due at once."""
    d = Driven()
    d.worker(b"W", Inform("inf", (("q", 10),)))
    d.worker(b"W", Ready("rdy"))
    d.client(request("later", ("delay", "1800")))
    d.client(request("soon", ("delay", "10")))
    assert d.dispatches == []
    assert d.core.next_deadline() == 1.0  # the heartbeat; the delays are later
    d.clock.advance(0.5)
    d.clock.step(HOUR)
    d.tick()
    # Both calendar times have passed: both jobs are released, in the order of their
    # times; the one slot takes the first.
    assert [job_id for _, job_id in d.dispatches] == ["soon"]
    assert d.core.queue_views()[0].ready == 1


def test_a_delayed_job_waits_for_its_wall_time_after_a_step_back() -> None:
    d = Driven()
    d.client(request("job1", ("delay", "10")))
    d.clock.step(-60.0)
    d.tick()
    # Its wall time is now 70 s away, and the core's next deadline says so in monotonic time.
    assert d.core.next_deadline() == 70.0
    d.worker(b"W", Inform("inf", (("q", 10),)))
    d.worker(b"W", Ready("rdy"))
    run(d, 69.75, {})
    assert d.dispatches == []
    run(d, 0.25, {})
    assert d.dispatches == [(70.0, "job1")]


def test_an_interval_schedule_follows_the_wall_clock_once() -> None:
    d = Driven()
    schedule = Schedule("s", "q", (("nohaste", ""),), 60, b"tick", "")
    d.client(schedule)
    assert d.core.counters["schedule_runs"] == 0
    d.clock.advance(1.0)
    d.clock.step(HOUR)
    d.tick()
    # Its calendar time has passed: it runs once, and its next run is after the new now.
    assert d.core.counters["schedule_runs"] == 1
    (stored,) = d.core.schedules()
    assert d.clock.time() < stored.next_run <= d.clock.time() + 60


def stored_job(state: JobState, *, attempts: int, not_before: float, wall: float) -> Job:
    headers: Headers = ()
    return Job("j", "q", headers, b"call", None, state, attempts, 3, None, not_before, wall, wall)


@pytest.mark.parametrize("set_back", [0.0, HOUR])
def test_a_restarted_broker_converts_what_is_left_of_a_retry_backoff(set_back: float) -> None:
    """A backoff stored as a wall time (for the restart) waits out what was left of it on
    the monotonic clock; a wall clock set back while the broker was down makes it no
    longer than ``backoff_max`` (60 s)."""
    clock = ManualClock()
    wall = clock.time()
    retrying = stored_job(JobState.QUEUED, attempts=1, not_before=wall + 30, wall=wall)
    clock.step(-set_back)
    d = Driven((retrying,), clock)
    wait = 30.0 if not set_back else 60.0
    assert d.core.next_deadline() == wait
    d.worker(b"W", Inform("inf", (("q", 10),)))
    d.worker(b"W", Ready("rdy"))
    run(d, wait - TICK, {TICK: HOUR})  # a step forward does not release it either
    assert d.dispatches == []
    run(d, TICK, {})
    assert d.dispatches == [(wait, "j")]


def test_a_restarted_broker_keeps_a_delay_on_the_wall_clock() -> None:
    clock = ManualClock()
    wall = clock.time()
    delayed = stored_job(JobState.QUEUED, attempts=0, not_before=wall + 30, wall=wall)
    d = Driven((delayed,), clock)
    d.worker(b"W", Inform("inf", (("q", 10),)))
    d.worker(b"W", Ready("rdy"))
    run(d, 1.0, {0.5: 28.5})  # the wall clock reaches its time after 1.5 s
    assert d.dispatches == []
    run(d, 0.5, {})
    assert d.dispatches == [(1.5, "j")]


def test_worker_views_show_wall_times() -> None:
    d = Driven()
    d.worker(b"W", Inform("inf", (("q", 10),)))
    d.clock.advance(2.0)
    d.tick()
    (view,) = d.core.worker_views()
    assert view.last_heartbeat == d.clock.time() - 2.0
