"""A spec or Node.js subscriber resuming with SYNCSTART N > 0 gets every event above N.

The RFC: the snapshot "will return all events with sequence number above" N; the Node.js
bus replays every one from its log. zbus reads them from its log in sequence order, in
turns, so a huge replay to one client does not hold up the others (ADR 0002).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import zmq
import zmq.asyncio

from tests.support.bus import confirmed_publish, new_event, running_bus
from tests.support.waiting import UNIT
from zbus.common.protocols import eventbus as eb
from zbus.common.protocols import eventbus_ext as ext
from zbus.eventbus.server.service import EventBusService

# (topic, data) in publishing order: sequence i + 1.
HISTORY = [
    ("/demo/a", b"a1"),
    ("/demo/a", b"a2"),
    ("/other/x", b"x1"),
    ("/demo/a", b"a3"),
    ("/demo/b", b"b1"),
    ("/demo/a", b"a4"),
    ("/zzz/q", b"q1"),
    ("/other/x", b"x2"),
]


async def _publish_history(bus: EventBusService, ctx: zmq.asyncio.Context) -> None:
    dealer = ctx.socket(zmq.DEALER)
    dealer.connect(bus.endpoints["collector"])
    try:
        confirms = await confirmed_publish(dealer, [new_event(t, d) for t, d in HISTORY])
        assert [seq for _, seq in confirms] == list(range(1, len(HISTORY) + 1))
    finally:
        dealer.close(linger=0)


async def _raw_snapshot(
    ctx: zmq.asyncio.Context, endpoint: str, frames: list[bytes]
) -> list[list[bytes]]:
    """Send raw SYNCSTART frames; every reply up to and including SYNCEND, raw."""
    dealer = ctx.socket(zmq.DEALER)
    dealer.setsockopt(zmq.IDENTITY, b"node-subscriber-1")  # printable, as the Node peer
    dealer.connect(endpoint)
    replies: list[list[bytes]] = []
    try:
        await dealer.send_multipart(frames)
        while not replies or replies[-1][0] != b"SYNCEND":
            replies.append(await asyncio.wait_for(dealer.recv_multipart(), 10 * UNIT))
    finally:
        dealer.close(linger=0)
    return replies


def _expected(after: int, prefixes: tuple[str, ...]) -> list[tuple[int, str, bytes]]:
    return [
        (seq, topic, data)
        for seq, (topic, data) in enumerate(HISTORY, 1)
        if seq > after and topic.startswith(prefixes)
    ]


async def test_node_subscriber_resuming_gets_every_event_above_its_sequence(
    tmp_path: Path,
) -> None:
    async with running_bus(tmp_path, compat="node") as bus:
        ctx = zmq.asyncio.Context()
        try:
            await _publish_history(bus, ctx)
            # Exactly what the Node.js subscriber sends: 3 frames, ',' subtrees, ASCII sequence.
            replies = await _raw_snapshot(
                ctx, bus.endpoints["snapshot"], [b"SYNCSTART", b"/demo/,/other/", b"1"]
            )
            syncs = [eb.decode_snapshot_reply(r, eb.NODE_REFERENCE) for r in replies]
            got = [(s.sequence, s.topic, s.data) for s in syncs if isinstance(s, eb.Sync)]
            # /demo/a changed three times since 1: all three, in sequence order.
            assert got == _expected(1, ("/demo/", "/other/"))
            assert replies[-1] == [b"SYNCEND", b"/demo/,/other/", b"8"]
            for frames in replies[:-1]:
                assert frames[0] == b"SYNC" and frames[2].isdigit()  # ASCII sequences

            # Resuming from the end: nothing; from 0: the state (latest of each topic).
            replies = await _raw_snapshot(
                ctx, bus.endpoints["snapshot"], [b"SYNCSTART", b"/demo/", b"8"]
            )
            assert replies == [[b"SYNCEND", b"/demo/", b"8"]]
            replies = await _raw_snapshot(
                ctx, bus.endpoints["snapshot"], [b"SYNCSTART", b"/demo/", b"0"]
            )
            assert [(r[1], r[2]) for r in replies[:-1]] == [(b"/demo/a", b"6"), (b"/demo/b", b"5")]
        finally:
            ctx.term()


async def test_spec_subscriber_resuming_gets_every_event_above_its_sequence(
    tmp_path: Path,
) -> None:
    async with running_bus(tmp_path) as bus:
        ctx = zmq.asyncio.Context()
        try:
            await _publish_history(bus, ctx)
            for after, subtrees in ((2, ("/demo/",)), (0 + 3, ()), (5, ("/demo/", "/zzz/"))):
                replies = await _raw_snapshot(
                    ctx, bus.endpoints["snapshot"], eb.encode(eb.SyncStart(subtrees, after))
                )
                cmds = [eb.decode_snapshot_reply(r) for r in replies]
                got = [(s.sequence, s.topic, s.data) for s in cmds if isinstance(s, eb.Sync)]
                assert got == _expected(after, subtrees or ("",)), (after, subtrees)
                assert cmds[-1] == eb.SyncEnd(subtrees, len(HISTORY))
        finally:
            ctx.term()


async def test_a_huge_replay_to_a_client_that_does_not_read_holds_up_no_other(
    tmp_path: Path,
) -> None:
    # Enough 1 kB events that a client which reads nothing cannot take them all into its
    # own queue and the kernel's buffers: the bus must set its replay aside for others.
    # One topic each, so that the replay is as long as the state would be.
    async with running_bus(tmp_path) as bus:
        ctx = zmq.asyncio.Context()
        dealer = ctx.socket(zmq.DEALER)
        dealer.connect(bus.endpoints["collector"])
        stalled = ctx.socket(zmq.DEALER)
        stalled.rcvhwm = 1
        stalled.connect(bus.endpoints["snapshot"])
        try:
            payload = bytes(1000)
            for batch in range(30):
                events = [new_event(f"/bulk/{batch:02d}{i:03d}", payload) for i in range(1000)]
                await confirmed_publish(dealer, events)
            await confirmed_publish(dealer, [new_event("/small/one", b"s")])
            await stalled.send_multipart(eb.encode(eb.SyncStart(("/bulk/",), 1)))
            # Another spec client and a zbus page query are both answered meanwhile.
            replies = await _raw_snapshot(
                ctx, bus.endpoints["snapshot"], eb.encode(eb.SyncStart(("/small/",), 0))
            )
            assert [r[1] for r in replies] == [b"/small/one", b"/small/"]
            query = ctx.socket(zmq.DEALER)
            query.connect(bus.endpoints["snapshot"])
            try:
                await query.send_multipart(
                    ext.encode(ext.SnapshotQuery(("/small/",), 0, None, "latest", 10))
                )
                page = ext.decode_snapshot_reply(
                    await asyncio.wait_for(query.recv_multipart(), 10 * UNIT)
                )
                assert isinstance(page, ext.SnapshotPage)
                assert [e.topic for e in page.events] == ["/small/one"]
            finally:
                query.close(linger=0)
            # The stalled client, reading at last, gets its whole replay, in order.
            seqs = []
            while True:
                frames = await asyncio.wait_for(stalled.recv_multipart(), 10 * UNIT)
                cmd = eb.decode_snapshot_reply(frames)
                if isinstance(cmd, eb.SyncEnd):
                    break
                seqs.append(cmd.sequence)
            assert seqs == list(range(2, 30_001))
            assert cmd.sequence == 30_001
        finally:
            for s in (dealer, stalled):
                s.close(linger=0)
            ctx.term()


async def test_a_new_syncstart_replaces_the_clients_snapshot_under_way(tmp_path: Path) -> None:
    async with running_bus(tmp_path) as bus:
        ctx = zmq.asyncio.Context()
        dealer = ctx.socket(zmq.DEALER)
        dealer.connect(bus.endpoints["collector"])
        client = ctx.socket(zmq.DEALER)
        client.rcvhwm = 1
        client.connect(bus.endpoints["snapshot"])
        try:
            for batch in range(20):
                events = [new_event(f"/bulk/{batch:02d}{i:03d}", bytes(1000)) for i in range(1000)]
                await confirmed_publish(dealer, events)
            await confirmed_publish(dealer, [new_event("/small/one", b"s")])
            await client.send_multipart(eb.encode(eb.SyncStart(("/bulk/",), 0)))
            await client.send_multipart(eb.encode(eb.SyncStart(("/small/",), 0)))
            # What the first one had queued already may come first; then the second
            # one's answer, whole, and never the first one's end.
            topics = []
            while True:
                frames = await asyncio.wait_for(client.recv_multipart(), 10 * UNIT)
                cmd = eb.decode_snapshot_reply(frames)
                if isinstance(cmd, eb.SyncEnd):
                    break
                topics.append(cmd.topic)
            assert cmd == eb.SyncEnd(("/small/",), 20_001)
            assert topics[-1] == "/small/one" and len(topics) < 20_001
            assert not await client.poll(500)  # nothing more: the first one was dropped
        finally:
            for s in (dealer, client):
                s.close(linger=0)
            ctx.term()
