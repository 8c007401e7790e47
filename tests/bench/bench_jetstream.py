"""Anchor for the event bus's confirmed publish: NATS JetStream, in the same run (issue
target in brackets).

- zbus: confirmed publish, 100 events a confirm, 8 confirms in flight (a raw DEALER sending
  ZB-PUB batches to the bus's COLLECTOR, as the eventbus benchmark's ``confirmed``), the
  durable log on;
- JetStream R1: one nats-server (Debian's) with file storage, a stream of one replica;
  nats-py's ``publish_async`` (up to its 4,000 publishes in flight), every ack awaited;
  [zbus >= 3x R1];
- JetStream R3: three nats-servers in a cluster (routes), file storage, a stream of three
  replicas, the same client; zbus / R3 printed.

Beside each rate, the CPU time an event of the servers (the bus process; every
nats-server) and of the client (this process): nats-py spends about as long a publish
as the whole round trip takes, so the R1 rate is mostly the Python client's.

100-byte payloads everywhere. Rounds alternate zbus, R1, R3 (best of ``ROUNDS`` each), so
drift on the shared machine hits all three. ``ZBUS_BENCH_JS_EVENTS`` (default 100,000)
sizes a round.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import zmq

from tests.bench import servers
from tests.bench.eventbus_flows import PAYLOAD, confirmed_batches
from tests.bench.eventbus_process import Bus

N = int(os.environ.get("ZBUS_BENCH_JS_EVENTS", "100000"))
ROUNDS = int(os.environ.get("ZBUS_BENCH_ANCHOR_ROUNDS", "3"))
PER_CONFIRM, IN_FLIGHT = 100, 8
TARGET_R1 = 3.0
STREAM = "BENCH"


@dataclass(slots=True)
class Figures:
    """Each measured round's rate, and CPU seconds an event of the servers and the client."""

    rates: list[float] = field(default_factory=list)
    server_cpu: list[float] = field(default_factory=list)
    client_cpu: list[float] = field(default_factory=list)

    def measure(self, pids: list[int], n: int, run: Callable[[], float]) -> None:
        server, client = servers.cpu_seconds(pids), time.process_time()
        self.rates.append(run())
        self.client_cpu.append((time.process_time() - client) / n)
        self.server_cpu.append((servers.cpu_seconds(pids) - server) / n)

    def best(self) -> float:
        return max(self.rates)

    def line(self) -> str:
        rounds = " / ".join(f"{r:,.0f}" for r in self.rates)
        return (
            f"rounds {rounds}; CPU an event: server {min(self.server_cpu) * 1e6:.1f} us, "
            f"client {min(self.client_cpu) * 1e6:.1f} us"
        )


def _zbus_round(sock: zmq.Socket[bytes], frames: list[list[bytes]]) -> float:
    """Events/s of the batches sent, every confirm received."""
    start = time.perf_counter()
    inflight = 0
    for f in frames:
        sock.send_multipart(f)
        inflight += 1
        if inflight >= IN_FLIGHT:
            sock.recv_multipart()
            inflight -= 1
    for _ in range(inflight):
        sock.recv_multipart()
    return len(frames) * PER_CONFIRM / (time.perf_counter() - start)


async def _connect(urls: list[str]) -> Any:
    import nats

    return await nats.connect(servers=urls)


async def _create_stream(urls: list[str], replicas: int) -> None:
    """The stream, once the cluster has a JetStream leader and enough peers (retried)."""
    from nats.js.api import StorageType

    nc = await _connect(urls)
    try:
        js = nc.jetstream(timeout=10)
        deadline = time.monotonic() + 60
        while True:
            try:
                await js.add_stream(
                    name=STREAM,
                    subjects=["bench.>"],
                    storage=StorageType.FILE,
                    num_replicas=replicas,
                )
                return
            except Exception:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.5)
    finally:
        await nc.close()


async def _js_round(urls: list[str], n: int) -> float:
    """Events/s of n JetStream publishes, each one's ack awaited (an error ack raises)."""
    nc = await _connect(urls)
    try:
        js = nc.jetstream(timeout=30)
        start = time.perf_counter()
        futures = [await js.publish_async("bench.js", PAYLOAD) for _ in range(n)]
        acks = await asyncio.gather(*futures)
        rate = n / (time.perf_counter() - start)
        if any(ack.stream != STREAM for ack in acks):
            raise RuntimeError("an ack from another stream")
        return rate
    finally:
        await nc.close()


async def _stored(urls: list[str]) -> int:
    nc = await _connect(urls)
    try:
        info = await nc.jetstream(timeout=10).stream_info(STREAM)
        return int(info.state.messages)
    finally:
        await nc.close()


def _rounds(tmp: Path) -> tuple[Figures, Figures, Figures, int]:
    zb, one, three = Figures(), Figures(), Figures()
    n = N // PER_CONFIRM * PER_CONFIRM
    warm = max(PER_CONFIRM, n // 10 // PER_CONFIRM * PER_CONFIRM)
    bus = Bus(tmp / "bus")
    bus.start()
    ctx = zmq.Context()
    sock = ctx.socket(zmq.DEALER)
    sock.connect(bus.ep(2))
    try:
        with (
            servers.jetstream(1, tmp / "r1") as r1,
            servers.jetstream(3, tmp / "r3") as r3,
        ):
            asyncio.run(_create_stream(r1.urls, 1))
            asyncio.run(_create_stream(r3.urls, 3))
            _zbus_round(sock, confirmed_batches(warm, PER_CONFIRM))
            asyncio.run(_js_round(r1.urls, warm))
            asyncio.run(_js_round(r3.urls, warm))
            for _ in range(ROUNDS):
                frames = confirmed_batches(n, PER_CONFIRM)
                zb.measure([bus.proc.pid], n, partial(_zbus_round, sock, frames))
                one.measure(r1.pids, n, lambda: asyncio.run(_js_round(r1.urls, n)))
                three.measure(r3.pids, n, lambda: asyncio.run(_js_round(r3.urls, n)))
            stored = [asyncio.run(_stored(r.urls)) for r in (r1, r3)]
    finally:
        sock.close(linger=0)
        ctx.term()
        bus.stop()
    expected = warm + ROUNDS * n
    for name, got in zip(("R1", "R3"), stored, strict=True):
        if got != expected:
            raise RuntimeError(f"JetStream {name} holds {got:,} messages, {expected:,} sent")
    return zb, one, three, expected


def main() -> bool:
    print("\n== anchor: NATS JetStream, durable publish with every ack awaited")
    if servers.binary("nats-server") is None:
        print("            nats-server not installed: apt-get install nats-server")
        return False
    tmp = Path(tempfile.mkdtemp(prefix="zbus-bench-js-"))
    try:
        zb, one, three, stored = _rounds(tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    z, r1, r3 = zb.best(), one.best(), three.best()
    met = z >= TARGET_R1 * r1
    print(
        f"zbus        confirmed publish, {PER_CONFIRM} events a confirm, {IN_FLIGHT} in flight: "
        f"{z:>9,.0f} events/s"
    )
    print(f"            {zb.line()}")
    print(f"jetstream   R1, one server, file storage, publish_async:   {r1:>9,.0f} events/s")
    print(f"            {one.line()}; {stored:,} stored")
    print(
        f"            zbus / R1: {z / r1:.2f}x [target >= {TARGET_R1:g}x: {'yes' if met else 'NO'}]"
    )
    print(f"jetstream   R3, three servers (routes), file storage:      {r3:>9,.0f} events/s")
    print(f"            {three.line()}; {stored:,} stored in each")
    print(f"            zbus / R3: {z / r3:.2f}x")
    return met


if __name__ == "__main__":
    raise SystemExit(0 if main() else 1)
