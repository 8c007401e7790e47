"""mc0 PUT -> MESSAGE fan-out, beside the Event BUS path of the same bus in the same run.

For 1, 10 and 100 subscribers: one publisher puts 100-byte messages on one topic and
every subscriber gets each one. The mc0 path: PUT on the mc0 port -> the bus's log ->
MESSAGE to each mc0 subscriber (a DEALER). The Event BUS path: PUB on the COLLECTOR ->
the log -> BROADCAST to each spec subscriber (a SUB on the PUBLISHER). Both carry the
same bodies, one message in and one out per subscriber, and both go through the bus's
durable log. Figures: deliveries per second with the publisher flat out, the bus
process's CPU time per delivery in that run (its user and system time from /proc: what
a delivery costs the bus, whatever else the shared machine runs meanwhile), and p50 /
p99 latency (publish to receipt) at a paced rate of 2,000 deliveries a second.

[target: an mc0 delivery costs at most 1.5x an Event BUS delivery, cost being time per
delivery as in every benchmark here (the Event BUS rate / the mc0 rate); the CPU ratio
is printed beside it]

Bus, publisher and subscribers are separate processes (all the subscribers of one run
are sockets of one process). ``ZBUS_BENCH_MC0_DELIVERIES`` (default 200,000) sizes each
throughput run.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import shutil
import statistics
import struct
import tempfile
import time
import uuid as uuidlib
from pathlib import Path
from typing import Any

import zmq

from tests.bench.eventbus_process import Bus
from tests.support.ports import released_port
from zbus.common.protocols import eventbus as eb

DELIVERIES = int(os.environ.get("ZBUS_BENCH_MC0_DELIVERIES", "200000"))
FANOUT = (1, 10, 100)
PACED = 2_000  # deliveries a second in the latency runs (within every path's capacity)
TARGET = 1.5
TOPIC = "/bench/mc0"
TS = "2026-11-22T08:35:32.862Z"
_SENT = struct.Struct("<d")


def _body() -> bytes:
    """100 bytes whose first 8 are the send time (perf_counter: one clock per machine)."""
    return _SENT.pack(time.perf_counter()) + bytes(92)


# ---------------------------------------------------------------------- the peers
def _subscribers(kind: str, endpoint: str, k: int, n: int, ready: Any, out: Any) -> None:
    """k subscribers in one process; reports (first, last receive time, count, latencies)."""
    ctx = zmq.Context()
    socks = []
    for _ in range(k):
        if kind == "mc0":
            sock = ctx.socket(zmq.DEALER)
            sock.rcvhwm = 0
            sock.connect(endpoint)
            sock.send_multipart([b"", b"CONNECT", b"TTL", b"600000", b"VERSION", b"0.2"])
            sock.send_multipart([b"", b"SUB", b"ID", b"s", b"", TOPIC.encode()])
            assert sock.recv_multipart() == [b"", b"OK", b"ID", b"s"]
        else:
            sock = ctx.socket(zmq.SUB)
            sock.rcvhwm = 0
            sock.subscribe(TOPIC.encode())
            sock.connect(endpoint)
        socks.append(sock)
    ready.set()
    poller = zmq.Poller()
    for sock in socks:
        poller.register(sock, zmq.POLLIN)
    want, got, lat = n * k, 0, []
    first = last = 0.0
    while got < want:
        ready_socks = poller.poll(10_000)
        if not ready_socks:
            break
        for sock, _ in ready_socks:
            while True:
                try:
                    frames = sock.recv_multipart(zmq.NOBLOCK)
                except zmq.Again:
                    break
                last = time.perf_counter()
                if not got:
                    first = last
                got += 1
                lat.append(last - _SENT.unpack_from(frames[-1])[0])
    out.put((first, last, got, lat))
    for sock in socks:
        sock.close(linger=0)
    ctx.term()


def _publisher(kind: str, endpoint: str, n: int, rate: float, go: Any, out: Any) -> None:
    ctx = zmq.Context()
    sock = ctx.socket(zmq.DEALER)
    sock.sndhwm = 0
    sock.connect(endpoint)
    topic = TOPIC.encode()
    uuids = [str(uuidlib.uuid4()) for _ in range(n)]
    go.wait()
    start = time.perf_counter()
    for i in range(n):
        if rate:
            ahead = start + i / rate - time.perf_counter()
            if ahead > 0:
                time.sleep(ahead)
        if kind == "mc0":
            sock.send_multipart([b"", b"PUT", b"TOPIC", topic, b"", _body()])
        else:
            pub = eb.Pub(TOPIC, None, "bench", TS, uuids[i], _body())
            sock.send_multipart(eb.encode(pub))
    out.put(start)
    sock.close(linger=-1)
    ctx.term()


def _cpu_seconds(pid: int) -> float:
    """User and system time of a process so far (/proc/<pid>/stat, fields 14 and 15)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _run(bus: Bus, mc0_port: int, kind: str, k: int, n: int, rate: float) -> dict[str, float]:
    """One flow: deliveries/s (from the first send to the last receipt), latencies."""
    mpx = mp.get_context("spawn")
    subs_out: Any = mpx.Queue()
    pub_out: Any = mpx.Queue()
    ready, go = mpx.Event(), mpx.Event()
    mc0_endpoint = f"tcp://127.0.0.1:{mc0_port}"
    sub_endpoint = mc0_endpoint if kind == "mc0" else bus.ep(1)
    pub_endpoint = mc0_endpoint if kind == "mc0" else bus.ep(2)
    sub = mpx.Process(target=_subscribers, args=(kind, sub_endpoint, k, n, ready, subs_out))
    pub = mpx.Process(target=_publisher, args=(kind, pub_endpoint, n, rate, go, pub_out))
    sub.start()
    pub.start()
    ready.wait(120)
    time.sleep(0.5)  # the subscriptions reach the bus before the clock starts
    cpu = _cpu_seconds(bus.proc.pid)
    go.set()
    start = pub_out.get(timeout=300)
    _, last, got, lat = subs_out.get(timeout=300)
    cpu = _cpu_seconds(bus.proc.pid) - cpu
    for p in (pub, sub):
        p.join(60)
    lat_ms = sorted(x * 1000 for x in lat) or [float("nan")]
    return {
        "rate": got / (last - start) if got else 0.0,
        "cpu_us": cpu / got * 1e6 if got else float("inf"),
        "got": got,
        "want": n * k,
        "p50": statistics.median(lat_ms),
        "p99": lat_ms[min(len(lat_ms) - 1, int(len(lat_ms) * 0.99))],
    }


def main() -> bool:
    print("\n== mc0 door: PUT -> MESSAGE fan-out, beside the Event BUS path")
    tmp = Path(tempfile.mkdtemp(prefix="zbus-bench-mc0-"))
    mc0_port = released_port()
    # Small events, so that every door's queue holds thousands of them.
    bus = Bus(
        tmp / "bus",
        ZBUS_ARCHIVE="false",
        ZBUS_MC0_PORT=str(mc0_port),
        ZBUS_MAX_EVENT_BYTES="4096",
    )
    bus.start()
    ok = True
    try:
        print(
            f"{'subscribers':>11} {'path':>9} {'deliveries/s':>13} {'received':>17}"
            f" {'bus CPU us':>10} {'p50 ms':>8} {'p99 ms':>8}"
            f"   (per delivery; p50/p99 at {PACED:,} deliveries/s)"
        )
        for k in FANOUT:
            n = max(1, DELIVERIES // k)
            paced_n = max(200, 3 * PACED // k)
            rows = {}
            for kind in ("eventbus", "mc0"):
                flat = _run(bus, mc0_port, kind, k, n, 0)
                paced = _run(bus, mc0_port, kind, k, paced_n, PACED / k)
                rows[kind] = flat
                received = f"{flat['got']:>8,}/{flat['want']:<8,}"
                print(
                    f"{k:>11} {kind:>9} {flat['rate']:>13,.0f} {received} "
                    f"{flat['cpu_us']:>10.2f} {paced['p50']:>8.3f} {paced['p99']:>8.3f}"
                )
            cost = rows["eventbus"]["rate"] / max(rows["mc0"]["rate"], 1.0)
            cpu = rows["mc0"]["cpu_us"] / rows["eventbus"]["cpu_us"]
            met = cost <= TARGET
            ok = ok and met
            print(
                f"{'':>11} an mc0 delivery costs {cost:.2f}x an Event BUS delivery "
                f"[target <= {TARGET}: {'met' if met else 'MISSED'}]; "
                f"the bus's CPU per delivery: {cpu:.2f}x"
            )
    finally:
        bus.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    return ok


if __name__ == "__main__":
    raise SystemExit(0 if main() else 1)
