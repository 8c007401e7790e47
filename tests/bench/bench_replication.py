"""The replicated event bus (issue 21), against one bus and JetStream R3 in the same run
(targets in brackets).

- confirmed publish, 100 events a confirm, 8 in flight (a raw DEALER sending ZB-PUB
  batches to the leader's COLLECTOR, as the JetStream anchor's zbus side): three
  replicas and etcd [>= 0.6x one bus], against JetStream R3 (three nats-servers, file
  storage, nats-py ``publish_async``, every ack awaited) [zbus R3 >= 2.0x JetStream R3];
- failover: ``kill -9`` of the leader to the next confirmed publish through
  ``EventBusClient`` given the three replicas, ``ZBUS_BENCH_FAILOVERS`` rounds (20)
  [p50 <= 3 s, max <= 5 s]; the killed replica is started again and the group waits
  for three in sync before the next round;
- fan-out: 100 STREAM subscribers (4 processes of 25 sockets) all on the leader, then
  spread over the three replicas, while one publisher sends ``ZBUS_BENCH_FANOUT_EVENTS``
  (100,000) events in ZB-PUB batches of 1,000 [spread >= 1.5x all on one].

Rounds of the publish figures alternate (best of ``ZBUS_BENCH_ANCHOR_ROUNDS``, 3).
"""

from __future__ import annotations

import asyncio
import multiprocessing as mp
import os
import queue
import shutil
import statistics
import tempfile
import time
import uuid as uuidlib
from functools import partial
from pathlib import Path
from typing import Any

import msgpack
import zmq

import zbus
from tests.bench import servers
from tests.bench.bench_jetstream import (
    IN_FLIGHT,
    PER_CONFIRM,
    Figures,
    _create_stream,
    _js_round,
    _zbus_round,
)
from tests.bench.eventbus_flows import BATCH, PAYLOAD, TS, confirmed_batches
from tests.bench.eventbus_process import Bus
from tests.support.replicas import ReplicaGroup, replica_group
from zbus.common.protocols import eventbus_ext as ext

N = int(os.environ.get("ZBUS_BENCH_JS_EVENTS", "100000"))
ROUNDS = int(os.environ.get("ZBUS_BENCH_ANCHOR_ROUNDS", "3"))
FAILOVERS = int(os.environ.get("ZBUS_BENCH_FAILOVERS", "20"))
FANOUT_EVENTS = int(os.environ.get("ZBUS_BENCH_FANOUT_EVENTS", "100000"))
SUBSCRIBERS, SUB_PROCS = 100, 4
RUN_TOPIC, PROBE_TOPIC, END_TOPIC = "/bench/fan/run", "/bench/fan/probe", "/bench/fan/end"
# Deliveries the bus dropped for subscribers whose queue was full (raw SUBs repair no
# gap), by spread, the largest of the rounds.
lost: dict[bool, int] = {}


def _dealer(ctx: zmq.Context[Any], collector: str) -> zmq.Socket[Any]:
    sock = ctx.socket(zmq.DEALER)
    sock.linger = 0
    sock.connect(collector)
    return sock


def _collector(endpoint: str) -> str:
    host, port = endpoint.rsplit(":", 1)
    return f"{host}:{int(port) + 2}"


def _publish_rounds(tmp: Path, group: ReplicaGroup) -> tuple[Figures, Figures, Figures]:
    one, three, js = Figures(), Figures(), Figures()
    n = N // PER_CONFIRM * PER_CONFIRM
    bus = Bus(tmp / "single")
    bus.start()
    ctx: zmq.Context[Any] = zmq.Context()
    leader = group.leader(60, in_sync=3)
    solo, replicated = _dealer(ctx, bus.ep(2)), _dealer(ctx, _collector(leader.endpoint))
    pids = [r.proc.pid for r in group.replicas.values() if r.proc is not None]
    try:
        with servers.jetstream(3, tmp / "r3") as r3:
            asyncio.run(_create_stream(r3.urls, 3))
            warm = confirmed_batches(n // 10, PER_CONFIRM)
            _zbus_round(solo, warm)
            _zbus_round(replicated, confirmed_batches(n // 10, PER_CONFIRM))
            asyncio.run(_js_round(r3.urls, n // 10))
            for _ in range(ROUNDS):
                one.measure(
                    [bus.proc.pid], n, partial(_zbus_round, solo, confirmed_batches(n, 100))
                )
                frames = confirmed_batches(n, PER_CONFIRM)
                three.measure(pids, n, partial(_zbus_round, replicated, frames))
                js.measure(r3.pids, n, lambda: asyncio.run(_js_round(r3.urls, n)))
    finally:
        solo.close()
        replicated.close()
        ctx.term()
        bus.stop()
    return one, three, js


def _failovers(group: ReplicaGroup) -> list[float]:
    times: list[float] = []
    with zbus.EventBusClient(group.endpoints(), producer="failover") as client:
        for i in range(FAILOVERS):
            leader = group.leader(60, in_sync=3)
            client.publish("/bench/failover", b"before", confirm=True, timeout=2.0)
            killed = time.monotonic()
            leader.kill()
            while True:
                try:
                    client.publish(f"/bench/failover/{i}", b"after", confirm=True, timeout=1.0)
                    break
                except (zbus.PublishError, TimeoutError):
                    if time.monotonic() - killed > 60:
                        raise
            times.append(time.monotonic() - killed)
            group.start(leader.name)
    return times


def _subscribers(endpoints: list[str], n: int, ready: Any, go: Any, out: Any) -> None:
    """Sockets on the replicas' STREAMs. Ready once every socket has had a probe event
    (its subscription has reached its replica); then counts the run's events."""
    ctx: zmq.Context[Any] = zmq.Context()
    socks = []
    for ep in endpoints:
        s = ctx.socket(zmq.SUB)
        s.rcvhwm = 0
        s.setsockopt(zmq.SUBSCRIBE, b"B")
        host, port = ep.rsplit(":", 1)
        s.connect(f"{host}:{int(port) + 3}")  # the STREAM
        socks.append(s)
    poller = zmq.Poller()
    for s in socks:
        poller.register(s, zmq.POLLIN)
    heard: set[Any] = set()
    ended: set[Any] = set()
    counts = dict.fromkeys(socks, 0)
    done = 0
    deadline = time.monotonic() + 600
    while done < len(socks) and time.monotonic() < deadline:
        for s, _ in poller.poll(100):
            while True:
                try:
                    frames = s.recv_multipart(zmq.NOBLOCK)
                except zmq.Again:
                    break
                _, events = msgpack.unpackb(frames[1], use_list=False)
                if not go.is_set():
                    heard.add(s)
                    if len(heard) == len(socks):
                        ready.set()
                    continue
                run = sum(1 for e in events if e[0].startswith(RUN_TOPIC))
                counts[s] += run
                if s not in ended and any(e[0] == END_TOPIC for e in events):
                    ended.add(s)  # the publisher is done: what it missed, it lost
                    done += 1
    out.put((time.monotonic(), sum(min(c, n) for c in counts.values())))
    out.put(None)  # the end of this process's answer
    ctx.destroy(linger=0)


def _fan_out(group: ReplicaGroup, spread: bool) -> float:
    leader = group.leader(60, in_sync=3)
    targets = list(group.replicas.values()) if spread else [leader]
    endpoints = [targets[i % len(targets)].endpoint for i in range(SUBSCRIBERS)]
    mpc = mp.get_context("spawn")
    out = mpc.Queue()
    go = mpc.Event()
    procs, readies = [], []
    for k in range(SUB_PROCS):
        ready = mpc.Event()
        p = mpc.Process(
            target=_subscribers, args=(endpoints[k::SUB_PROCS], FANOUT_EVENTS, ready, go, out)
        )
        p.start()
        procs.append(p)
        readies.append(ready)
    ctx: zmq.Context[Any] = zmq.Context()
    sock = _dealer(ctx, _collector(leader.endpoint))
    # Probes until every subscriber has heard one: their subscriptions are in place.
    deadline = time.monotonic() + 120
    while not all(r.is_set() for r in readies):
        if time.monotonic() > deadline:
            raise RuntimeError("the stream subscribers heard no probe in 120 s")
        sock.send_multipart(_batches_on(PROBE_TOPIC, 10)[0])
        readies[0].wait(0.05)
    go.set()
    start = time.monotonic()
    for frames in _batches_on(RUN_TOPIC, FANOUT_EVENTS):
        sock.send_multipart(frames)
    # The end, sent until every process has answered (a subscriber the bus dropped
    # messages for, its queue full, is told by a later one).
    ends: list[tuple[float, int]] = []
    while len(ends) < len(procs):
        sock.send_multipart(_batches_on(END_TOPIC, 1)[0])
        while True:
            try:
                got = out.get(timeout=0.2)
            except queue.Empty:
                break
            if got is not None:
                ends.append(got)
    for p in procs:
        p.join(60)
    sock.close()
    ctx.term()
    delivered = sum(c for _, c in ends)
    lost[spread] = max(lost.get(spread, 0), SUBSCRIBERS * FANOUT_EVENTS - delivered)
    return delivered / (max(t for t, _ in ends) - start)


def _batches_on(topic: str, n: int) -> list[list[bytes]]:
    """ZB-PUB batches of ``BATCH`` 100-byte events on ``topic``, fresh uuids."""
    return [
        ext.encode(
            ext.PubBatch(
                tuple(
                    ext.EventData(topic, "bench", TS, str(uuidlib.uuid4()), PAYLOAD)
                    for _ in range(min(BATCH, n - first))
                )
            )
        )
        for first in range(0, n, BATCH)
    ]


def main() -> bool:
    print("\n== replication: three bus replicas and etcd (issue 21)")
    for binary, package in (("etcd", "etcd-server"), ("nats-server", "nats-server")):
        if servers.binary(binary) is None:
            print(f"            {binary} not installed: apt-get install {package}")
            return False
    tmp = Path(tempfile.mkdtemp(prefix="zbus-bench-repl-"))
    try:
        with replica_group(tmp / "group", ZBUS_LOG_LEVEL="WARNING") as group:
            one, three, js = _publish_rounds(tmp, group)
            spread_rates, single_rates = [], []
            for _ in range(2):
                single_rates.append(_fan_out(group, spread=False))
                spread_rates.append(_fan_out(group, spread=True))
            failovers = _failovers(group)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    r1, r3, j3 = one.best(), three.best(), js.best()
    p50, worst = statistics.median(failovers), max(failovers)
    spread, single = max(spread_rates), max(single_rates)
    checks = {
        "r3_vs_r1": r3 >= 0.6 * r1,
        "r3_vs_js": r3 >= 2.0 * j3,
        "failover_p50": p50 <= 3.0,
        "failover_max": worst <= 5.0,
        "spread": spread >= 1.5 * single,
    }

    def mark(key: str) -> str:
        return "yes" if checks[key] else "NO"

    print(
        f"zbus R1     confirmed publish, {PER_CONFIRM} a confirm, {IN_FLIGHT} in flight: "
        f"{r1:>9,.0f} events/s"
    )
    print(f"            {one.line()}")
    print(f"zbus R3     the same to the leader of three:           {r3:>9,.0f} events/s")
    print(f"            {three.line()}")
    print(f"            R3 / R1: {r3 / r1:.2f}x [target >= 0.6x: {mark('r3_vs_r1')}]")
    print(f"jetstream   R3, three servers, file storage:           {j3:>9,.0f} events/s")
    print(f"            {js.line()}")
    print(
        f"            zbus R3 / JetStream R3: {r3 / j3:.2f}x [target >= 2.0x: {mark('r3_vs_js')}]"
    )
    rounds = ", ".join(f"{t:.2f}" for t in failovers)
    print(
        f"failover    kill -9 of the leader to the next confirm, {len(failovers)} rounds (s): "
        f"{rounds}"
    )
    print(
        f"            p50 {p50:.2f} s [target <= 3 s: {mark('failover_p50')}], "
        f"max {worst:.2f} s [target <= 5 s: {mark('failover_max')}]"
    )
    print(
        f"fan-out     {SUBSCRIBERS} stream subscribers, {FANOUT_EVENTS:,} events: "
        f"all on the leader {single:,.0f}, spread over three {spread:,.0f} deliveries/s"
    )
    print(f"            spread / one: {spread / single:.2f}x [target >= 1.5x: {mark('spread')}]")
    print(
        f"            dropped for full subscriber queues, at most: all on the leader "
        f"{lost.get(False, 0):,}, spread {lost.get(True, 0):,}"
    )
    return all(checks.values())


if __name__ == "__main__":
    raise SystemExit(0 if main() else 1)
