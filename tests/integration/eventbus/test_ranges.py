"""Every field and number the bus takes from the wire has a range; outside it, a clear
refusal that is counted and stores nothing (docs/eventbus.md, "Ranges")."""

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
MAX_EVENT = 4096  # the bus's ZBUS_MAX_EVENT_BYTES in these tests


def _rejected(bus: EventBusService, socket: str) -> float:
    total = 0.0
    for metric in bus.registry.collect():
        if metric.name != "zbus_eventbus_rejected":
            continue
        for sample in metric.samples:
            if sample.name.endswith("_total") and sample.labels["socket"] == socket:
                total += sample.value
    return total


def _reasons(bus: EventBusService, socket: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for metric in bus.registry.collect():
        if metric.name == "zbus_eventbus_rejected":
            for sample in metric.samples:
                if sample.name.endswith("_total") and sample.labels["socket"] == socket:
                    out[sample.labels["reason"]] = sample.value
    return out


# One bad field each, everything else valid: (field, topic, producer, timestamp, uuid, data).
BAD_EVENTS = [
    ("topic", "", "p", None, UUID, b"x"),
    ("topic", "/t/" + "a" * 1022, "p", None, UUID, b"x"),  # 1025 bytes
    ("topic", "/t/" + "é" * 511, "p", None, UUID, b"x"),  # 1025 bytes as UTF-8
    ("producer", "/t", "p" * 257, None, UUID, b"x"),
    ("timestamp", "/t", "p", "2026-11-22T08:35:32.862" + "0" * 42 + "Z", UUID, b"x"),
    ("timestamp", "/t", "p", "0001-01-01T00:30:00+01:00", UUID, b"x"),  # before year 1 in UTC
    ("uuid", "/t", "p", None, UUID[:-1] + "g", b"x"),
    ("data", "/t", "p", None, UUID, bytes(MAX_EVENT + 1)),
]


async def test_the_collector_refuses_every_field_out_of_range_and_stores_none(
    tmp_path: Path,
) -> None:
    async with running_bus(tmp_path, max_event_bytes=MAX_EVENT) as bus:
        ctx = zmq.asyncio.Context()
        dealer = ctx.socket(zmq.DEALER)
        dealer.connect(bus.endpoints["collector"])
        try:
            for field, topic, producer, ts, uuid, data in BAD_EVENTS:
                when = ts or stamp()
                # A spec PUB: dropped (the spec has no error reply), counted.
                before = _rejected(bus, "collector")
                pub = [topic.encode(), bytes(8), producer.encode(), when.encode(), uuid.encode()]
                await dealer.send_multipart([*pub, data])
                await async_wait_until(
                    lambda b=before: asyncio.sleep(0, _rejected(bus, "collector") > b),
                    what=f"PUB with a bad {field} counted",
                )
                # The same event in a ZB-PUB: a ZB-ERROR naming the field.
                event = ext.EventData(topic, producer, when, uuid, data)
                await dealer.send_multipart(ext.encode(ext.PubBatch((event,), confirm=True)))
                reply = ext.decode_collector_reply(
                    await asyncio.wait_for(dealer.recv_multipart(), 10 * UNIT)
                )
                assert isinstance(reply, ext.Error), (field, reply)
                assert field in reply.reason, (field, reply.reason)
            reasons = _reasons(bus, "collector")
            for field in {f for f, *_ in BAD_EVENTS}:
                assert reasons.get(f"bad_{field}", 0) >= 2, (field, reasons)
            assert bus.store.last_sequence() == 0  # nothing stored
            # Each field at the top of its range is taken.
            top = ext.EventData(
                "/t/" + "é" * 510 + "a",  # 1024 bytes
                "p" * 256,
                "2026-11-22T08:35:32.862123+05:30",
                UUID,
                bytes(MAX_EVENT),
            )
            assert await confirmed_publish(dealer, [top]) == [(UUID, 1)]
        finally:
            dealer.close(linger=0)
            ctx.term()


async def test_snapshot_numbers_and_counts_out_of_range_get_a_clear_error(
    tmp_path: Path,
) -> None:
    async with running_bus(tmp_path) as bus:
        ctx = zmq.asyncio.Context()
        dealer = ctx.socket(zmq.DEALER)
        dealer.connect(bus.endpoints["collector"])
        snapshot = ctx.socket(zmq.DEALER)
        snapshot.connect(bus.endpoints["snapshot"])
        try:
            await confirmed_publish(dealer, [new_event("/keep/me")])
            many = [f"/s/{i:04d}/" for i in range(2000)]
            bad_queries = [
                ("after", {"mode": "log", "after": "\u00b2"}),  # a digit to str.isdigit, not int
                ("after", {"mode": "log", "after": "9" * 5000}),
                ("after", {"mode": "log", "after": "-1"}),
                ("after", {"mode": "log", "after": str(2**64)}),
                ("subtrees", {"mode": "log", "subtrees": many}),
                ("subtrees", {"mode": "latest", "subtrees": many}),
                ("subtrees", {"subtrees": ["/" + "a" * 1024]}),
                ("limit", {"limit": 10_001}),
                ("since", {"since": -1}),
            ]
            for field, query in bad_queries:
                before = _reasons(bus, "snapshot").get("bad_value", 0)
                await snapshot.send_multipart([ext.SNAPSHOT, msgpack.packb(query)])
                reply = ext.decode_snapshot_reply(
                    await asyncio.wait_for(snapshot.recv_multipart(), 10 * UNIT)
                )
                assert isinstance(reply, ext.Error), (field, reply)
                assert field in reply.reason and "internal" not in reply.reason, reply.reason
                assert _reasons(bus, "snapshot").get("bad_value", 0) == before + 1, field
            # A spec SYNCSTART with too many subtrees: dropped (no error reply), counted.
            before = _rejected(bus, "snapshot")
            await snapshot.send_multipart(
                [b"SYNCSTART", ";".join(many).encode(), (1).to_bytes(8, "big")]
            )
            await async_wait_until(
                lambda: asyncio.sleep(0, _rejected(bus, "snapshot") > before),
                what="SYNCSTART with 2000 subtrees counted",
            )
            assert "internal" not in _reasons(bus, "snapshot")
            # The bus still answers, and a query at the top of every range works.
            top = ext.SnapshotQuery(tuple(many[:256]), 2**64 - 1, str(2**64 - 1), "log", 10_000)
            await snapshot.send_multipart(ext.encode(top))
            page = ext.decode_snapshot_reply(
                await asyncio.wait_for(snapshot.recv_multipart(), 10 * UNIT)
            )
            assert isinstance(page, ext.SnapshotPage) and page.events == () and page.sequence == 1
            await snapshot.send_multipart(eb.encode(eb.SyncStart(("/keep/",), 0)))
            frames = await asyncio.wait_for(snapshot.recv_multipart(), 10 * UNIT)
            assert eb.decode_snapshot_reply(frames).topic == "/keep/me"  # type: ignore[union-attr]
        finally:
            dealer.close(linger=0)
            snapshot.close(linger=0)
            ctx.term()
