"""A door's link to the log, over real inproc sockets: what it sends the collector, how
it reads the answers and the stream, and what it refuses at once."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgpack
import pytest
import zmq

from zbus.common.clock import ManualClock
from zbus.common.protocols import eventbus_ext as ext
from zbus.eventbus.core.link import Outgoing
from zbus.eventbus.core.log import EventLogReader
from zbus.eventbus.doors.link import COLLECTOR_FULL, IN_FLIGHT, LogLink
from zbus.eventbus.doors.wiring import DoorWiring
from zbus.eventbus.server.config import EventBusSettings

COLLECTOR = "inproc://link-collector"
STREAM = "inproc://link-stream"


class Pipeline:
    """The pipeline's side: a ROUTER as the collector, a PUB as the stream."""

    def __init__(self, ctx: zmq.Context[Any]) -> None:
        self.collector = ctx.socket(zmq.ROUTER)
        self.collector.bind(COLLECTOR)
        self.stream = ctx.socket(zmq.PUB)
        self.stream.bind(STREAM)

    def batch(self) -> tuple[bytes, list[list[Any]]]:
        assert self.collector.poll(5000)
        peer, command, confirm, payload = self.collector.recv_multipart()
        assert (command, confirm) == (ext.PUB_BATCH, b"\x01")
        return peer, msgpack.unpackb(payload, raw=False)

    def answer(self, peer: bytes, reply: ext.Confirm | ext.Error) -> None:
        self.collector.send_multipart([peer, *ext.encode(reply)])

    def close(self) -> None:
        self.collector.close(linger=0)
        self.stream.close(linger=0)


@pytest.fixture
def ctx() -> Iterator[zmq.Context[Any]]:
    context: zmq.Context[Any] = zmq.Context()
    yield context
    context.term()


@pytest.fixture
def pipeline(ctx: zmq.Context[Any]) -> Iterator[Pipeline]:
    p = Pipeline(ctx)
    yield p
    p.close()


def no_reader() -> EventLogReader:
    raise AssertionError("the link reads no log")


def make_link(
    ctx: zmq.Context[Any],
    clock: ManualClock,
    *,
    max_batches: int = 10,
    heartbeats: bool = False,
    **settings: Any,
) -> LogLink[Outgoing]:
    wiring = DoorWiring(
        ctx=ctx,
        settings=EventBusSettings.load([], **settings),
        clock=clock,
        collector=COLLECTOR,
        stream=STREAM,
        secure=lambda sock: None,
        log_path=Path("events.db"),  # the link reads no file
        hold=lambda through: None,
        open_reader=no_reader,
    )
    link: LogLink[Outgoing] = LogLink(
        wiring, name="test", max_batches=max_batches, timeout=5.0, heartbeats=heartbeats
    )
    link.open()
    return link


def events(n: int, size: int = 10) -> list[Outgoing]:
    return [Outgoing(f"/t/{i}", "door:x", bytes([i]) * size) for i in range(n)]


def answers_within(link: LogLink[Outgoing]) -> list[tuple[list[Outgoing], str | None]]:
    assert link.collector.poll(5000)
    return [(list(items), why) for items, why in link.answers()]


def test_events_go_out_stamped_and_with_uuids_and_come_back_confirmed(
    ctx: zmq.Context[Any], pipeline: Pipeline
) -> None:
    clock = ManualClock(1_700_000_000.25)
    link = make_link(ctx, clock)
    try:
        sent = events(3)
        assert link.publish(sent, clock.monotonic()) == []
        peer, rows = pipeline.batch()
        assert [[r[0], r[1], r[4]] for r in rows] == [[e.topic, e.producer, e.data] for e in sent]
        assert {r[2] for r in rows} == {"2023-11-14T22:13:20.250Z"}
        assert len({r[3] for r in rows}) == 3
        assert link.next_deadline() == 5.0
        pipeline.answer(peer, ext.Confirm(tuple((r[3], i + 1) for i, r in enumerate(rows))))
        assert answers_within(link) == [(sent, None)]
        assert link.stored == 3 and link.next_deadline() is None
    finally:
        link.close()


def test_a_refusal_answers_the_oldest_batch_and_the_timeout_the_rest(
    ctx: zmq.Context[Any], pipeline: Pipeline
) -> None:
    clock = ManualClock()
    link = make_link(ctx, clock, max_batch_events=2)
    try:
        sent = events(3)
        assert link.publish(sent, clock.monotonic()) == []  # two batches: 2 and 1
        peer, _ = pipeline.batch()
        pipeline.batch()
        pipeline.answer(peer, ext.Error("disk full"))
        assert answers_within(link) == [(sent[:2], "disk full")]
        assert link.expired(4.9) == []
        assert link.expired(5.0) == sent[2:]
        assert link.stored == 0
    finally:
        link.close()


def test_past_the_batches_in_flight_a_batch_is_refused_at_once(
    ctx: zmq.Context[Any], pipeline: Pipeline
) -> None:
    clock = ManualClock()
    link = make_link(ctx, clock, max_batches=1)
    try:
        first, second = events(1), events(1)
        assert link.publish(first, 0.0) == []
        assert link.publish(second, 0.0) == [(second, IN_FLIGHT)]
    finally:
        link.close()


def test_a_full_collector_queue_refuses_at_once(ctx: zmq.Context[Any]) -> None:
    collector = ctx.socket(zmq.ROUTER)  # a collector that reads nothing
    collector.rcvhwm = 1
    collector.bind(COLLECTOR)
    clock = ManualClock()
    link = make_link(ctx, clock, max_batches=1)
    try:
        answers = []
        for attempt in range(10):  # each batch given up, so never too many in flight
            answers.append(link.publish(events(1), float(attempt)))
            link.expired(float(attempt) + 5.0)
        assert answers[0] == []
        assert [why for got in answers for _, why in got][:1] == [COLLECTOR_FULL]
        assert link.next_deadline() is None
    finally:
        link.close()
        collector.close(linger=0)


def test_stream_batches_are_decoded_with_the_events_missed_before_each(
    ctx: zmq.Context[Any], pipeline: Pipeline
) -> None:
    clock = ManualClock()
    link = make_link(ctx, clock)
    try:

        def publish(first: int, n: int) -> None:
            rows = [ext.EventData(f"/t/{first + i}", "p", "ts", "u", b"d") for i in range(n)]
            pipeline.stream.send_multipart(ext.encode(ext.StreamBatch(first, tuple(rows))))

        for _ in range(100):  # the inproc subscription takes effect at once, or nearly
            pipeline.stream.send_multipart(ext.encode(ext.StreamHeartbeat(0)))
            if link.stream.poll(10):
                break
        list(link.batches(10, lambda: True))  # heartbeats: nothing
        publish(1, 2)
        publish(3, 1)
        publish(7, 2)  # 4, 5 and 6 missed
        assert link.stream.poll(5000)
        got = [
            (first, [r[0] for r in rows], missed)
            for first, rows, missed in link.batches(10, lambda: True)
        ]
        assert got == [(1, ["/t/1", "/t/2"], 0), (3, ["/t/3"], 0), (7, ["/t/7", "/t/8"], 3)]
        # Not wanted: taken, not decoded; the next wanted batch starts over.
        publish(20, 1)
        assert link.stream.poll(5000)
        assert list(link.batches(10, lambda: False)) == []
        publish(30, 1)
        assert link.stream.poll(5000)
        assert [m for _, _, m in link.batches(10, lambda: True)] == [0]
    finally:
        link.close()


def test_with_heartbeats_each_comes_as_an_empty_batch_after_the_logs_last(
    ctx: zmq.Context[Any], pipeline: Pipeline
) -> None:
    link = make_link(ctx, ManualClock(), heartbeats=True)
    try:
        for _ in range(100):  # the inproc subscription takes effect at once, or nearly
            pipeline.stream.send_multipart(ext.encode(ext.StreamHeartbeat(0)))
            if link.stream.poll(10):
                break
        got = list(link.batches(100, lambda: True))
        assert got and all(one == (1, [], 0) for one in got)
        rows = (ext.EventData("/t/1", "p", "ts", "u", b"d"),)
        pipeline.stream.send_multipart(ext.encode(ext.StreamBatch(1, rows)))
        pipeline.stream.send_multipart(ext.encode(ext.StreamHeartbeat(1)))
        pipeline.stream.send_multipart(ext.encode(ext.StreamHeartbeat(4)))  # 2..4 missed
        assert link.stream.poll(5000)
        seen = [(f, len(r), m) for f, r, m in link.batches(10, lambda: True)]
        assert seen == [(1, 1, 0), (2, 0, 0), (5, 0, 3)]
    finally:
        link.close()
