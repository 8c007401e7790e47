"""The event bus clients against real buses on 127.0.0.1 (services started in-process).

The blocking client runs in a worker thread (``asyncio.to_thread``) so that the bus's
own loop keeps running; the async client runs on the test's loop beside the bus.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgpack
import pytest
import zmq
import zmq.asyncio

from tests.support.ports import HeldPorts
from tests.support.running import start_service
from tests.support.waiting import UNIT, wait_until
from zbus.common.protocols import eventbus_ext as ext
from zbus.eventbus.client import (
    AsyncEventBusClient,
    AsyncSubscription,
    BusEndpoints,
    Event,
    EventBusClient,
    Subscription,
)
from zbus.eventbus.server.config import EventBusSettings
from zbus.eventbus.server.service import EventBusService

BEAT = 0.1  # heartbeat interval of every bus and client here: failover in 0.3 s
MISSES = 3
UUID = "5f0c3b1e-9a7d-4c2e-8b61-0d4e2f9a7c13"


@dataclass
class Bus:
    service: EventBusService
    task: asyncio.Task[None]

    @property
    def endpoints(self) -> BusEndpoints:
        return BusEndpoints.from_info(self.service.info())

    async def stop(self) -> None:
        self.service.request_stop()
        await asyncio.wait_for(self.task, 10 * UNIT)


async def start_bus(data_dir: Path, port: int = 0, **ports: int) -> Bus:
    settings = EventBusSettings(
        port=port, data_dir=data_dir, heartbeat_interval=BEAT, shutdown_timeout=2, **ports
    )
    service = EventBusService(settings)
    return Bus(service, await start_service(service, "event bus start"))


@pytest.fixture
async def bus_on_loop(tmp_path: Path) -> AsyncIterator[Bus]:
    """Not the suite's ``bus`` (a thread of its own): a bus on the test's own loop, which
    the test may stop (``await bus_on_loop.stop()``) to make its clients fail over."""
    running = await start_bus(tmp_path / "a")
    yield running
    if not running.task.done():
        await running.stop()


@pytest.fixture
async def bus_b_on_loop(tmp_path: Path) -> AsyncIterator[Bus]:
    """A second, independent ``bus_on_loop``: the backup clients fail over to."""
    running = await start_bus(tmp_path / "b")
    yield running
    if not running.task.done():
        await running.stop()


def client(*buses: Bus, producer: str = "test") -> EventBusClient:
    return EventBusClient(
        [b.endpoints for b in buses], producer=producer, heartbeat_interval=BEAT, misses=MISSES
    )


def aclient(*buses: Bus, producer: str = "test") -> AsyncEventBusClient:
    return AsyncEventBusClient(
        [b.endpoints for b in buses], producer=producer, heartbeat_interval=BEAT, misses=MISSES
    )


def collect(sub: Subscription, n: int, within: float = 5.0) -> list[Event]:
    """Exactly n events, waiting at most ``within`` (scaled) seconds for them."""
    deadline = time.monotonic() + within * UNIT
    out: list[Event] = []
    while len(out) < n:
        event = sub.next(max(0.0, deadline - time.monotonic()))
        if event is None:
            raise AssertionError(f"got {len(out)} of {n} events: {pairs(out)}")
        out.append(event)
    return out


async def acollect(sub: AsyncSubscription, n: int, within: float = 5.0) -> list[Event]:
    deadline = time.monotonic() + within * UNIT
    out: list[Event] = []
    while len(out) < n:
        event = await sub.next(max(0.0, deadline - time.monotonic()))
        if event is None:
            raise AssertionError(f"got {len(out)} of {n} events: {pairs(out)}")
        out.append(event)
    return out


def pairs(events: list[Event]) -> list[tuple[int, str]]:
    return [(e.seq, e.topic) for e in events]


# Both shells behind one awaited API, so that one test covers both: the blocking client
# runs in a worker thread, the asyncio one on the test's loop.
SHELLS = pytest.mark.parametrize("shell", ["blocking", "asyncio"])


@contextlib.asynccontextmanager
async def shell_client(shell: str, endpoints: BusEndpoints, **options: Any) -> AsyncIterator[Any]:
    if shell == "blocking":
        c = EventBusClient(endpoints, producer="t", **options)
        try:
            yield c
        finally:
            await asyncio.to_thread(c.close, 0)
    else:
        async with AsyncEventBusClient(endpoints, producer="t", **options) as ac:
            yield ac


async def on(shell: str, call: Callable[..., Any], *args: Any) -> Any:
    """``call(*args)``: in a thread for the blocking shell, awaited for the asyncio one."""
    if shell == "blocking":
        return await asyncio.to_thread(call, *args)
    return await call(*args)


async def shell_collect(shell: str, sub: Any, n: int) -> list[Event]:
    events: list[Event] = await on(shell, collect if shell == "blocking" else acollect, sub, n)
    return events


def items(prefix: str, n: int, topics: int, width: int = 1) -> list[tuple[str, Any]]:
    """n events on ``topics`` topics, prefix + a number of ``width`` digits."""
    return [(f"{prefix}{i % topics:0{width}d}", {"i": i}) for i in range(n)]


def latest_first(published: list[tuple[int, str]]) -> list[tuple[int, str]]:
    """What a snapshot of these events holds: the latest of each topic, by topic."""
    latest = dict((topic, seq) for seq, topic in published)
    return sorted(((seq, topic) for topic, seq in latest.items()), key=lambda p: p[1])


# ------------------------------------------------------------------ endpoints
def test_endpoints_from_a_base_address_and_from_info() -> None:
    ends = BusEndpoints.from_base("tcp://10.0.0.5:5556")
    assert ends == BusEndpoints(
        "tcp://10.0.0.5:5556", "tcp://10.0.0.5:5557", "tcp://10.0.0.5:5558", "tcp://10.0.0.5:5559"
    )
    info = {"name": "eventbus", "endpoints": {**dataclasses.asdict(ends), "admin": "http://x"}}
    assert BusEndpoints.from_info(info) == ends
    assert BusEndpoints.from_info(info["endpoints"]) == ends
    for bad in ("10.0.0.5:5556", "udp://h:5556", "tcp://h:port", "tcp://h:65533", "tcp://:1"):
        with pytest.raises(ValueError):
            BusEndpoints.from_base(bad)
    with pytest.raises(ValueError, match="stream"):
        BusEndpoints.from_info({"endpoints": {"snapshot": "a", "publisher": "b", "collector": "c"}})


# ------------------------------------------------------ snapshot, then stream
# Events published right after subscribing race with the snapshot's read: each lands in
# the snapshot or in the stream. They go to new topics that sort after the older ones,
# in sequence order, so that the expected order is the same either way.


async def test_a_late_joiner_gets_the_snapshot_then_the_stream_without_gap(
    bus_on_loop: Bus,
) -> None:
    def scenario() -> None:
        with client(bus_on_loop) as c:
            before = c.publish_many(items("/late/", 50, 7), confirm=True)
            assert before == list(range(1, 51))
            sub = c.subscribe()
            after = c.publish_many(items("/late/z", 30, 30, width=2), confirm=True)
            assert after == list(range(51, 81))
            got = collect(sub, 7 + 30)
            topics = [f"/late/{i % 7}" for i in range(50)] + [f"/late/z{i:02d}" for i in range(30)]
            published = list(zip(range(1, 81), topics, strict=True))
            assert pairs(got) == latest_first(published[:50]) + published[50:]
            assert got[-1].unpack() == {"i": 29} and got[-1].producer == "test"
            assert sub.next(0.3) is None  # and nothing more
            # Once live, later events come in sequence order whatever their topics.
            c.publish_many([("/late/1", 1), ("/late/0", 0)], confirm=True)
            assert pairs(collect(sub, 2)) == [(81, "/late/1"), (82, "/late/0")]
            assert sub.delivered == 39 and sub.resets == 0 and sub.failovers == 0

    await asyncio.to_thread(scenario)


async def test_the_async_client_gets_the_snapshot_then_the_stream(bus_on_loop: Bus) -> None:
    async with aclient(bus_on_loop) as c:
        await c.publish_many(items("/a/", 20, 5), confirm=True)
        sub = await c.subscribe()
        await c.publish_many(items("/a/z", 10, 10), confirm=True)
        got = await acollect(sub, 5 + 10)
        topics = [f"/a/{i % 5}" for i in range(20)] + [f"/a/z{i}" for i in range(10)]
        published = list(zip(range(1, 31), topics, strict=True))
        assert pairs(got) == latest_first(published[:20]) + published[20:]
        assert await sub.next(0.3) is None
        assert sub.delivered == 15 and sub.resets == 0


async def test_async_iteration_gets_live_events(bus_on_loop: Bus) -> None:
    async with aclient(bus_on_loop) as c, await c.subscribe("/x") as sub:
        seq = await c.publish("/x", b"raw", confirm=True)
        async for event in sub:
            assert (event.seq, event.data) == (seq, b"raw")
            break
    assert await sub.next(0) is None  # closed with its client


async def test_the_snapshot_is_paged_through_to_its_end(bus_on_loop: Bus) -> None:
    def scenario() -> None:
        with client(bus_on_loop) as c:
            c.publish_many(items("/p/", 25, 25, width=2), confirm=True)
            sub = c.subscribe(page_limit=4)
            got = collect(sub, 25)
            assert pairs(got) == [(i + 1, f"/p/{i:02d}") for i in range(25)]

    await asyncio.to_thread(scenario)


# ------------------------------------------------------------------- filters
async def test_subtrees_filter_the_snapshot_and_the_stream(bus_on_loop: Bus) -> None:
    def scenario() -> None:
        with client(bus_on_loop) as c:
            c.publish_many([("/a/1", 1), ("/b/1", 2), ("/ab", 3), ("/c/1", 4)], confirm=True)
            sub = c.subscribe(["/a/", "/c/"])
            c.publish_many([("/b/2", 5), ("/c/2", 6), ("/abc", 7), ("/c/3", 8)], confirm=True)
            assert pairs(collect(sub, 4)) == [(1, "/a/1"), (4, "/c/1"), (6, "/c/2"), (8, "/c/3")]
            assert sub.next(0.3) is None
            c.publish_many([("/b/3", 9), ("/a/1", 10)], confirm=True)
            assert pairs(collect(sub, 1)) == [(10, "/a/1")]
            # A plain prefix: "/a" covers "/ab" and "/abc" too.
            one = c.subscribe("/a")
            assert pairs(collect(one, 3)) == [(10, "/a/1"), (3, "/ab"), (7, "/abc")]

    await asyncio.to_thread(scenario)


async def test_since_skips_what_the_subscriber_already_has(bus_on_loop: Bus) -> None:
    async with aclient(bus_on_loop) as c:
        await c.publish_many([(f"/s/{i}", i) for i in range(10)], confirm=True)
        sub = await c.subscribe("/s/", since=6)
        await c.publish("/s/z", "new", confirm=True)
        got = await acollect(sub, 5)
        assert pairs(got) == [(7, "/s/6"), (8, "/s/7"), (9, "/s/8"), (10, "/s/9"), (11, "/s/z")]
        assert await sub.next(0.3) is None


# ------------------------------------------------------------------- publish
async def test_confirmed_publishing_is_sequenced_and_idempotent_by_uuid(bus_on_loop: Bus) -> None:
    def scenario() -> None:
        with client(bus_on_loop) as c:
            first = c.publish("/q", b"x", confirm=True, uuid=UUID)
            second = c.publish("/q", b"y", confirm=True)
            assert first is not None and second is not None and second > first
            assert c.publish("/q", b"x", confirm=True, uuid=UUID) == first  # a retry
            many = c.publish_many(items("/q/", 2500, 3), confirm=True)  # three ZB-PUBs
            assert many == list(range(second + 1, second + 2501))
            sub = c.subscribe("/q")
            assert pairs(collect(sub, 4)) == [
                (2, "/q"),
                (2502, "/q/0"),
                (2500, "/q/1"),
                (2501, "/q/2"),
            ]
            assert c.publish("/q", None) is None  # fire and forget: it comes all the same
            assert collect(sub, 1)[0].unpack() is None

    await asyncio.to_thread(scenario)


async def test_the_async_client_confirms_and_retries_by_uuid(bus_on_loop: Bus) -> None:
    async with aclient(bus_on_loop) as c:
        seqs = await c.publish_many([("/r", 1, UUID), ("/r", 2)], confirm=True)
        assert seqs == [1, 2]
        assert await c.publish("/r", 1, confirm=True, uuid=UUID) == 1
        assert await c.publish_many([("/r", 3)]) is None


async def test_data_is_sent_as_bytes_or_packed(bus_on_loop: Bus) -> None:
    def scenario() -> None:
        with client(bus_on_loop) as c:
            sub = c.subscribe("/d")
            c.publish_many([("/d/1", b"\x00\xff"), ("/d/2", {"k": [1, 2]})], confirm=True)
            raw, packed = collect(sub, 2)
            assert raw.data == b"\x00\xff"
            assert packed.data == msgpack.packb({"k": [1, 2]}) and packed.unpack() == {"k": [1, 2]}

    await asyncio.to_thread(scenario)


async def test_bad_events_are_refused_before_anything_is_sent(bus_on_loop: Bus) -> None:
    def scenario() -> None:
        with client(bus_on_loop) as c:
            for topic in ("", "\0zb", 5):
                with pytest.raises(ValueError, match="topic"):
                    c.publish(topic, b"x")  # type: ignore[arg-type]
            with pytest.raises(ValueError, match="uuid"):
                c.publish("/t", b"x", uuid="not-a-uuid")

    await asyncio.to_thread(scenario)


async def test_an_unconfirmed_publish_is_retried_on_the_next_endpoints(
    bus_on_loop: Bus, refused_ports: HeldPorts
) -> None:
    dead = BusEndpoints(*(f"tcp://127.0.0.1:{port}" for port in refused_ports.ports))

    def scenario() -> None:
        with EventBusClient([dead, bus_on_loop.endpoints], producer="t") as c:
            assert c.publish("/f", b"1", confirm=True, timeout=0.3 * UNIT, uuid=UUID) == 1
            assert c.publish("/f", b"2", confirm=True) == 2  # it stays on the live bus
        with EventBusClient(dead, producer="t") as c, pytest.raises(TimeoutError):
            c.publish("/f", b"3", confirm=True, timeout=0.2)

    await asyncio.to_thread(scenario)
    async with AsyncEventBusClient([dead, bus_on_loop.endpoints], producer="t") as ac:
        assert await ac.publish("/f", b"1", confirm=True, timeout=0.3 * UNIT, uuid=UUID) == 1


# ------------------------------------------------------------------ failover
async def test_the_subscription_fails_over_to_an_independent_backup(
    bus_on_loop: Bus, bus_b_on_loop: Bus
) -> None:
    resets: list[float] = []

    def before() -> tuple[EventBusClient, Subscription]:
        with client(bus_on_loop) as pa, client(bus_b_on_loop) as pb:
            pa.publish_many(items("/f/a", 5, 5), confirm=True)  # A's sequence: 5
            pb.publish_many(items("/f/b", 2, 2), confirm=True)  # B's sequence: 2
        c = client(bus_on_loop, bus_b_on_loop)
        sub = c.subscribe("/f/", on_reset=lambda: resets.append(time.monotonic()))
        assert [e.topic for e in collect(sub, 5)] == [f"/f/a{i}" for i in range(5)]
        return c, sub

    c, sub = await asyncio.to_thread(before)
    try:
        await bus_on_loop.stop()
        stopped = time.monotonic()
        # A is gone: after BEAT x MISSES of silence the subscription moves to B, finds a
        # history below what it has seen, and starts over with B's snapshot.
        got = await asyncio.to_thread(collect, sub, 2, 3.0)
        assert pairs(got) == [(1, "/f/b0"), (2, "/f/b1")]
        assert len(resets) == 1 and resets[0] - stopped < BEAT * MISSES + 1.0 * UNIT
        assert sub.failovers == 1 and sub.resets == 1 and sub.endpoints == bus_b_on_loop.endpoints

        def after() -> list[Event]:
            with client(bus_b_on_loop) as pb:
                assert pb.publish_many(items("/f/b", 3, 3), confirm=True) == [3, 4, 5]
            return collect(sub, 3)

        assert pairs(await asyncio.to_thread(after)) == [(3, "/f/b0"), (4, "/f/b1"), (5, "/f/b2")]
    finally:
        c.close()


async def test_a_backup_further_ahead_is_told_apart_by_the_last_event(
    bus_on_loop: Bus, bus_b_on_loop: Bus
) -> None:
    async with aclient(bus_on_loop) as pa, aclient(bus_b_on_loop) as pb:
        await pa.publish_many(items("/g/a", 2, 2), confirm=True)
        await pb.publish_many(items("/g/b", 4, 4), confirm=True)  # B is ahead of A
    resets = 0

    def on_reset() -> None:
        nonlocal resets
        resets += 1

    async with aclient(bus_on_loop, bus_b_on_loop) as c:
        sub = await c.subscribe("/g/", on_reset=on_reset)
        assert len(await acollect(sub, 2)) == 2
        await bus_on_loop.stop()
        got = await acollect(sub, 4)
        assert [e.topic for e in got] == [f"/g/b{i}" for i in range(4)]
        assert resets == 1 and sub.failovers == 1 and sub.repaired == 0
        # Publishing moves on to B as well, once A leaves the confirm unanswered.
        assert await c.publish("/g/b9", 9, confirm=True, timeout=0.5) == 5
        assert pairs(await acollect(sub, 1)) == [(5, "/g/b9")]


async def test_the_async_subscription_fails_over_to_a_backup(
    bus_on_loop: Bus, bus_b_on_loop: Bus
) -> None:
    async with aclient(bus_on_loop) as pa:
        await pa.publish_many(items("/h/", 3, 3), confirm=True)
    async with aclient(bus_on_loop, bus_b_on_loop) as c:
        sub = await c.subscribe()
        await acollect(sub, 3)
        await bus_on_loop.stop()
        async with aclient(bus_b_on_loop) as pb:
            await pb.publish("/h/b", b"1", confirm=True)
            assert pairs(await acollect(sub, 1)) == [(1, "/h/b")]
            await pb.publish("/h/b", b"2", confirm=True)
            assert pairs(await acollect(sub, 1)) == [(2, "/h/b")]
        assert sub.failovers == 1 and sub.resets == 1


async def test_a_restarted_bus_with_its_log_is_resumed_without_reset(tmp_path: Path) -> None:
    first = await start_bus(tmp_path / "same")
    ends = first.endpoints
    c = aclient(first)
    try:
        await c.publish_many(items("/k/", 3, 3), confirm=True)
        sub = await c.subscribe()
        await acollect(sub, 3)
        await first.stop()
        # The same log on the same ports: ZeroMQ reconnects, or the subscription fails
        # over to the same endpoints; either way the history is the same, so no reset.
        again = await start_bus(
            tmp_path / "same",
            port=int(ends.snapshot.rsplit(":", 1)[1]),
            publisher_port=int(ends.publisher.rsplit(":", 1)[1]),
            collector_port=int(ends.collector.rsplit(":", 1)[1]),
            stream_port=int(ends.stream.rsplit(":", 1)[1]),
        )
        try:
            assert await c.publish_many(items("/k/", 2, 2), confirm=True) == [4, 5]
            assert pairs(await acollect(sub, 2)) == [(4, "/k/0"), (5, "/k/1")]
            assert sub.resets == 0
        finally:
            await again.stop()
    finally:
        c.close()


# ------------------------------------------------------------- a fake bus
class FakeBus:
    """A snapshot ROUTER and a stream XPUB on 127.0.0.1, driven by the test. The XPUB
    tells when the client's SUB has joined, so that what is sent after that reaches it."""

    def __init__(self) -> None:
        self.ctx = zmq.asyncio.Context()
        self.router = self.ctx.socket(zmq.ROUTER)
        self.stream = self.ctx.socket(zmq.XPUB)
        self.stream.setsockopt(zmq.XPUB_VERBOSE, 1)  # every subscription, not only the first
        self.router.bind("tcp://127.0.0.1:0")
        self.stream.bind("tcp://127.0.0.1:0")
        self.endpoints = BusEndpoints(
            self.router.getsockopt_string(zmq.LAST_ENDPOINT),
            "tcp://127.0.0.1:1",
            "tcp://127.0.0.1:1",
            self.stream.getsockopt_string(zmq.LAST_ENDPOINT),
        )

    async def query(self) -> tuple[bytes, ext.SnapshotQuery]:
        ident, *frames = await asyncio.wait_for(self.router.recv_multipart(), 5 * UNIT)
        return ident, ext.decode_snapshot_request(frames)

    async def answer(self, ident: bytes, page: ext.SnapshotPage) -> None:
        await self.router.send_multipart([ident, *ext.encode(page)])

    async def joined(self) -> None:
        while await asyncio.wait_for(self.stream.recv(), 5 * UNIT) != b"\x01B":
            pass

    def close(self) -> None:
        self.router.close(linger=0)
        self.stream.close(linger=0)
        self.ctx.term()


def batch(first: int, *rows: list[Any]) -> list[bytes]:
    return [b"B", msgpack.packb([first, list(rows)])]


def row(n: int) -> list[Any]:
    return [f"/t/{n}", "p", "2026-01-01T00:00:00Z", f"{UUID[:-12]}{n:012d}", b"%d" % n]


def logged(n: int) -> ext.SequencedEvent:
    return ext.SequencedEvent(n, *row(n))


@SHELLS
async def test_a_gap_in_the_stream_is_repaired_from_the_log(shell: str) -> None:
    fake = FakeBus()
    try:
        async with shell_client(shell, fake.endpoints) as c:
            sub = await on(shell, c.subscribe, "/t/")
            ident, q = await fake.query()
            await fake.joined()
            await fake.answer(ident, ext.SnapshotPage((), None, 0))
            await fake.stream.send_multipart(batch(1, row(1)))
            assert pairs(await shell_collect(shell, sub, 1)) == [(1, "/t/1")]
            await fake.stream.send_multipart(batch(4, row(4)))  # 2 and 3 never came
            waiting = asyncio.ensure_future(shell_collect(shell, sub, 4))
            ident, q = await fake.query()
            assert q == ext.SnapshotQuery(("/t/",), 1, None, "log", 1000)
            await fake.stream.send_multipart(batch(5, row(5)))  # buffered meanwhile
            # The log has everything up to its sequence, 5 by now.
            page = ext.SnapshotPage(tuple(logged(n) for n in (2, 3, 4, 5)), None, 5)
            await fake.answer(ident, page)
            assert pairs(await waiting) == [(2, "/t/2"), (3, "/t/3"), (4, "/t/4"), (5, "/t/5")]
            assert await on(shell, sub.next, 0.1) is None  # the stream's 4 and 5 were dropped
            assert sub.repaired == 4 and sub.duplicates == 2 and sub.last == 5
    finally:
        fake.close()


@SHELLS
async def test_malformed_messages_are_dropped_and_counted(shell: str) -> None:
    fake = FakeBus()
    try:
        async with shell_client(shell, fake.endpoints, heartbeat_interval=0.2) as c:
            sub = await on(shell, c.subscribe)
            ident, q = await fake.query()
            assert q.mode == "latest"
            await fake.joined()
            await fake.router.send_multipart([ident, ext.PAGE, b"\xc1"])  # not msgpack
            # Left unanswered, the query times out: the client reconnects, asks again.
            next_event = asyncio.ensure_future(on(shell, sub.next, 5 * UNIT))
            ident, q = await fake.query()
            await fake.joined()
            await fake.answer(ident, ext.SnapshotPage((), None, 0))
            garbage: list[list[bytes]] = [
                [b"B"],
                [b"B", b"\xc1"],
                [b"B", msgpack.packb([1, [["/t", "p", "ts", UUID, "text, not bytes"]]])],
                [b"B", msgpack.packb([1, [5]])],
                [b"B", msgpack.packb([1, [["/t", "p", "ts", UUID]]])],
                [b"B", msgpack.packb([0, []])],
                [b"B", msgpack.packb({"first": 1})],
                [b"H", b"short"],
                [b"Bogus", b""],  # subscribed to as "B", not a command
            ]
            for frames in garbage:
                await fake.stream.send_multipart(frames)
            await fake.stream.send_multipart(batch(1, row(1)))
            assert await next_event == Event(1, *row(1))
            assert sub.malformed == 1 + len(garbage) and sub.failovers == 1
    finally:
        fake.close()


async def test_closing_is_idempotent_and_ends_iteration(bus_on_loop: Bus) -> None:
    def scenario() -> None:
        c = client(bus_on_loop)
        sub = c.subscribe()
        c.close()
        c.close()
        assert sub.next(0) is None and list(sub) == []
        with pytest.raises(RuntimeError):
            c.subscribe()
        with pytest.raises(RuntimeError):
            c.publish("/t", b"x")

    await asyncio.to_thread(scenario)


def test_an_unconfirmed_publish_moves_on_from_a_bus_that_takes_nothing(
    bus: EventBusService, bus_endpoints: BusEndpoints, refused_ports: HeldPorts
) -> None:
    """The replicas of a group or a backup, the first one dead: log shipping and any
    other fire-and-forget publisher reach the next once the first took nothing."""
    dead = f"tcp://127.0.0.1:{refused_ports.ports[0]}"
    with EventBusClient([dead, bus_endpoints], producer="moving") as client:
        with pytest.raises(TimeoutError, match="took nothing"):
            client.publish("/moving/a", b"lost", timeout=0.2)
        client.publish("/moving/b", b"kept")
        client.close(linger=5.0)
    reader = bus.store.reader()
    try:
        wait_until(lambda: bool(reader.replay(("/moving/",), 0, 10)), 10, what="the event")
        assert [e.topic for e in reader.replay(("/moving/",), 0, 10)] == ["/moving/b"]
    finally:
        reader.close()
