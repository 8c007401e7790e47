"""PPPP subscribers (the zbus client library), beside the Event BUS live path in the same
run; and what one subscriber that never ACKs costs the bus. (``bench_pppp`` measures the
door itself, with raw subscribers.)

Throughput: one publisher sends ``ZBUS_BENCH_PPPP_CLIENT_DELIVERIES`` (default 200,000)
deliveries' worth of 100-byte events on one topic (batched ``ZB-PUB`` through
:class:`EventBusClient`, no confirm); 1 and 10 subscribers each take every one, each in
a process of its own. The PPPP path: the bus's log -> the PPPP door -> a
:class:`PPPPSubscriber` (ACK every 100 messages, exactly once, in order). The Event BUS
path: the log -> the stream -> an :class:`EventBusClient` subscription. Figure:
deliveries per second, from the first send to the last receipt.
[target: at least 50,000 messages a second to one PPPP subscriber; the cost against the
Event BUS path, time per delivery, is printed beside it]

Memory: a bus takes ``ZBUS_BENCH_PPPP_LAG`` (default 1,000,000) events of 100 bytes
while a PPPP subscriber reads and heartbeats but never ACKs one; the baseline is a bus
that takes the same events with no PPPP subscriber. Printed: both buses' resident
memory (VmRSS) once every event is in, and the backlog the door reports.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import tempfile
import threading
import time
import urllib.request
import uuid as uuidlib
from pathlib import Path
from typing import Any

import zmq

from tests.bench.eventbus_process import Bus
from tests.support.bus_process import memory_bytes
from tests.support.ports import released_port
from zbus import BusEndpoints, EventBusClient, PPPPSubscriber
from zbus.common.protocols import pppp
from zbus.common.protocols.pppp_event import SyncEnd, decode_payload

DELIVERIES = int(os.environ.get("ZBUS_BENCH_PPPP_CLIENT_DELIVERIES", "200000"))
LAG = int(os.environ.get("ZBUS_BENCH_PPPP_LAG", "1000000"))
FANOUT = (1, 10)
TARGET = 50_000  # messages a second to one PPPP subscriber
BODY = bytes(100)
MiB = 1024 * 1024


def _endpoints(bus: Bus) -> BusEndpoints:
    return BusEndpoints(bus.ep(0), bus.ep(1), bus.ep(2), bus.ep(3))


# ---------------------------------------------------------------------- the peers
def _subscriber(
    kind: str, bus_port: int, pppp_ep: str, i: int, n: int, ready: Any, out: Any
) -> None:
    """One subscriber: ready once its snapshot/SYNC came (the start event), then n."""
    got = 0
    first = last = 0.0
    if kind == "pppp":
        with PPPPSubscriber(pppp_ep, "/bench/pppp/", name=f"bench-{os.getpid()}-{i}") as sub:
            msg = sub.next(timeout=60)
            assert msg is not None and msg.sync, msg
            ready.release()
            expected = 0
            while got < n:
                msg = sub.next(timeout=60)
                if msg is None:
                    break
                if msg.sync:
                    continue  # the rest of the SYNC (the latest of each topic)
                assert expected in (0, msg.sequence), (msg.sequence, expected)
                expected = msg.sequence + 1
                last = time.perf_counter()
                got += 1
    else:
        ends = BusEndpoints.from_base(f"tcp://127.0.0.1:{bus_port}")
        with EventBusClient(ends, producer="b") as client, client.subscribe("/bench/eb/") as sub:
            event = sub.next(timeout=60)
            assert event is not None
            ready.release()
            while got < n:
                event = sub.next(timeout=60)
                if event is None:
                    break
                last = time.perf_counter()
                got += 1
    out.put((first, last, got))


def _publisher(bus_port: int, topic: str, n: int, go: Any, out: Any) -> None:
    ends = BusEndpoints.from_base(f"tcp://127.0.0.1:{bus_port}")
    items = [(topic, BODY, str(uuidlib.uuid4())) for _ in range(n)]
    with EventBusClient(ends, producer="bench") as client:
        go.wait()
        start = time.perf_counter()
        for i in range(0, n, 1000):
            client.publish_many(items[i : i + 1000])
        out.put(start)


def _run(bus: Bus, pppp_ep: str, kind: str, k: int, n: int) -> dict[str, float]:
    mpx = mp.get_context("spawn")
    outs: Any = mpx.Queue()
    pub_out: Any = mpx.Queue()
    ready, go = mpx.Semaphore(0), mpx.Event()
    topic = f"/bench/{kind}/x"
    subs = [
        mpx.Process(target=_subscriber, args=(kind, bus.port, pppp_ep, i, n, ready, outs))
        for i in range(k)
    ]
    for p in subs:
        p.start()
    for _ in range(k):
        assert ready.acquire(timeout=120), "a subscriber did not start"
    pub = mpx.Process(target=_publisher, args=(bus.port, topic, n, go, pub_out))
    pub.start()
    go.set()
    start = pub_out.get(timeout=600)
    results = [outs.get(timeout=600) for _ in range(k)]
    for p in (pub, *subs):
        p.join(60)
    got = sum(r[2] for r in results)
    last = max(r[1] for r in results)
    return {"rate": got / (last - start) if got else 0.0, "got": got, "want": n * k}


# ------------------------------------------------------------------ the lagging one
class _Lagging(threading.Thread):
    """A raw PPPP subscriber that ACKs its SYNC, then reads and heartbeats, never ACKing."""

    def __init__(self, endpoint: str, channel: str) -> None:
        super().__init__(daemon=True)
        self.endpoint, self.channel = endpoint, channel
        self.synced = threading.Event()
        self.stop = threading.Event()
        self.received = 0

    def run(self) -> None:
        ctx: zmq.Context[Any] = zmq.Context()
        sock = ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.ROUTING_ID, b"lagging")
        sock.connect(self.endpoint)
        sock.send_multipart(pppp.encode(pppp.Subscribe(self.channel)))
        beat = time.monotonic()
        while not self.stop.is_set():
            if sock.poll(100):
                cmd = pppp.decode_from_publisher(sock.recv_multipart())
                if isinstance(cmd, pppp.Publish):
                    payload = decode_payload(cmd)
                    if isinstance(payload, SyncEnd):
                        ack = pppp.AckNack(self.channel, payload.head)
                        sock.send_multipart(pppp.encode(ack))
                        self.synced.set()
                    elif cmd.sequence:
                        self.received += 1
            if time.monotonic() - beat > 0.3:
                sock.send_multipart(pppp.encode(pppp.Heartbeat()))
                beat = time.monotonic()
        sock.close(linger=0)
        ctx.term()


def _memory(tmp: Path, lagging: bool) -> tuple[int, int, int]:
    """(bus RSS once LAG events are in, the door's backlog, messages the subscriber got)."""
    pppp_port = released_port()
    bus = Bus(
        tmp / ("lag" if lagging else "base"), ZBUS_ARCHIVE="false", ZBUS_PPPP_PORT=str(pppp_port)
    )
    bus.start()
    sub = _Lagging(f"tcp://127.0.0.1:{pppp_port}", "/lag/")
    try:
        if lagging:
            sub.start()
            assert sub.synced.wait(60), "no SYNC"
        with EventBusClient(_endpoints(bus), producer="bench") as client:
            for i in range(0, LAG, 1000):
                client.publish_many(
                    [("/lag/x", BODY)] * min(1000, LAG - i), confirm=True, timeout=60
                )
        url = f"http://127.0.0.1:{bus.admin}/api/v1/pppp"
        with urllib.request.urlopen(url, timeout=10) as r:
            status = json.loads(r.read())
        backlog = max((c["backlog"] for c in status.get("channels", [])), default=0)
        return memory_bytes(bus.proc.pid), backlog, sub.received
    finally:
        sub.stop.set()
        if sub.is_alive():
            sub.join(10)
        bus.stop()


def main() -> bool:
    print("\n== PPPP subscribers beside the Event BUS live path; a subscriber that never ACKs")
    tmp = Path(tempfile.mkdtemp(prefix="zbus-bench-pppp-"))
    pppp_port = released_port()
    # Small events, so that every door's queue holds thousands of them (as bench_mc0).
    bus = Bus(
        tmp / "bus",
        ZBUS_ARCHIVE="false",
        ZBUS_PPPP_PORT=str(pppp_port),
        ZBUS_MAX_EVENT_BYTES="4096",
    )
    bus.start()
    pppp_ep = f"tcp://127.0.0.1:{pppp_port}"
    ok = True
    try:
        with EventBusClient(_endpoints(bus), producer="bench") as client:
            for kind in ("pppp", "eb"):
                client.publish(f"/bench/{kind}/start", b"", confirm=True)  # in the SYNC
        print(f"{'subscribers':>11} {'path':>9} {'deliveries/s':>13} {'received':>19}")
        for k in FANOUT:
            n = max(1, DELIVERIES // k)
            rows = {}
            for kind in ("eb", "pppp"):
                rows[kind] = r = _run(bus, pppp_ep, kind, k, n)
                received = f"{r['got']:>9,}/{r['want']:<9,}"
                print(f"{k:>11} {kind:>9} {r['rate']:>13,.0f} {received}")
            cost = rows["eb"]["rate"] / max(rows["pppp"]["rate"], 1.0)
            line = f"{'':>11} cost of PPPP against the Event BUS path: {cost:.2f}x"
            if k == 1:
                met = rows["pppp"]["rate"] >= TARGET and rows["pppp"]["got"] == n
                ok = ok and met
                line += f"; target >= {TARGET:,}/s: {'yes' if met else 'NO'}"
            print(line)
    finally:
        bus.stop()
    base_rss, _, _ = _memory(tmp, lagging=False)
    lag_rss, backlog, received = _memory(tmp, lagging=True)
    print(
        f"bus RSS with {LAG:,} events: {base_rss / MiB:,.1f} MiB without a PPPP subscriber, "
        f"{lag_rss / MiB:,.1f} MiB with one that never ACKs (+{(lag_rss - base_rss) / MiB:,.1f} "
        f"MiB; door backlog {backlog:,}; the subscriber got {received:,}, one window)"
    )
    return ok
