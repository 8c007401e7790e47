"""The event bus server on real sockets, driven by raw spec and extension peers."""

from __future__ import annotations

import asyncio
from pathlib import Path

import msgpack
import zmq
import zmq.asyncio

from tests.support.bus import confirmed_publish, new_event, running_bus, stamp
from tests.support.waiting import UNIT, async_wait_until
from zbus.common.protocols import eventbus as eb
from zbus.common.protocols import eventbus_ext as ext
from zbus.eventbus.server.service import EventBusService

UUID = "3f2b6f3e-8a0b-4c8e-9b6e-3c2f1d0a9b8c"


def _sample(service: EventBusService, name: str, **labels: str) -> float:
    return service.registry.get_sample_value(name, labels or None) or 0.0


async def _spec_snapshot(
    ctx: zmq.asyncio.Context, endpoint: str, start: eb.SyncStart, dialect: eb.Dialect = eb.SPEC
) -> tuple[list[eb.Sync], eb.SyncEnd]:
    dealer = ctx.socket(zmq.DEALER)
    dealer.connect(endpoint)
    try:
        await dealer.send_multipart(eb.encode(start, dialect))
        syncs: list[eb.Sync] = []
        while True:
            frames = await asyncio.wait_for(dealer.recv_multipart(), 10 * UNIT)
            cmd = eb.decode_snapshot_reply(frames, dialect)
            if isinstance(cmd, eb.SyncEnd):
                return syncs, cmd
            syncs.append(cmd)
    finally:
        dealer.close(linger=0)


async def test_spec_client_publishes_snapshots_and_receives_broadcasts(tmp_path: Path) -> None:
    async with running_bus(tmp_path) as bus:
        ctx = zmq.asyncio.Context()
        collector = ctx.socket(zmq.DEALER)
        collector.connect(bus.endpoints["collector"])
        sub = ctx.socket(zmq.SUB)
        try:
            # Two versions of /demo/a and one /other event: the snapshot has the latest of each.
            for topic, value in (("/demo/a", b"1"), ("/demo/a", b"2"), ("/other/x", b"3")):
                pub = eb.Pub(topic, None, "spec-client", stamp(), str(new_event(topic).uuid), value)
                await collector.send_multipart(eb.encode(pub))
            await async_wait_until(
                lambda: asyncio.sleep(0, bus.store.last_sequence() == 3), what="3 events stored"
            )
            syncs, end = await _spec_snapshot(ctx, bus.endpoints["snapshot"], eb.SyncStart((), 0))
            assert [(s.topic, s.sequence, s.data) for s in syncs] == [
                ("/demo/a", 2, b"2"),
                ("/other/x", 3, b"3"),
            ]
            assert end == eb.SyncEnd((), 3)

            subtree, _ = await _spec_snapshot(
                ctx, bus.endpoints["snapshot"], eb.SyncStart(("/other/",), 0)
            )
            assert [s.topic for s in subtree] == ["/other/x"]
            since, end = await _spec_snapshot(
                ctx, bus.endpoints["snapshot"], eb.SyncStart(("/demo/", "/other/"), 2)
            )
            assert [s.sequence for s in since] == [3] and end.subtrees == ("/demo/", "/other/")

            # Live: once the subscription reached the bus, a PUB comes back as BROADCAST.
            # (Subscribed only now: the events above must not come back as broadcasts.)
            sub.subscribe(b"/demo/")
            sub.connect(bus.endpoints["publisher"])
            await async_wait_until(
                lambda: asyncio.sleep(0, b"/demo/" in bus.pipeline.subscriptions.prefixes),
                what="subscription at the bus",
            )
            await collector.send_multipart(
                eb.encode(eb.Pub("/demo/b", None, "spec-client", stamp(), UUID, b"live"))
            )
            await collector.send_multipart(
                eb.encode(eb.Pub("/other/y", None, "spec-client", stamp(), UUID[:-1] + "d", b"x"))
            )
            frames = await asyncio.wait_for(sub.recv_multipart(), 10 * UNIT)
            got = eb.decode_publisher(frames)
            assert got == eb.Broadcast("/demo/b", 4, "spec-client", got.timestamp, UUID, b"live")
        finally:
            for s in (collector, sub):
                s.close(linger=0)
            ctx.term()


async def test_node_dialect_serves_ascii_sequences_and_comma_subtrees(tmp_path: Path) -> None:
    async with running_bus(tmp_path, compat="node") as bus:
        ctx = zmq.asyncio.Context()
        collector = ctx.socket(zmq.DEALER)
        collector.connect(bus.endpoints["collector"])
        sub = ctx.socket(zmq.SUB)
        sub.subscribe(b"")
        sub.connect(bus.endpoints["publisher"])
        try:
            await async_wait_until(
                lambda: asyncio.sleep(0, bus.pipeline.subscriptions.active),
                what="subscription at the bus",
            )
            # Exactly what the Node.js client sends: the text null as the sequence.
            frames = [
                b"/demo/x",
                b"null",
                b"node-1",
                b"2026-11-22T08:35:32.862Z",
                UUID.encode(),
                msgpack.packb({"v": 1}),
            ]
            await collector.send_multipart(frames)
            live = await asyncio.wait_for(sub.recv_multipart(), 10 * UNIT)
            assert live[:2] == [b"/demo/x", b"1"] and live[2:] == frames[2:]
            dealer = ctx.socket(zmq.DEALER)
            dealer.connect(bus.endpoints["snapshot"])
            await dealer.send_multipart([b"SYNCSTART", b"/demo/,/none/", b"0"])
            assert await asyncio.wait_for(dealer.recv_multipart(), 10 * UNIT) == [b"SYNC", *live]
            assert await asyncio.wait_for(dealer.recv_multipart(), 10 * UNIT) == [
                b"SYNCEND",
                b"/demo/,/none/",
                b"1",
            ]
            dealer.close(linger=0)
        finally:
            collector.close(linger=0)
            sub.close(linger=0)
            ctx.term()


async def test_confirms_and_idempotent_publishing(tmp_path: Path) -> None:
    async with running_bus(tmp_path) as bus:
        ctx = zmq.asyncio.Context()
        dealer = ctx.socket(zmq.DEALER)
        dealer.connect(bus.endpoints["collector"])
        try:
            first = [new_event(f"/t/{i}") for i in range(5)]
            confirms = await confirmed_publish(dealer, first)
            assert confirms == [(e.uuid, i + 1) for i, e in enumerate(first)]
            # The same uuids again (a retry) and one new: old sequences, one new one.
            extra = new_event("/t/new")
            again = await confirmed_publish(dealer, [*first[:2], extra, first[0]])
            assert again == [
                (first[0].uuid, 1),
                (first[1].uuid, 2),
                (extra.uuid, 6),
                (first[0].uuid, 1),
            ]
            assert bus.store.last_sequence() == 6
            assert _sample(bus, "zbus_eventbus_events_duplicate_total") == 3
        finally:
            dealer.close(linger=0)
            ctx.term()


async def test_malformed_messages_on_every_socket_change_nothing(tmp_path: Path) -> None:
    async with running_bus(tmp_path) as bus:
        ctx = zmq.asyncio.Context()
        collector = ctx.socket(zmq.DEALER)
        collector.connect(bus.endpoints["collector"])
        snapshot = ctx.socket(zmq.DEALER)
        snapshot.connect(bus.endpoints["snapshot"])
        xsub = ctx.socket(zmq.XSUB)
        xsub.connect(bus.endpoints["publisher"])
        try:
            await confirmed_publish(collector, [new_event("/keep/me", b"precious")])
            # Spec-side garbage: wrong frame count, bad uuid, NUL topic, non-UTF-8 topic.
            for frames in (
                [b"only-one"],
                [b"/t", bytes(8), b"p", stamp().encode(), b"not-a-uuid", b""],
                [b"\xff\xfe", bytes(8), b"p", stamp().encode(), UUID.encode(), b""],
                [],
            ):
                await collector.send_multipart(frames or [b""])
            # Extension garbage is answered with ZB-ERROR naming the problem.
            await collector.send_multipart([ext.PUB_BATCH, b"\x07", b"\x90"])
            reply = ext.decode_collector_reply(
                await asyncio.wait_for(collector.recv_multipart(), 10 * UNIT)
            )
            assert isinstance(reply, ext.Error) and "flags" in reply.reason
            await collector.send_multipart([ext.PUB_BATCH, b"\x01", b"\xc1"])
            reply = ext.decode_collector_reply(
                await asyncio.wait_for(collector.recv_multipart(), 10 * UNIT)
            )
            assert isinstance(reply, ext.Error) and "msgpack" in reply.reason

            await snapshot.send_multipart([b"SYNCSTART", b"/x"])  # 2 frames: rejected
            await snapshot.send_multipart([ext.SNAPSHOT, msgpack.packb({"limit": 0})])
            reply2 = ext.decode_snapshot_reply(
                await asyncio.wait_for(snapshot.recv_multipart(), 10 * UNIT)
            )
            assert isinstance(reply2, ext.Error) and "limit" in reply2.reason
            # Sequences past what SQLite stores (the wire allows 64 unsigned bits).
            top = 2**64 - 1
            for mode in ("log", "latest"):
                await snapshot.send_multipart(
                    ext.encode(ext.SnapshotQuery((), top, None, mode, 10))
                )
                page = ext.decode_snapshot_reply(
                    await asyncio.wait_for(snapshot.recv_multipart(), 10 * UNIT)
                )
                assert isinstance(page, ext.SnapshotPage) and page.events == (), page
            huge, end_huge = await _spec_snapshot(
                ctx, bus.endpoints["snapshot"], eb.SyncStart((), top)
            )
            assert huge == [] and end_huge.sequence == 1
            await xsub.send(b"\x05not a subscription")

            def rejected(sock: str) -> float:
                return sum(
                    _sample(bus, "zbus_eventbus_rejected_total", socket=sock, reason=r)
                    for r in (
                        "frame_count",
                        "bad_value",
                        "unknown_command",
                        "malformed",
                        *(f"bad_{field}" for field in ("topic", "producer", "timestamp", "uuid")),
                    )
                )

            await async_wait_until(
                lambda: asyncio.sleep(
                    0,
                    rejected("collector") >= 6
                    and rejected("snapshot") >= 2
                    and rejected("publisher") >= 1,
                ),
                what="rejections counted",
            )
            # Nothing stored changed, and the bus still works.
            assert bus.store.last_sequence() == 1
            ((_, seq),) = await confirmed_publish(collector, [new_event("/after")])
            assert seq == 2
            syncs, end = await _spec_snapshot(ctx, bus.endpoints["snapshot"], eb.SyncStart((), 0))
            assert [(s.topic, s.data) for s in syncs] == [
                ("/after", b"\x01"),
                ("/keep/me", b"precious"),
            ]
            assert end.sequence == 2
        finally:
            for s in (collector, snapshot, xsub):
                s.close(linger=0)
            ctx.term()


async def test_a_subscriber_that_never_reads_does_not_stall_the_bus(tmp_path: Path) -> None:
    # Bounds of a few messages per door (events of up to 16 kB, stream messages 256 kB).
    async with running_bus(
        tmp_path,
        max_event_bytes=16 * 1024,
        publisher_peer_bytes=1024 * 1024,
        stream_peer_bytes=6 * 256 * 1024,
    ) as bus:
        bounds = bus.settings.bounds()
        assert (bounds.publisher.hwm, bounds.stream.hwm) == (54, 5)
        ctx = zmq.asyncio.Context()
        lazy = ctx.socket(zmq.SUB)
        lazy.rcvhwm = 10
        lazy.subscribe(b"")
        lazy.connect(bus.endpoints["publisher"])
        lazy_stream = ctx.socket(zmq.SUB)
        lazy_stream.rcvhwm = 2
        lazy_stream.subscribe(b"")
        lazy_stream.connect(bus.endpoints["stream"])
        dealer = ctx.socket(zmq.DEALER)
        dealer.connect(bus.endpoints["collector"])
        try:
            await async_wait_until(
                lambda: asyncio.sleep(0, bus.pipeline.subscriptions.active),
                what="lazy subscription at the bus",
            )
            payload = bytes(10_000)
            last = 0
            for _ in range(40):
                confirms = await confirmed_publish(
                    dealer, [new_event("/bulk", payload) for _ in range(50)]
                )
                last = confirms[-1][1]
            assert last == 2000
            assert _sample(bus, "zbus_eventbus_events_broadcast_total", socket="publisher") == 2000
            # What the bus dropped for the two that read nothing is counted.
            for sock in ("publisher", "stream"):
                assert _sample(bus, "zbus_eventbus_overflows_total", socket=sock) >= 1, sock
        finally:
            for s in (lazy, lazy_stream, dealer):
                s.close(linger=0)
            ctx.term()
