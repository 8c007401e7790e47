"""Event bus benchmarks (issue targets in brackets), each next to a baseline of the same run.

- throughput publish -> subscriber, 100-byte payloads, durable log on [>= 100,000/s and
  >= 50% of a bare pyzmq ROUTER->PUB forwarder of the same frames]; Redis pub/sub and
  NATS (Debian servers, redis-py, nats-py) as ratios;
- confirmed publish [>= 30,000/s];
- latency at 10,000 events/s, p50 / p99 publish -> subscriber [0.5 ms / 2 ms];
- snapshot of 1,000,000 topics to a new client [<= 5 s];
- restart with a 10,000,000-event log, until /readyz [<= 5 s].

Publisher, bus and subscriber are separate processes (the machine has two cores).
``ZBUS_BENCH_EVENTS`` (default 500,000) and ``ZBUS_BENCH_LOG_EVENTS`` (default 10,000,000)
size the runs; the big log is built once under .zbus/bench/ and reused.

The bus process is in eventbus_process.py, the publisher and subscriber processes and the
forwarder baseline in eventbus_flows.py, the latency run in eventbus_latency.py, and Redis
and NATS in eventbus_baselines.py.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
import uuid as uuidlib
from pathlib import Path

import zmq

from tests.bench.eventbus_baselines import peers_throughput
from tests.bench.eventbus_flows import PAYLOAD, TS, N, client_flow, confirmed_batches, flow
from tests.bench.eventbus_latency import latency
from tests.bench.eventbus_process import ROOT, Bus
from tests.support.ports import released_port

LOG_EVENTS = int(os.environ.get("ZBUS_BENCH_LOG_EVENTS", "10000000"))
SNAPSHOT_TOPICS = int(os.environ.get("ZBUS_BENCH_SNAPSHOT_TOPICS", "1000000"))


# ------------------------------------------------------------------------- benchmarks
def throughput(tmp: Path) -> dict[str, float]:
    # The archive flushing every second, so that it runs during the measured flow.
    bus = Bus(tmp / "tp", ZBUS_ARCHIVE_INTERVAL="1")
    bus.start()
    try:
        raw, raw_got = flow(bus.ep(2), bus.ep(3), N, forwarder=False)
        rate, got = client_flow(bus.ep(0), N)
        archived = bus.archived_through()
    finally:
        bus.stop()
    bus = Bus(tmp / "tp-no-archive", ZBUS_ARCHIVE="false")
    bus.start()
    try:
        bare, _ = client_flow(bus.ep(0), N)
    finally:
        bus.stop()
    c, p = f"tcp://127.0.0.1:{released_port()}", f"tcp://127.0.0.1:{released_port()}"
    base, base_got = flow(c, p, N, forwarder=True)
    c, p = f"tcp://127.0.0.1:{released_port()}", f"tcp://127.0.0.1:{released_port()}"
    spec, spec_got = flow(c, p, N // 5, forwarder=True, per_event=True)
    print(
        f"throughput  bus, zbus client library: {rate:>10,.0f} events/s  "
        f"({got:,} of {N:,} received)"
    )
    print(
        f"            the same, archive off:    {bare:>10,.0f} events/s; with the archive "
        f"flushing every second ({archived:,} events archived during the run): {rate / bare:.2f}x"
    )
    print(f"            bus, raw stream sockets:  {raw:>10,.0f} events/s  ({raw_got:,} received)")
    print(f"            bare ROUTER->PUB:   {base:>12,.0f} events/s  ({base_got:,} received)")
    print(f"            bus / forwarder:    {rate / base:>12.2f}   [target >= 0.50]")
    print(
        f"            bare ROUTER->PUB, one 6-frame message per event (spec wire): "
        f"{spec:,.0f} events/s ({spec_got:,} received); bus / that: {rate / spec:.2f}"
    )
    print(
        f"            absolute:           {'met' if rate >= 100_000 else 'MISSED'} "
        "[target >= 100,000 events/s]"
    )
    return {"bus": rate, "forwarder": base}


def confirmed(tmp: Path) -> float:
    bus = Bus(tmp / "cf")
    bus.start()
    ctx = zmq.Context()
    sock = ctx.socket(zmq.DEALER)
    sock.connect(bus.ep(2))
    try:

        def run(n: int, per_batch: int, window: int) -> float:
            frames = confirmed_batches(n, per_batch)
            start = time.perf_counter()
            inflight = 0
            for f in frames:
                sock.send_multipart(f)
                inflight += 1
                if inflight >= window:
                    sock.recv_multipart()
                    inflight -= 1
            for _ in range(inflight):
                sock.recv_multipart()
            return n / (time.perf_counter() - start)

        single = run(20_000, 1, 64)
        batched = run(200_000, 100, 8)
    finally:
        sock.close(linger=0)
        ctx.term()
        bus.stop()
    print(f"confirmed   one event per confirm, 64 in flight: {single:>10,.0f} events/s")
    print(
        f"            100 events per confirm, 8 in flight: {batched:>10,.0f} events/s  "
        f"[target >= 30,000: {'met' if max(single, batched) >= 30_000 else 'MISSED'}]"
    )
    return batched


def _fill_log(path: Path, events: int, topics: int) -> None:
    from zbus.eventbus.server.store import NewEvent, SqliteEventLog

    log = SqliteEventLog(path)
    try:
        done = log.last_sequence()
        while done < events:
            k = min(5000, events - done)
            log.append(
                [
                    NewEvent(
                        f"/t/{(done + i) % topics:07d}", "bench", TS, str(uuidlib.uuid4()), PAYLOAD
                    )
                    for i in range(k)
                ],
                time.time(),
            )
            done += k
    finally:
        log.close()


def snapshot(tmp: Path) -> float:
    data = tmp / "snap"
    data.mkdir(parents=True)
    _fill_log(data / "events.db", SNAPSHOT_TOPICS, SNAPSHOT_TOPICS)
    bus = Bus(data)
    bus.start()
    from zbus.eventbus.client import EventBusClient

    try:
        with EventBusClient(bus.ep(0), producer="bench") as client:
            start = time.perf_counter()
            sub = client.subscribe(page_limit=10_000)
            got = 0
            while got < SNAPSHOT_TOPICS and sub.next(timeout=30) is not None:
                got += 1
            took = time.perf_counter() - start
    finally:
        bus.stop()
    print(
        f"snapshot    {got:,} topics to a new client: {took:.2f} s "
        f"({got / took:,.0f} topics/s) [target <= 5 s: {'met' if took <= 5 else 'MISSED'}]"
    )
    return took


def restart() -> float:
    cache = ROOT / ".zbus" / "bench" / f"log-{LOG_EVENTS}"
    cache.mkdir(parents=True, exist_ok=True)
    path = cache / "events.db"
    t0 = time.perf_counter()
    _fill_log(path, LOG_EVENTS, 100_000)
    built = time.perf_counter() - t0
    bus = Bus(cache)
    ready = bus.start()
    bus.stop()
    print(
        f"restart     with a {LOG_EVENTS:,}-event log: ready in {ready:.2f} s "
        f"[target <= 5 s: {'met' if ready <= 5 else 'MISSED'}] (log built in {built:.0f} s)"
    )
    return ready


def main() -> bool:
    print("\n== event bus")
    tmp = Path(tempfile.mkdtemp(prefix="zbus-bench-"))
    try:
        tp = throughput(tmp)
        peers = peers_throughput()
        for name, rate in peers.items():
            print(
                f"            {name:<20} {rate:>12,.0f} events/s   bus / {name}: "
                f"{tp['bus'] / rate:.2f}"
            )
        cf = confirmed(tmp)
        p50, p99 = latency(tmp)
        snap = snapshot(tmp)
        ready = restart()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return (
        tp["bus"] >= 100_000
        and tp["bus"] >= 0.5 * tp["forwarder"]
        and cf >= 30_000
        and p50 <= 0.5
        and p99 <= 2
        and snap <= 5
        and ready <= 5
    )


if __name__ == "__main__":
    raise SystemExit(0 if main() else 1)
