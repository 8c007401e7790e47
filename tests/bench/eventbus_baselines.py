"""Redis pub/sub and NATS (Debian servers, redis-py, nats-py), each server a process of its
own: the same flow as the event bus throughput benchmark, for its ratios.
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

from tests.bench.eventbus_flows import PAYLOAD, N
from tests.support.ports import released_port


# --------------------------------------------------------------------- Redis and NATS
def peers_throughput() -> dict[str, float]:
    """The same flow through Redis pub/sub and NATS, each server a process of its own."""
    out: dict[str, float] = {}
    for name, binary, args in (
        ("redis pub/sub", "redis-server", ["--save", "", "--appendonly", "no", "--port"]),
        ("nats", "nats-server", ["-a", "127.0.0.1", "-p"]),
    ):
        path = shutil.which(binary) or f"/usr/sbin/{binary}"
        if not Path(path).exists():
            print(f"            {binary} not installed: apt-get install {binary}")
            continue
        port = released_port()
        server = subprocess.Popen(
            [path, *args, str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        try:
            run = _redis if binary == "redis-server" else _nats
            out[name] = asyncio.run(run(port))
        finally:
            server.terminate()
            server.wait()
    return out


async def _redis(port: int) -> float:
    import redis.asyncio as aioredis

    client = aioredis.Redis(port=port)
    for _ in range(200):  # wait for the server to listen
        try:
            await client.ping()
            break
        except (OSError, aioredis.ConnectionError):
            await asyncio.sleep(0.05)
    pubsub = client.pubsub()
    await pubsub.subscribe("bench")
    n = N // 5
    done = asyncio.Event()
    got = 0

    async def reader() -> None:
        nonlocal got
        async for m in pubsub.listen():
            if m["type"] == "message":
                got += 1
                if got >= n:
                    done.set()
                    return

    task = asyncio.create_task(reader())
    pub = aioredis.Redis(port=port)
    start = time.perf_counter()
    for i in range(0, n, 1000):
        pipe = pub.pipeline(transaction=False)
        for _ in range(min(1000, n - i)):
            pipe.publish("bench", PAYLOAD)
        await pipe.execute()
    await asyncio.wait_for(done.wait(), 120)
    rate = n / (time.perf_counter() - start)
    task.cancel()
    for c in (pub, pubsub, client):
        await c.aclose()
    return rate


async def _nats(port: int) -> float:
    import nats

    url = f"nats://127.0.0.1:{port}"
    for _ in range(200):  # wait for the server to listen
        try:
            nc = await nats.connect(url)
            break
        except Exception:
            await asyncio.sleep(0.05)
    sub_nc = await nats.connect(url, pending_size=1 << 30)
    n = N // 2
    got = 0
    done = asyncio.Event()

    async def handler(msg: Any) -> None:
        nonlocal got
        got += 1
        if got >= n:
            done.set()

    await sub_nc.subscribe(
        "bench", cb=handler, pending_msgs_limit=n + 1, pending_bytes_limit=1 << 30
    )
    await sub_nc.flush()
    start = time.perf_counter()
    for _ in range(n):
        await nc.publish("bench", PAYLOAD)
    await nc.flush()
    await asyncio.wait_for(done.wait(), 120)
    rate = n / (time.perf_counter() - start)
    await nc.close()
    await sub_nc.close()
    return rate
