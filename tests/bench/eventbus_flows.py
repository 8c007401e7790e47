"""Publisher -> bus -> subscriber flows for the event bus benchmark, each peer a process of
its own: raw stream sockets, the zbus client library, and the bare ROUTER -> PUB
forwarder baseline of the same frames.

``ZBUS_BENCH_EVENTS`` (default 500,000) sizes the runs.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import time
import uuid as uuidlib
from typing import Any

import msgpack
import zmq

from zbus.common.protocols import eventbus_ext as ext

N = int(os.environ.get("ZBUS_BENCH_EVENTS", "500000"))
BATCH = 1000
PAYLOAD = bytes(range(100))
TS = "2026-11-22T08:35:32.862Z"


def _batches(n: int) -> list[list[bytes]]:
    """ZB-PUB frames for n events (the same frames go to the bus and to the baseline)."""
    out = []
    for start in range(0, n, BATCH):
        events = tuple(
            ext.EventData(f"/bench/{i % 100}", "bench", TS, str(uuidlib.uuid4()), PAYLOAD)
            for i in range(start, min(n, start + BATCH))
        )
        out.append(ext.encode(ext.PubBatch(events)))
    return out


# ----------------------------------------------------------------- the peers (processes)
def confirmed_batches(n: int, per_batch: int) -> list[list[bytes]]:
    """n events as ZB-PUB batches of ``per_batch`` with confirm=True, each its own uuid
    (built before a clock starts)."""
    return [
        ext.encode(
            ext.PubBatch(
                tuple(
                    ext.EventData("/c", "bench", TS, str(uuidlib.uuid4()), PAYLOAD)
                    for _ in range(per_batch)
                ),
                confirm=True,
            )
        )
        for _ in range(n // per_batch)
    ]


def _spec_frames(n: int) -> list[list[bytes]]:
    """The same events as spec PUB messages, one 6-frame message per event."""
    from zbus.common.protocols import eventbus as eb

    return [
        eb.encode(eb.Pub(f"/bench/{i % 100}", None, "bench", TS, str(uuidlib.uuid4()), PAYLOAD))
        for i in range(n)
    ]


def _publisher(endpoint: str, n: int, go: Any, out: Any, per_event: bool = False) -> None:
    frames = _spec_frames(n) if per_event else _batches(n)
    ctx = zmq.Context()
    sock = ctx.socket(zmq.DEALER)
    sock.sndhwm = 0
    sock.connect(endpoint)
    go.wait()
    start = time.perf_counter()
    for f in frames:
        sock.send_multipart(f)
    out.put(("start", start))
    sock.close(linger=-1)
    ctx.term()


def _subscriber(
    endpoint: str, n: int, ready: Any, out: Any, baseline: bool, per_event: bool = False
) -> None:
    ctx = zmq.Context()
    sock = ctx.socket(zmq.SUB)
    sock.rcvhwm = 0
    sock.subscribe(b"")
    sock.connect(endpoint)
    sock.rcvtimeo = 20_000
    ready.set()
    got = 0
    try:
        while got < n:
            frames = sock.recv_multipart()
            if per_event:
                got += 1
                continue
            if baseline:
                got += len(msgpack.unpackb(frames[2]))
                continue
            decoded = ext.decode_stream_fast(frames)
            if isinstance(decoded, tuple):
                got += len(decoded[1])
    except zmq.Again:
        pass
    out.put(("end", time.perf_counter(), got))
    sock.close(linger=0)
    ctx.term()


def _client_publisher(base: str, n: int, go: Any, out: Any) -> None:
    from zbus.eventbus.client import EventBusClient

    items = [(f"/bench/{i % 100}", PAYLOAD) for i in range(n)]
    with EventBusClient(base, producer="bench") as client:
        go.wait()
        start = time.perf_counter()
        for i in range(0, n, BATCH):
            # The last batch is confirmed: the bus takes one peer's messages in order, so
            # everything before it is in too (the bus holds a bounded backlog per peer,
            # and the rest waits in this process).
            client.publish_many(items[i : i + BATCH], confirm=i + BATCH >= n, timeout=120)
        out.put(("start", start))


def _client_subscriber(base: str, n: int, ready: Any, out: Any) -> None:
    from zbus.eventbus.client import EventBusClient

    got = 0
    with EventBusClient(base, producer="bench-sub") as client:
        sub = client.subscribe(("/bench/",))
        ready.set()
        while got < n:
            if sub.next(timeout=20) is None:
                break
            got += 1
    out.put(("end", time.perf_counter(), got))


def client_flow(base: str, n: int) -> tuple[float, int]:
    """Publisher and subscriber through the zbus client library, each its own process."""
    mpx = mp.get_context("spawn")
    out: Any = mpx.Queue()
    ready, go = mpx.Event(), mpx.Event()
    sub = mpx.Process(target=_client_subscriber, args=(base, n, ready, out))
    pub = mpx.Process(target=_client_publisher, args=(base, n, go, out))
    sub.start()
    pub.start()
    ready.wait(60)
    time.sleep(0.5)  # the subscription has reached the bus before the clock starts
    go.set()
    results = {item[0]: item[1:] for item in (out.get(timeout=180), out.get(timeout=180))}
    for p in (pub, sub):
        p.join(60)
    start, (end, got) = results["start"][0], results["end"]
    return got / (end - start), got


def _forwarder(collector: str, publisher: str, n: int, ready: Any, per_event: bool = False) -> None:
    """The baseline: a bare ROUTER -> PUB forwarder of the same frames, no storage."""
    ctx = zmq.Context()
    router = ctx.socket(zmq.ROUTER)
    router.bind(collector)
    pub = ctx.socket(zmq.PUB)
    pub.sndhwm = 0
    pub.bind(publisher)
    ready.set()
    seen = 0
    router.rcvtimeo = 30_000
    try:
        while seen < n:
            frames = router.recv_multipart()
            pub.send_multipart(frames[1:])  # drop the ROUTER identity
            seen += 1 if per_event else BATCH
    except zmq.Again:
        pass
    router.close(linger=0)
    pub.close(linger=-1)
    ctx.term()


def flow(
    collector: str, publisher: str, n: int, forwarder: bool, per_event: bool = False
) -> tuple[float, int]:
    mpx = mp.get_context("spawn")
    out: Any = mpx.Queue()
    ready, go = mpx.Event(), mpx.Event()
    procs = []
    if forwarder:
        fwd_ready = mpx.Event()
        procs.append(
            mpx.Process(target=_forwarder, args=(collector, publisher, n, fwd_ready, per_event))
        )
        procs[-1].start()
        fwd_ready.wait(30)
    sub = mpx.Process(target=_subscriber, args=(publisher, n, ready, out, forwarder, per_event))
    pub = mpx.Process(target=_publisher, args=(collector, n, go, out, per_event))
    sub.start()
    pub.start()
    ready.wait(30)
    time.sleep(0.5)  # let the SUB subscription reach the publisher before the clock starts
    go.set()
    results = dict((item[0], item[1:]) for item in (out.get(timeout=120), out.get(timeout=120)))
    for p in (pub, sub, *procs):
        p.join(60)
    start, (end, got) = results["start"][0], results["end"]
    return got / (end - start), got
