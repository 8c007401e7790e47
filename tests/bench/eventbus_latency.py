"""Event bus latency, publish -> subscriber, at a fixed publishing rate: p50 and p99
[0.5 ms / 2 ms], the subscriber a process of its own.
"""

from __future__ import annotations

import multiprocessing as mp
import statistics
import time
import uuid as uuidlib
from pathlib import Path
from typing import Any

import zmq

from tests.bench.eventbus_flows import PAYLOAD, TS
from tests.bench.eventbus_process import Bus
from zbus.common.protocols import eventbus_ext as ext


def _latency_sub(endpoint: str, n: int, ready: Any, out: Any) -> None:
    ctx = zmq.Context()
    sock = ctx.socket(zmq.SUB)
    sock.subscribe(b"")
    sock.connect(endpoint)
    sock.rcvtimeo = 20_000
    ready.set()
    lat: list[float] = []
    try:
        while len(lat) < n:
            decoded = ext.decode_stream_fast(sock.recv_multipart())
            if isinstance(decoded, tuple):
                now = time.perf_counter()
                lat.extend(now - float(row[1][6:]) for row in decoded[1])
    except zmq.Again:
        pass
    out.put(lat)
    sock.close(linger=0)
    ctx.term()


def latency(tmp: Path, rate: int = 10_000, n: int = 50_000) -> tuple[float, float]:
    bus = Bus(tmp / "lat")
    bus.start()
    mpx = mp.get_context("spawn")
    out: Any = mpx.Queue()
    ready = mpx.Event()
    sub = mpx.Process(target=_latency_sub, args=(bus.ep(3), n, ready, out))
    sub.start()
    ready.wait(30)
    time.sleep(0.5)
    ctx = zmq.Context()
    sock = ctx.socket(zmq.DEALER)
    sock.connect(bus.ep(2))
    try:
        interval = 1.0 / rate
        start = time.perf_counter()
        for i in range(n):
            # Sleep, not spin: publisher, bus and subscriber share two cores.
            ahead = start + i * interval - time.perf_counter()
            if ahead > 0:
                time.sleep(ahead)
            # The producer id carries the send time, so the subscriber can take the latency.
            event = ext.EventData(
                "/lat", f"bench-{time.perf_counter()!r}", TS, str(uuidlib.uuid4()), PAYLOAD
            )
            sock.send_multipart(ext.encode(ext.PubBatch((event,))))
        lat = out.get(timeout=120)
        sub.join(30)
    finally:
        sock.close(linger=0)
        ctx.term()
        bus.stop()
    lat_ms = sorted(x * 1000 for x in lat)
    p50 = statistics.median(lat_ms)
    p99 = lat_ms[int(len(lat_ms) * 0.99)]
    print(
        f"latency     at {rate:,} events/s, {len(lat_ms):,} samples: p50 {p50:.3f} ms "
        f"[target 0.5], p99 {p99:.3f} ms [target 2]"
    )
    return p50, p99
