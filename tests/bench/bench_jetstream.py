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
import uuid as uuidlib
from pathlib import Path
from typing import Any

import zmq

from tests.bench import servers
from tests.bench.bench_eventbus import PAYLOAD, TS, Bus
from zbus.common.protocols import eventbus_ext as ext

N = int(os.environ.get("ZBUS_BENCH_JS_EVENTS", "100000"))
ROUNDS = int(os.environ.get("ZBUS_BENCH_ANCHOR_ROUNDS", "3"))
PER_CONFIRM, IN_FLIGHT = 100, 8
TARGET_R1 = 3.0
STREAM = "BENCH"
#: Client CPU seconds an event of each measured round, by the number of servers.
CLIENT_CPU: dict[int, list[float]] = {1: [], 3: []}


def _zbus_round(sock: zmq.Socket[bytes], n: int) -> float:
    """Events/s of n events in ZB-PUB batches with confirm=True, every confirm received."""
    frames = [
        ext.encode(
            ext.PubBatch(
                tuple(
                    ext.EventData("/c", "bench", TS, str(uuidlib.uuid4()), PAYLOAD)
                    for _ in range(PER_CONFIRM)
                ),
                confirm=True,
            )
        )
        for _ in range(n // PER_CONFIRM)
    ]
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
    return n / (time.perf_counter() - start)


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
    """Events/s of n JetStream publishes, each one's ack awaited (an error ack raises).
    Adds this process's CPU seconds to ``CLIENT_CPU``: the client's share of the work."""
    nc = await _connect(urls)
    try:
        js = nc.jetstream(timeout=30)
        await js.publish_async("bench.warm", PAYLOAD)  # the async reply subscription
        await js.publish_async_completed()
        cpu, start = time.process_time(), time.perf_counter()
        futures = [await js.publish_async("bench.js", PAYLOAD) for _ in range(n)]
        acks = await asyncio.gather(*futures)
        rate = n / (time.perf_counter() - start)
        CLIENT_CPU[len(urls)].append((time.process_time() - cpu) / n)
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


def _rounds(tmp: Path) -> tuple[list[float], list[float], list[float], int, int]:
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
            asyncio.run(_create_stream(r1, 1))
            asyncio.run(_create_stream(r3, 3))
            warm = max(PER_CONFIRM, N // 10 // PER_CONFIRM * PER_CONFIRM)
            _zbus_round(sock, warm)
            asyncio.run(_js_round(r1, warm))
            asyncio.run(_js_round(r3, warm))
            for cpu in CLIENT_CPU.values():
                cpu.clear()
            zb: list[float] = []
            one: list[float] = []
            three: list[float] = []
            for _ in range(ROUNDS):
                zb.append(_zbus_round(sock, N // PER_CONFIRM * PER_CONFIRM))
                one.append(asyncio.run(_js_round(r1, N)))
                three.append(asyncio.run(_js_round(r3, N)))
            stored = (asyncio.run(_stored(r1)), asyncio.run(_stored(r3)))
    finally:
        sock.close(linger=0)
        ctx.term()
        bus.stop()
    expected = warm + 1 + ROUNDS * (N + 1)  # each round's warm-up publish too
    for name, got in zip(("R1", "R3"), stored, strict=True):
        if got != expected:
            raise RuntimeError(f"JetStream {name} holds {got:,} messages, {expected:,} sent")
    return zb, one, three, *stored


def _fmt(rates: list[float]) -> str:
    return " / ".join(f"{r:,.0f}" for r in rates)


def _client_share(nodes: int, rate: float) -> str:
    cpu = min(CLIENT_CPU[nodes]) * 1e6
    return f"the nats-py client's CPU: {cpu:.1f} us an event of {1e6 / rate:.1f} us"


def main() -> bool:
    print("\n== anchor: NATS JetStream, durable publish with every ack awaited")
    missing = [b for b in ("nats-server",) if servers.binary(b) is None]
    if missing:
        print(f"            {', '.join(missing)} not installed: apt-get install nats-server")
        return False
    tmp = Path(tempfile.mkdtemp(prefix="zbus-bench-js-"))
    try:
        zb, one, three, stored, _ = _rounds(tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    z, r1, r3 = max(zb), max(one), max(three)
    met = z >= TARGET_R1 * r1
    print(
        f"zbus        confirmed publish, {PER_CONFIRM} events a confirm, {IN_FLIGHT} in flight: "
        f"{z:>9,.0f} events/s  (rounds {_fmt(zb)})"
    )
    print(
        f"jetstream   R1, one server, file storage, publish_async:   {r1:>9,.0f} events/s  "
        f"(rounds {_fmt(one)}; {stored:,} stored)"
    )
    print(f"            {_client_share(1, r1)}")
    print(
        f"            zbus / R1: {z / r1:.2f}x [target >= {TARGET_R1:g}x: {'yes' if met else 'NO'}]"
    )
    print(
        f"jetstream   R3, three servers (routes), file storage:      {r3:>9,.0f} events/s  "
        f"(rounds {_fmt(three)})"
    )
    print(f"            {_client_share(3, r3)}")
    print(f"            zbus / R3: {z / r3:.2f}x")
    return met


if __name__ == "__main__":
    raise SystemExit(0 if main() else 1)
