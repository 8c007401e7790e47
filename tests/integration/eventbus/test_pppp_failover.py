"""A PPPP subscriber given several doors: when the one it talks to goes silent it
subscribes at the next one, in turn, keeping its positions. A dead endpoint stands for
a lost replica; the door restarted on its port numbers the channel as before (the same
log and ``pppp.sqlite``), so the subscriber comes back to it with no gap and no
duplicate."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

import pytest

from tests.support.bus import running_bus
from tests.support.bus_process import bus_process
from tests.support.ports import HeldPorts
from tests.support.pppp import (
    BUS_ENV,
    BUS_TIMES,
    TIMES,
    new_uuids,
    publish,
    stored_position,
)
from tests.support.waiting import UNIT, Deadline, wait_until
from zbus import (
    AsyncEventBusClient,
    AsyncPPPPSubscriber,
    BusEndpoints,
    EventBusClient,
    PPPPSubscriber,
)


@pytest.mark.parametrize("shell", ["blocking", "asyncio"])
async def test_a_dead_first_door_is_passed_over_for_the_next(tmp_path: Path, shell: str) -> None:
    with HeldPorts() as dead:
        async with running_bus(tmp_path / "bus", pppp_port=0, **BUS_TIMES) as bus:
            doors = f"tcp://127.0.0.1:{dead.port},{bus.endpoints['pppp']}"
            uuids = new_uuids(3)
            async with AsyncEventBusClient(
                BusEndpoints.from_info(bus.endpoints), producer="t"
            ) as c:
                for u in uuids:
                    await c.publish("/f/x", b"d", uuid=u, confirm=True)
            got = []
            if shell == "blocking":
                sub = PPPPSubscriber(doors, "/f/", name=f"f-{shell}", **TIMES)
                try:
                    msg = await asyncio.to_thread(sub.next, 30 * UNIT)
                finally:
                    sub.close()
                got.append(msg)
                failovers, endpoint = sub.failovers, sub.endpoint
            else:
                async with AsyncPPPPSubscriber(doors, "/f/", name=f"f-{shell}", **TIMES) as asub:
                    got.append(await asub.next(timeout=30 * UNIT))
                    failovers, endpoint = asub.failovers, asub.endpoint
    assert failovers == 1 and endpoint == bus.endpoints["pppp"]
    msg = got[0]
    assert msg is not None and msg.sync and msg.uuid == uuids[-1]


@pytest.mark.timeout(300)
def test_the_door_killed_9_the_next_one_tried_then_the_restarted_one_resumes(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    data = tmp_path / "bus"
    held, dead = HeldPorts(), HeldPorts()
    request.addfinalizer(dead.release)
    env = {"ZBUS_PPPP_PORT": str(held.port), **BUS_ENV}
    held.release()
    door = f"tcp://127.0.0.1:{held.port}"
    first, second = new_uuids(2000), new_uuids(2000)
    got: list[tuple[int, str]] = []
    with bus_process(data, env) as (pid, endpoints):
        assert endpoints["pppp"] == door
        with EventBusClient(BusEndpoints.from_info(endpoints), producer="t") as client:
            client.publish("/d/start", b"", confirm=True)
            sub = PPPPSubscriber([door, f"tcp://127.0.0.1:{dead.port}"], "/d/", name="d-1", **TIMES)
            request.addfinalizer(sub.close)
            msg = sub.next(timeout=30 * UNIT)
            assert msg is not None and msg.sync
            publish(client, "/d/x", first)
        while len(got) < 1000:
            msg = sub.next(timeout=30 * UNIT)
            assert msg is not None
            got.append((msg.sequence, msg.uuid))
        wait_until(lambda: stored_position(data, "d-1") >= 500, 30, "a stored position")
        os.kill(pid, signal.SIGKILL)
    # Silent door: the subscriber moves to the next endpoint (dead too).
    deadline = Deadline(30, "the subscriber to move to the next endpoint")
    while sub.failovers < 1:
        deadline.left()
        msg = sub.next(timeout=0.05)
        if msg is not None:
            got.append((msg.sequence, msg.uuid))
    assert sub.endpoint != door
    with bus_process(data, env) as (_, endpoints):
        with EventBusClient(BusEndpoints.from_info(endpoints), producer="t") as client:
            publish(client, "/d/x", second)
        while len(got) < 4000:
            msg = sub.next(timeout=30 * UNIT)
            assert msg is not None, f"stalled after {len(got)}"
            got.append((msg.sequence, msg.uuid))
        assert sub.next(timeout=0.5) is None
        assert sub.failovers >= 2 and sub.endpoint == door
        sub.close()
    assert [s for s, _ in got] == list(range(1, 4001))
    assert [u for _, u in got] == first + second
