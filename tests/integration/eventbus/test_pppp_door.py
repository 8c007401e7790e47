"""The PPPP door on a real bus: raw DEALER subscribers, events from every door, NACKs,
the first-idle rule, heartbeats, grace and SYNC, CUSTOM, garbage, the admin API."""

from __future__ import annotations

import json
import random
import urllib.request
from pathlib import Path
from typing import Any

import msgpack
import zmq

import zbus
from tests.support.bus import bus_thread
from tests.support.pppp import RawSubscriber, metrics
from tests.support.waiting import UNIT, wait_until
from zbus.common.protocols import pppp
from zbus.common.protocols.pppp_event import EventPayload, SyncEnd
from zbus.eventbus.client import BusEndpoints, EventBusClient
from zbus.eventbus.server.service import EventBusService


def door(bus: EventBusService) -> str:
    return bus.endpoints["pppp"]


def subscriber(ctx: zmq.Context[Any], bus: EventBusService, name: bytes) -> RawSubscriber:
    return RawSubscriber(ctx, door(bus), name)


def test_events_from_every_door_reach_the_pppp_subscribers_of_their_channel(
    ctx: zmq.Context[Any], bus: EventBusService
) -> None:
    sub = subscriber(ctx, bus, b"watcher")
    other = subscriber(ctx, bus, b"everything")
    try:
        assert sub.sync("/plant/") == ([], SyncEnd(0, 0))
        other.sync("")
        with (
            EventBusClient(BusEndpoints.from_info(bus.info()), producer="sensor") as client,
            zbus.Mc0Client(bus.endpoints["mc0"], ttl=30) as node,
        ):
            client.publish("/plant/t1", {"c": 21}, confirm=True)
            client.publish("/office/t1", {"c": 19}, confirm=True)  # not the channel's
            node.put("/plant/valve", b"open")
        got = sub.messages(2, "/plant/")
        assert [(s, e.topic, e.producer) for s, e in got] == [
            (1, "/plant/t1", "sensor"),
            (2, "/plant/valve", got[1][1].producer),
        ]
        assert msgpack.unpackb(got[0][1].data) == {"c": 21} and got[1][1].data == b"open"
        assert got[1][1].producer.startswith("mc0:")
        assert [e.bus_sequence for _, e in got] == [1, 3]
        everything = other.messages(3, "")
        assert [(s, e.topic) for s, e in everything] == [
            (1, "/plant/t1"),
            (2, "/office/t1"),
            (3, "/plant/valve"),
        ]
    finally:
        sub.close()
        other.close()


def test_a_nack_gets_the_named_messages_again_and_a_new_subscriber_gets_the_state(
    ctx: zmq.Context[Any], bus: EventBusService
) -> None:
    sub = subscriber(ctx, bus, b"nacker")
    try:
        sub.sync("/n/")
        with EventBusClient(BusEndpoints.from_info(bus.info()), producer="p") as client:
            client.publish_many([(f"/n/{i}", i) for i in range(1, 6)], confirm=True)
        first = sub.messages(5, "/n/", ack=False)
        sub.send(pppp.AckNack("/n/", 5, ((2, 3),)))
        again = sub.messages(2, "/n/", ack=False)
        assert again == first[1:3]
        sub.send(pppp.AckNack("/n/", 5))
        late = subscriber(ctx, bus, b"late")
        items, end = late.sync("/n/")
        assert end == SyncEnd(5, 5) and [e.topic for e in items] == [f"/n/{i}" for i in range(1, 6)]
        late.close()
        wait_until(lambda: metrics(bus.admin_url or "")["zbus_pppp_nacks_total"] == 2, what="NACKs")
    finally:
        sub.close()


def test_the_first_idle_rule_and_heartbeats(ctx: zmq.Context[Any], tmp_path: Path) -> None:
    with bus_thread(tmp_path, pppp_port=0, pppp_first_idle=0.05, pppp_idle=0.2) as bus:
        sub = subscriber(ctx, bus, b"forgetful")
        try:
            sub.sync("/f/")
            # The first HEARTBEAT after the first idle time of the door's silence.
            assert isinstance(sub.recv(), pppp.Heartbeat)
            with EventBusClient(BusEndpoints.from_info(bus.info()), producer="p") as client:
                client.publish_many([("/f/a", 1), ("/f/b", 2)], confirm=True)
            assert [s for s, _ in sub.messages(2, "/f/", ack=False)] == [1, 2]
            # No ACK: after misses x first idle the last message comes again, and only it.
            cmd, got = sub.publish()
            assert cmd.sequence == 2 and isinstance(got, EventPayload) and got.topic == "/f/b"
            sub.send(pppp.AckNack("/f/", 2, ((1, 1),)))
            cmd, got = sub.publish()
            assert cmd.sequence == 1
            sub.send(pppp.AckNack("/f/", 2))
            values = metrics(bus.admin_url or "")
            assert values["zbus_pppp_first_idle_resends_total"] >= 1
            assert values["zbus_pppp_sent_total{kind=heartbeat}"] >= 1
        finally:
            sub.close()


def test_after_the_grace_period_a_returning_subscriber_gets_a_sync(
    ctx: zmq.Context[Any], tmp_path: Path
) -> None:
    settings = {"pppp_first_idle": 0.02, "pppp_idle": 0.05, "pppp_misses": 2, "pppp_grace": 0.2}
    with bus_thread(tmp_path, pppp_port=0, **settings) as bus:
        sub = subscriber(ctx, bus, b"sleeper")
        try:
            sub.sync("/g/")
            with EventBusClient(BusEndpoints.from_info(bus.info()), producer="p") as client:
                client.publish_many([("/g/a", 1), ("/g/b", 2), ("/g/a", 3)], confirm=True)
                sub.messages(3, "/g/")
                # Silent: disconnected after misses x idle, dropped after the grace period.
                wait_until(
                    lambda: metrics(bus.admin_url or "")["zbus_pppp_grace_expiries_total"] == 1,
                    what="grace expiry",
                )
                client.publish("/g/c", 4, confirm=True)
            values = metrics(bus.admin_url or "")
            assert values["zbus_pppp_disconnects_total"] == 1
            assert values["zbus_pppp_subscribers{state=live}"] == 0
            items, end = sub.sync("/g/")  # the state: each topic's latest, at a new head
            assert sorted((e.topic, msgpack.unpackb(e.data)) for e in items) == [
                ("/g/a", 3),
                ("/g/b", 2),
                ("/g/c", 4),
            ]
            assert end.items == 3
        finally:
            sub.close()


def test_custom_is_published_as_an_event(ctx: zmq.Context[Any], bus: EventBusService) -> None:
    watcher = subscriber(ctx, bus, b"watcher")
    sender = subscriber(ctx, bus, b"sender")
    try:
        watcher.sync("/zbus/pppp/custom/")
        sender.sync("/x/")
        sender.send(pppp.Custom((b"hello", b"\x00\x01")))
        [(seq, event)] = watcher.messages(1, "/zbus/pppp/custom/")
        assert (seq, event.topic, event.producer) == (1, "/zbus/pppp/custom/sender", "pppp:sender")
        assert msgpack.unpackb(event.data) == [b"hello", b"\x00\x01"]
    finally:
        watcher.close()
        sender.close()


def test_garbage_is_dropped_and_counted_and_the_door_keeps_serving(
    ctx: zmq.Context[Any], bus: EventBusService
) -> None:
    rng = random.Random(6)
    fuzzer = subscriber(ctx, bus, b"fuzzer")
    try:
        fuzzer.sync("/z/")
        sent = 0
        for _ in range(300):
            frames = [rng.randbytes(rng.randrange(0, 40)) for _ in range(rng.randrange(1, 5))]
            if rng.random() < 0.5:  # a command byte first: deeper into the decoder
                frames[0] = bytes([rng.randrange(1, 6)]) + frames[0]
            fuzzer.send(frames)
            sent += 1
        fuzzer.send(pppp.AckNack("/z/", 99))  # above what was sent
        fuzzer.send([b"\x01" + b"c" * 2000])  # a channel too long

        def counted() -> bool:
            values = metrics(bus.admin_url or "")
            return sum(v for k, v in values.items() if k.startswith("zbus_pppp_received")) >= (
                sent + 3
            )

        wait_until(counted, what="every message counted")
        values = metrics(bus.admin_url or "")
        assert values["zbus_pppp_malformed_total{reason=ack_above_sent}"] == 1
        assert values["zbus_pppp_malformed_total{reason=channel_too_long}"] == 1
        assert values["zbus_pppp_received_total{command=malformed}"] > 100
        fresh = subscriber(ctx, bus, b"fresh")
        fresh.sync("/z/")
        with EventBusClient(BusEndpoints.from_info(bus.info()), producer="p") as client:
            client.publish("/z/1", 1, confirm=True)
        assert [s for s, _ in fresh.messages(1, "/z/")] == [1]
        fresh.close()
        assert bus.pppp is not None and bus.pppp.is_alive()
    finally:
        fuzzer.close()


def test_the_admin_api_shows_channels_and_subscribers(
    ctx: zmq.Context[Any], bus: EventBusService
) -> None:
    subs = [subscriber(ctx, bus, f"s{i}".encode()) for i in range(3)]
    try:
        for sub in subs:
            sub.sync("/a/")
        with EventBusClient(BusEndpoints.from_info(bus.info()), producer="p") as client:
            client.publish_many([("/a/1", 1), ("/a/2", 2)], confirm=True)
        for sub in subs[:2]:
            sub.messages(2, "/a/")
        subs[2].messages(2, "/a/", ack=False)

        def status(query: str = "") -> dict[str, Any]:
            url = f"{bus.admin_url}/api/v1/pppp{query}"
            with urllib.request.urlopen(url, timeout=10 * UNIT) as resp:
                body: dict[str, Any] = json.loads(resp.read())
                return body

        wait_until(lambda: status()["channels"][0]["backlog"] == 2, what="backlog")
        assert status()["channels"] == [
            {"channel": "/a/", "sequence": 2, "subscribers": 3, "backlog": 2}
        ]
        page = status("?limit=2")
        assert [s["name"] for s in page["subscribers"]] == ["s0", "s1"]
        rest = status(f"?limit=2&after={page['next']}")
        assert [s["name"] for s in rest["subscribers"]] == ["s2"] and rest["next"] is None
        assert rest["subscribers"][0]["channels"]["/a/"]["acked"] == 0
        values = metrics(bus.admin_url or "")
        assert values["zbus_pppp_backlog{channel=/a/}"] == 2
        # The bus's own view lists the door beside the others (the dashboard's Bus page).
        url = f"{bus.admin_url}/api/v1/bus"
        with urllib.request.urlopen(url, timeout=10 * UNIT) as resp:
            door = json.loads(resp.read())["doors"]["pppp"]
        assert door["endpoint"] == bus.endpoints["pppp"]
        assert door["subscribers"] == 3 and door["subscriptions"] == 1
        assert door["peers"] == {"live": 3, "grace": 0}
    finally:
        for sub in subs:
            sub.close()


def test_bytes_in_flight_hold_the_door_and_a_new_connection_frees_them(
    ctx: zmq.Context[Any], tmp_path: Path
) -> None:
    # Room for about 64 messages of 1 kB in flight: the door stops there without an ACK.
    settings = {"max_event_bytes": 16 * 1024, "pppp_peer_bytes": 64 * 1024, "pppp_idle": 30}
    with bus_thread(tmp_path, pppp_port=0, **settings) as bus:
        first = subscriber(ctx, bus, b"reconnecting")
        first.sync("/r/")
        with EventBusClient(BusEndpoints.from_info(bus.info()), producer="p") as client:
            client.publish_many([(f"/r/{i}", bytes(1000)) for i in range(300)], confirm=True)
        got = []
        while not first.quiet(0.5):
            cmd = first.recv()
            if isinstance(cmd, pppp.Publish) and cmd.sequence not in got:
                got.append(cmd.sequence)
        assert 30 <= len(got) <= 64 and got == list(range(1, len(got) + 1))
        first.close()
        # The same identity on a new connection: what the old one had queued went with
        # it, so the door counts nothing in flight and sends the backlog from the start.
        second = subscriber(ctx, bus, b"reconnecting")
        try:
            second.send(pppp.Subscribe("/r/"))
            sequences = [s for s, _ in second.messages(300, "/r/")]
            assert sequences == list(range(1, 301))
        finally:
            second.close()


def test_the_doors_reserved_topic_is_numbered_by_no_channel_even_read_from_the_log(
    ctx: zmq.Context[Any], tmp_path: Path
) -> None:
    big = b"x" * 64 * 1024
    with bus_thread(tmp_path, pppp_port=0, pppp_cache_bytes=1024 * 1024) as bus:
        sub = subscriber(ctx, bus, b"all")
        try:
            sub.sync("/zbus/")
            with EventBusClient(BusEndpoints.from_info(bus.info()), producer="p") as client:
                client.publish_many(
                    [("/zbus/a", b"a"), ("/zbus/pppp/state", b"s"), ("/zbus/b", b"b")],
                    confirm=True,
                )
                # Past the door's cache: the first two are read back from the log.
                client.publish_many([(f"/zbus/big/{i}", big) for i in range(40)], confirm=True)
            got = sub.messages(42, "/zbus/", ack=False)
            assert [(s, e.topic) for s, e in got[:3]] == [
                (1, "/zbus/a"),
                (2, "/zbus/b"),
                (3, "/zbus/big/0"),
            ]
            assert all(not e.topic.startswith("/zbus/pppp/state") for _, e in got)
            sub.send(pppp.AckNack("/zbus/", 42, ((1, 2),)))
            again = sub.messages(2, "/zbus/", ack=False)
            assert [(s, e.topic) for s, e in again] == [(1, "/zbus/a"), (2, "/zbus/b")]
        finally:
            sub.close()
