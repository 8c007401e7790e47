"""The PPPP subscriber against a real bus with its PPPP door: exactly once, in order,
across a lossy link, a subscriber killed (within and after the grace period) and the
bus killed with -9; CUSTOM; the asyncio client."""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from tests.support.bus import running_bus
from tests.support.bus_process import bus_process
from tests.support.lossy_proxy import LossyProxy
from tests.support.ports import HeldPorts
from tests.support.pppp import (
    BUS_ENV,
    BUS_TIMES,
    TIMES,
    new_uuids,
    publish,
    stored_position,
)
from tests.support.waiting import UNIT, async_wait_until, wait_until
from zbus import (
    AsyncEventBusClient,
    AsyncPPPPSubscriber,
    BusEndpoints,
    EventBusClient,
    PPPPSubscriber,
)
from zbus.common.security import generate_keys, load_keys
from zbus.eventbus.doors.pppp.admin import pppp_status
from zbus.eventbus.server.service import EventBusService

ROOT = Path(__file__).resolve().parents[3]


async def apublish(client: AsyncEventBusClient, topic: str, uuids: list[str]) -> None:
    for i in range(0, len(uuids), 1000):
        chunk = uuids[i : i + 1000]
        await client.publish_many(
            [(topic, b"d", u) for u in chunk], confirm=True, timeout=30 * UNIT
        )


def subscriber_state(bus: EventBusService, name: str) -> dict[str, Any] | None:
    assert bus.pppp is not None
    status = bus.pppp.submit(lambda door: pppp_status(door, None, 1000)).result(10)
    for sub in status["subscribers"]:
        if sub["name"] == name:
            return dict(sub)
    return None


def synced(bus: EventBusService, name: str, channel: str) -> bool:
    """The bus has the subscriber's ACK of its SYNC."""
    state = subscriber_state(bus, name)
    conv = None if state is None else state["channels"].get(channel)
    return conv is not None and not conv["syncing"] and state["state"] == "live"  # type: ignore[index]


async def until_synced(sub: AsyncPPPPSubscriber, bus: EventBusService, *channels: str) -> None:
    """Let ``sub`` talk (it does only while it is asked for a message) until the bus has
    its ACK of every channel's SYNC."""
    name = sub.identity.decode()
    for _ in range(int(600 * UNIT)):
        if all(synced(bus, name, ch) for ch in channels):
            return
        assert await sub.next(timeout=0.05) is None
    raise AssertionError("no SYNC ACKed within 30 s")


# ------------------------------------------------------------------ a lossy link
@pytest.mark.timeout(600)
def test_100000_messages_exactly_once_in_order_through_a_lossy_link(tmp_path: Path) -> None:
    rng = random.Random(20261124)
    up, down = rng.uniform(0.01, 0.05), rng.uniform(0.01, 0.05)
    total = 100_000
    with bus_process(tmp_path / "bus", {"ZBUS_PPPP_PORT": "0", **BUS_ENV}) as (_, endpoints):  # noqa: SIM117
        with EventBusClient(BusEndpoints.from_info(endpoints), producer="lossy") as client:
            client.publish("/lossy/start", b"", confirm=True)  # the SYNC holds it
            uuids = new_uuids(total)
            with (
                LossyProxy(endpoints["pppp"], up=up, down=down, seed=7) as proxy,
                PPPPSubscriber(proxy.endpoint, "/lossy/", name="lossy-1", **TIMES) as sub,
            ):
                first = sub.next(timeout=30 * UNIT)
                assert first is not None and first.sync and first.topic == "/lossy/start"
                publisher = threading.Thread(target=publish, args=(client, "/lossy/d", uuids))
                publisher.start()
                seqs, got = [], []
                while len(seqs) < total:
                    msg = sub.next(timeout=30 * UNIT)
                    assert msg is not None, f"stalled after {len(seqs)} messages"
                    seqs.append(msg.sequence)
                    got.append(msg.uuid)
                publisher.join(60 * UNIT)
                assert sub.next(timeout=0.5) is None  # nothing more, no late duplicate
                stats = (sub.nacks, sub.duplicates, sub.resubscribes)
            sent_up = proxy.forwarded["up"] + proxy.dropped["up"]
            sent_down = proxy.forwarded["down"] + proxy.dropped["down"]
    assert seqs == list(range(1, total + 1))
    assert got == uuids
    # The proxy did drop each way, about as asked, and the subscriber repaired it.
    assert 0 < proxy.dropped["up"] / sent_up < 0.1
    assert 0.005 < proxy.dropped["down"] / sent_down < 0.06
    assert stats[0] > 0, stats
    print(
        f"loss {up:.3f} up, {down:.3f} down; frames {sent_up:,} up, {sent_down:,} down; "
        f"NACKs {stats[0]:,}, duplicates {stats[1]:,}, SUBSCRIBEs again {stats[2]}"
    )


# ------------------------------------------------------------ a killed subscriber
def start_subscriber(endpoint: str, channel: str, name: str, out: Path, mode: str) -> Any:
    args = [endpoint, channel, name, str(out), mode]
    return subprocess.Popen(
        [sys.executable, "-m", "tests.support.pppp_subscriber_proc", *args],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )


def rows(out: Path, mode: str) -> list[tuple[int, str, int, str]]:
    """What the subscriber process recorded: (sequence, uuid, sync, topic)."""
    if not out.exists():
        return []
    if mode == "plain":
        lines = out.read_text().splitlines()
        return [tuple(json.loads(line)) for line in lines if line.endswith("]")]  # type: ignore[misc]
    try:
        with sqlite3.connect(f"file:{out}?mode=ro", uri=True) as db:
            return list(db.execute("SELECT seq, uuid, sync, topic FROM got ORDER BY rowid"))
    except sqlite3.OperationalError:  # not created yet
        return []


def kill(proc: Any) -> None:
    proc.send_signal(signal.SIGKILL)
    proc.wait(30 * UNIT)


@pytest.mark.parametrize("mode", ["store", "plain"])
async def test_a_subscriber_killed_and_back_within_grace_gets_its_backlog(
    tmp_path: Path, mode: str
) -> None:
    out = tmp_path / ("got.sqlite" if mode == "store" else "got.jsonl")
    first, second = new_uuids(3000), new_uuids(3000)
    async with running_bus(tmp_path / "bus", pppp_port=0, **BUS_TIMES) as bus:
        endpoint = bus.endpoints["pppp"]
        async with AsyncEventBusClient(BusEndpoints.from_info(bus.endpoints), producer="t") as c:
            proc = start_subscriber(endpoint, "/k/", "worker-1", out, mode)
            try:
                await async_wait_until(
                    lambda: asyncio.sleep(0, synced(bus, "worker-1", "/k/")), 30, "SYNC ACKed"
                )
                await apublish(c, "/k/a", first)
                await async_wait_until(
                    lambda: asyncio.sleep(0, len(rows(out, mode)) >= 1000), 60, "1000 taken"
                )
                kill(proc)  # mid-stream: the bus has what it sent and has no ACK of
                before = rows(out, mode)
                await apublish(c, "/k/a", second)  # and all of these: its backlog
                proc = start_subscriber(endpoint, "/k/", "worker-1", out, mode)
                await async_wait_until(
                    lambda: asyncio.sleep(0, len({r[0] for r in rows(out, mode)}) >= 6000),
                    120,
                    "every message",
                )
            finally:
                kill(proc)
    got = rows(out, mode)
    assert not any(r[2] for r in got)  # no SYNC item: the bus knew the subscriber
    seqs = [r[0] for r in got]
    assert sorted(set(seqs)) == list(range(1, 6001))  # no loss
    if mode == "store":
        assert seqs == list(range(1, 6001))  # and with the store, no duplicate either
        assert [r[1] for r in got] == first + second
    else:
        assert seqs[: len(before)] == list(range(1, len(before) + 1))
        resumed = seqs[len(before) :]
        assert resumed == list(range(resumed[0], 6001)) and resumed[0] <= len(before) + 1


async def test_a_subscriber_back_after_the_grace_period_gets_a_sync_first(tmp_path: Path) -> None:
    out = tmp_path / "got.jsonl"
    async with running_bus(tmp_path / "bus", pppp_port=0, pppp_grace=0.5, **BUS_TIMES) as bus:
        endpoint = bus.endpoints["pppp"]
        async with AsyncEventBusClient(BusEndpoints.from_info(bus.endpoints), producer="t") as c:
            proc = start_subscriber(endpoint, "/g/", "worker-2", out, "plain")
            try:
                await async_wait_until(
                    lambda: asyncio.sleep(0, synced(bus, "worker-2", "/g/")), 30, "SYNC ACKed"
                )
                for topic in ("/g/a", "/g/b", "/g/a"):
                    await apublish(c, topic, new_uuids(1))
                await async_wait_until(lambda: asyncio.sleep(0, len(rows(out, "plain")) >= 3), 30)
                kill(proc)
                latest_c = new_uuids(2)
                await apublish(c, "/g/c", latest_c)
                await async_wait_until(
                    lambda: asyncio.sleep(0, subscriber_state(bus, "worker-2") is None),
                    30,
                    "the grace period to run out",
                )
                assert bus.pppp is not None
                assert bus.pppp.submit(lambda door: door.core.grace_expiries).result(10) == 1
                seen = len(rows(out, "plain"))
                proc = start_subscriber(endpoint, "/g/", "worker-2", out, "plain")
                await async_wait_until(
                    lambda: asyncio.sleep(0, synced(bus, "worker-2", "/g/")), 30, "a new SYNC"
                )
                live = new_uuids(2)
                await apublish(c, "/g/b", live)
                await async_wait_until(
                    lambda: asyncio.sleep(0, len(rows(out, "plain")) >= seen + 5), 30
                )
            finally:
                kill(proc)
    again = rows(out, "plain")[seen:]
    sync, after = again[:3], again[3:]
    assert all(r[2] == 1 and r[0] == 0 for r in sync)
    assert sorted(r[3] for r in sync) == ["/g/a", "/g/b", "/g/c"]
    assert next(r[1] for r in sync if r[3] == "/g/c") == latest_c[-1]
    # Then the live messages, numbered on from the SYNC's head (the door dropped the
    # channel with its last subscriber, so the head is where it numbers from anew).
    assert [(r[1], r[2]) for r in after] == [(live[0], 0), (live[1], 0)]
    assert after[1][0] == after[0][0] + 1


# --------------------------------------------------------------- a killed bus


@pytest.mark.timeout(300)
def test_the_bus_killed_9_and_restarted_mid_stream_keeps_exactly_once(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    data = tmp_path / "bus"
    # Both processes bind this port: the subscriber keeps its endpoint across the restart.
    held = HeldPorts()
    env = {"ZBUS_PPPP_PORT": str(held.port), **BUS_ENV}
    held.release()
    first, second = new_uuids(5000), new_uuids(5000)
    got: list[tuple[int, str]] = []
    with bus_process(data, env) as (pid, endpoints):
        with EventBusClient(BusEndpoints.from_info(endpoints), producer="t") as client:
            client.publish("/d/start", b"", confirm=True)
            sub = PPPPSubscriber(endpoints["pppp"], "/d/", name="d-1", **TIMES)
            # Closed even when the test fails: its context, left open, holds the exit.
            request.addfinalizer(sub.close)
            msg = sub.next(timeout=30 * UNIT)
            assert msg is not None and msg.sync
            publish(client, "/d/x", first)
        while len(got) < 2000:
            msg = sub.next(timeout=30 * UNIT)
            assert msg is not None
            got.append((msg.sequence, msg.uuid))
        # The door stores positions in group commits: kill it once one has landed.
        wait_until(lambda: stored_position(data, "d-1") >= 1000, 30, "a stored position")
        os.kill(pid, signal.SIGKILL)
    with bus_process(data, env) as (_, endpoints):
        with EventBusClient(BusEndpoints.from_info(endpoints), producer="t") as client:
            publish(client, "/d/x", second)
        while len(got) < 10_000:
            msg = sub.next(timeout=30 * UNIT)
            assert msg is not None, f"stalled after {len(got)}"
            got.append((msg.sequence, msg.uuid))
        assert sub.next(timeout=0.5) is None
        assert sub.resubscribes >= 1  # the restarted bus knew nothing of the conversation
        sub.close()
    assert [s for s, _ in got] == list(range(1, 10_001))
    assert [u for _, u in got] == first + second


# ------------------------------------------------- both shells start the same way
@pytest.mark.parametrize("shell", ["blocking", "asyncio"])
async def test_both_subscribers_subscribe_when_they_are_made(tmp_path: Path, shell: str) -> None:
    """Made, and not asked for anything yet: the bus knows the subscriber, and a message
    published meanwhile is the first one taken, by either shell."""
    name = f"made-{shell}"
    async with running_bus(tmp_path / "bus", pppp_port=0, **BUS_TIMES) as bus:
        endpoint, uuids = bus.endpoints["pppp"], new_uuids(1)
        if shell == "blocking":
            sub: PPPPSubscriber | AsyncPPPPSubscriber = PPPPSubscriber(
                endpoint, "/m/", name=name, **TIMES
            )
        else:
            sub = AsyncPPPPSubscriber(endpoint, "/m/", name=name, **TIMES)

        async def known() -> bool:
            return subscriber_state(bus, name) is not None

        await async_wait_until(known, what="the bus to know the subscriber")
        async with AsyncEventBusClient(BusEndpoints.from_info(bus.endpoints), producer="t") as c:
            await apublish(c, "/m/x", uuids)
        if isinstance(sub, PPPPSubscriber):
            msg = await asyncio.to_thread(sub.next, 30 * UNIT)
            sub.close()
        else:
            msg = await sub.next(timeout=30 * UNIT)
            await sub.aclose()
    assert msg is not None and msg.uuid == uuids[0]


# ------------------------------------------------------------ CUSTOM, asyncio
async def test_custom_reaches_an_event_bus_subscriber(tmp_path: Path) -> None:
    async with running_bus(tmp_path / "bus", pppp_port=0, **BUS_TIMES) as bus:
        endpoints = BusEndpoints.from_info(bus.endpoints)
        async with (
            AsyncEventBusClient(endpoints, producer="t") as client,
            await client.subscribe("/zbus/pppp/custom/") as events,
            await AsyncPPPPSubscriber.open(
                bus.endpoints["pppp"], "/c/", name="caller-1", **TIMES
            ) as sub,
        ):
            await until_synced(sub, bus, "/c/")
            await sub.custom(b"hello", b"\x00\x01")
            event = await events.next(timeout=30 * UNIT)
    assert event is not None
    assert event.topic == "/zbus/pppp/custom/caller-1"
    assert event.producer == "pppp:caller-1"
    assert event.unpack() == [b"hello", b"\x00\x01"]


async def test_the_asyncio_subscriber_takes_every_message_in_order(tmp_path: Path) -> None:
    uuids = new_uuids(3000)
    async with running_bus(tmp_path / "bus", pppp_port=0, **BUS_TIMES) as bus:
        endpoints = BusEndpoints.from_info(bus.endpoints)
        async with (
            AsyncEventBusClient(endpoints, producer="t") as client,
            await AsyncPPPPSubscriber.open(bus.endpoints["pppp"], ["/a/", "/b/"], **TIMES) as sub,
        ):
            await until_synced(sub, bus, "/a/", "/b/")
            await apublish(client, "/a/x", uuids[:1500])
            await apublish(client, "/b/y", uuids[1500:])
            got: dict[str, list[tuple[int, str]]] = {"/a/": [], "/b/": []}
            async for msg in sub:
                got[msg.channel].append((msg.sequence, msg.uuid))
                if sum(map(len, got.values())) == 3000:
                    break
            # The message taken last is done once the application comes back.
            assert sum(sub.positions().values()) == 2999
            assert await sub.next(timeout=0.3) is None
            assert sub.positions() == {"/a/": 1500, "/b/": 1500}
    assert got["/a/"] == list(zip(range(1, 1501), uuids[:1500], strict=True))
    assert got["/b/"] == list(zip(range(1, 1501), uuids[1500:], strict=True))


async def test_the_subscriber_speaks_curve_to_a_bus_that_runs_it(tmp_path: Path) -> None:
    keys, allowed = tmp_path / "keys", tmp_path / "allowed"
    bus_public, bus_secret = generate_keys(keys, "eventbus")
    listed_public, listed_secret = generate_keys(keys, "listed")
    _, unlisted_secret = generate_keys(keys, "unlisted")
    allowed.mkdir()
    (allowed / listed_public.name).write_bytes(listed_public.read_bytes())
    server = load_keys(bus_public).public
    settings = {"curve_secret_key": bus_secret, "curve_allowed_clients": allowed}
    async with running_bus(tmp_path / "bus", pppp_port=0, **settings, **BUS_TIMES) as bus:
        endpoint = bus.endpoints["pppp"]
        curve = (load_keys(listed_secret), server)
        async with await AsyncPPPPSubscriber.open(endpoint, "/s/", curve=curve, **TIMES) as sub:
            await until_synced(sub, bus, "/s/")
        stranger = (load_keys(unlisted_secret), server)
        async with await AsyncPPPPSubscriber.open(
            endpoint, "/s/", name="stranger", curve=stranger, **TIMES
        ) as sub:
            assert await sub.next(timeout=1.0) is None
            assert subscriber_state(bus, "stranger") is None  # the bus heard nothing
            assert sub.resubscribes >= 1  # and the subscriber heard nothing back
