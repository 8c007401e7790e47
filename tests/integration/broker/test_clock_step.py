"""A running broker whose wall clock is stepped an hour each way, a worker connected and
a job running: the worker stays, the job is neither timed out nor retried, and it
finishes once.

The broker reads a ``SteppableClock``: the machine's monotonic clock, and a wall clock
the test sets forward and back as an operator or NTP may. Worker expiry, the broker's
heartbeats and job timeouts run on the monotonic clock, so neither step moves them.
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

from tests.support.broker import running_broker
from tests.support.waiting import UNIT, async_wait_until
from zbus.broker.client import AsyncBrokerClient
from zbus.broker.client.worker import Worker
from zbus.common.clock import SteppableClock

HOUR = 3600.0
BEAT = 0.1  # heartbeat interval of the broker and the worker
MISSES = 10  # a silent worker is gone after 1 s


async def test_a_wall_clock_step_an_hour_each_way_keeps_the_worker_and_the_job(
    tmp_path: Path,
) -> None:
    clock = SteppableClock()
    started, release = threading.Event(), threading.Event()
    runs: list[int] = []

    def hold(x: int) -> int:
        runs.append(x)
        started.set()
        release.wait(30 * UNIT)
        return x + 1

    async with running_broker(
        tmp_path, clock=clock, heartbeat_interval=BEAT, heartbeat_misses=MISSES
    ) as broker:
        worker = Worker(
            broker.endpoints["workers"], concurrency=1, heartbeat_interval=BEAT, misses=MISSES
        )
        worker.register("hold", hold)
        running = asyncio.create_task(worker.run())
        client = AsyncBrokerClient(broker.endpoints["clients"])
        try:
            # A timeout far shorter than an hour, and a retry that would run it again.
            job_id = await client.submit("default", "hold", args=(1,), timeout=60, retries=1)
            await async_wait_until(lambda: asyncio.sleep(0, started.is_set()), what="job started")
            for step in (HOUR, -HOUR):
                clock.step(step)
                await asyncio.sleep(3 * BEAT * MISSES * UNIT)  # three expiry periods
            release.set()
            assert await client.result(job_id, timeout=30 * UNIT) == 2
            counters = await broker.call(lambda core, now, wall: dict(core.counters))
            views = await broker.call(lambda core, now, wall: core.worker_views())
        finally:
            client.close()
            release.set()
            worker.request_stop()
            await asyncio.wait_for(running, 30 * UNIT)
    assert runs == [1]  # it ran once
    assert counters["workers_expired"] == 0
    assert counters["timeouts"] == 0
    assert counters["retried"] == 0
    assert (counters["dispatched"], counters["succeeded"]) == (1, 1)
    assert len(views) == 1
