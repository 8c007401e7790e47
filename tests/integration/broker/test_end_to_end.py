"""Broker, worker runner and client library together on real sockets."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import httpx
import pytest

from tests.support.broker import running_broker
from tests.support.waiting import UNIT
from zbus.broker.client import AsyncBrokerClient, JobFailed
from zbus.broker.client.worker import Worker


async def test_many_clients_and_workers(tmp_path: Path) -> None:
    async with running_broker(tmp_path) as broker:
        ran_on: dict[str, set[int]] = {}
        lock = threading.Lock()
        workers = []
        for n in range(3):
            worker = Worker(broker.endpoints["workers"], queues=("default",), concurrency=2)

            def tag(x: int, n: int = n) -> int:
                with lock:
                    ran_on.setdefault(f"w{n}", set()).add(x)
                return x * x

            worker.register("square", tag)
            worker.register_builtins()
            workers.append(worker)
        tasks = [asyncio.create_task(w.run()) for w in workers]
        clients = [AsyncBrokerClient(broker.endpoints["clients"]) for _ in range(4)]
        try:

            async def use(client: AsyncBrokerClient, base: int) -> list[int]:
                ids = [
                    await client.submit("default", "square", args=(base + i,)) for i in range(50)
                ]
                return [await client.result(job_id, timeout=30 * UNIT) for job_id in ids]

            results = await asyncio.gather(*(use(c, k * 1000) for k, c in enumerate(clients)))
            for k, values in enumerate(results):
                assert values == [(k * 1000 + i) ** 2 for i in range(50)]
            assert sum(len(v) for v in ran_on.values()) == 200  # each job ran exactly once
            assert len(ran_on) == 3  # least-recently-used spreads the work

            with pytest.raises(JobFailed) as failed:
                await clients[0].submit_and_wait("default", "fail", timeout=30 * UNIT)
            assert failed.value.state == "failed"

            async with httpx.AsyncClient(base_url=broker.admin_url or "") as http:
                queues = (await http.get("/api/v1/queues")).json()["queues"]
                default = next(q for q in queues if q["name"] == "default")
                assert default["succeeded"] == 200 and default["failed"] == 1
                assert default["consumers"] == 3
                listed = (await http.get("/api/v1/workers")).json()["workers"]
                assert len(listed) == 3
                submitted = await http.post(
                    "/api/v1/jobs", json={"callable": "echo", "path": "-", "args": [7]}
                )
                assert submitted.status_code == 201
                job_id = submitted.json()["id"]
                for _ in range(500):
                    got = await http.get(f"/api/v1/jobs/{job_id}/result")
                    if got.status_code == 200:
                        break
                    await asyncio.sleep(0.01)
                assert got.json()["state"] == "succeeded"
                assert got.json()["result"] == {"value": [7]}
                missing = await http.get("/api/v1/jobs/nope")
                assert missing.status_code == 404
        finally:
            for client in clients:
                client.close()
            for worker in workers:
                worker.request_stop()
            await asyncio.wait_for(asyncio.gather(*tasks), 30 * UNIT)
