"""The sparkworker in process on the shared session, with a real broker and a real bus.

Jobs go through the broker's client port as any client's would; results come back in
the REPLY and as events on the bus; the admin API and the metrics count them.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pyarrow.parquet as pq
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support import spark_jobs
from tests.support.archive import ArchivedEvent, make_events, write_archive
from tests.support.broker import running_broker
from tests.support.bus import running_bus
from tests.support.spark import local_session
from tests.support.waiting import UNIT, async_wait_until
from zbus.broker.client import AsyncBrokerClient, JobFailed
from zbus.broker.server.service import BrokerService
from zbus.common.security import generate_keys, load_keys
from zbus.common.settings import ConfigError
from zbus.eventbus.client import AsyncEventBusClient, AsyncSubscription, BusEndpoints
from zbus.sparkworker.config import SparkWorkerSettings
from zbus.sparkworker.service import SparkWorkerService

TOPIC = "/zbus/pipeline/results"
USER_JOBS = ",".join(
    f"{name}=tests.support.spark_jobs:{name}"
    for name in ("squares", "numbers", "broken", "fails", "held", "bus_topics", "slow")
)
WAIT = 60 * UNIT  # for a job's result: Spark's first queries in a process are slow
# The broker's acknowledgement of a submit: its thread shares the machine with Spark's
# JVMs, which can hold both cores for seconds.
ACK_TIMEOUT = 30 * UNIT


@asynccontextmanager
async def running_sparkworker(
    tmp_path: Path, broker: BrokerService, bus: BusEndpoints | None, **settings: Any
) -> AsyncIterator[SparkWorkerService]:
    service = SparkWorkerService(
        SparkWorkerSettings(
            admin_port=0,
            broker_endpoint=broker.endpoints["workers"],
            data_dir=tmp_path / "sparkworker",
            archive_path=str(tmp_path / "archive"),
            spark_jobs=USER_JOBS,
            progress_interval=0.05,
            **settings,
        ),
        session=local_session(),
        entry_points=[],
        bus=bus,
    )
    task = asyncio.create_task(service.run())

    async def ready() -> bool:
        if task.done():
            task.result()
        return all(service.readiness().values())

    await async_wait_until(ready, within=60, what="sparkworker ready")
    try:
        yield service
    finally:
        service.request_stop()
        await asyncio.wait_for(task, 30 * UNIT)


async def next_on(subscription: AsyncSubscription, topic: str) -> Any:
    """The data of the next event on ``topic`` (others skipped)."""
    deadline = asyncio.get_running_loop().time() + WAIT
    while True:
        left = deadline - asyncio.get_running_loop().time()
        event = await subscription.next(timeout=max(0.0, left))
        if event is None:
            raise AssertionError(f"no event on {topic} within {WAIT:g} s")
        if event.topic == topic:
            return event.unpack()


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


async def check_progress(http: httpx.AsyncClient, results: AsyncSubscription, held_id: str) -> None:
    """The held job is listed as running, with its Spark progress, and announced."""

    async def held_progress() -> bool:
        running = (await http.get("/api/v1/spark/jobs")).json()["running"]
        return any(
            j["job_id"] == held_id and j["progress"]["tasks"]["completed"] >= 4 for j in running
        )

    await async_wait_until(held_progress, within=WAIT, what="the held job's progress")
    progress = await next_on(results, f"{TOPIC}/held/progress")
    assert progress["job_id"] == held_id and progress["state"] == "running"
    one = (await http.get(f"/api/v1/spark/jobs/{held_id}")).json()
    assert one["state"] == "running" and one["progress"]["spark_jobs"] >= 1


@pytest.fixture
def events(tmp_path: Path) -> list[ArchivedEvent]:
    start = datetime(2024, 3, 9, 23, 0, tzinfo=UTC)
    generated = make_events(
        300, ("sensors/a", "sensors/b", "orders/new"), start, timedelta(seconds=20)
    )
    write_archive(tmp_path / "archive", generated)
    return generated


async def test_jobs_through_the_broker(tmp_path: Path, events: list[ArchivedEvent]) -> None:
    async with (
        running_broker(tmp_path / "broker") as broker,
        running_bus(tmp_path / "bus") as bus,
    ):
        endpoints = BusEndpoints.from_info(bus.info())
        async with (
            running_sparkworker(tmp_path, broker, endpoints) as service,
            AsyncEventBusClient(endpoints, producer="test") as bus_client,
            AsyncBrokerClient(broker.endpoints["clients"], ack_timeout=ACK_TIMEOUT) as client,
            httpx.AsyncClient(base_url=service.admin_url or "") as http,
        ):
            results = await bus_client.subscribe(f"{TOPIC}/")

            # A built-in job, with its numbers checked against the events themselves.
            job_id = await client.submit("spark", "topic-stats", kwargs={"prefix": "sensors/"})
            reply = await client.result(job_id, timeout=WAIT)
            assert (reply["job"], reply["job_id"]) == ("topic-stats", job_id)
            chosen = [e for e in events if e.topic.startswith("sensors/")]
            result = reply["result"]
            assert result["topics"] == 2
            assert result["events"] == len(chosen)
            assert result["bytes"] == sum(len(e.data) for e in chosen)
            window = (max(e.ts for e in chosen) - min(e.ts for e in chosen)).total_seconds()
            assert result["window"]["seconds"] == pytest.approx(window)
            output = tmp_path / "sparkworker" / "output" / "topic-stats" / job_id
            assert reply["output"] == result["output"] == str(output)
            assert pq.read_table(output).num_rows == 2

            announced = await next_on(results, f"{TOPIC}/topic-stats")
            assert announced["job_id"] == job_id
            assert announced["result"]["events"] == len(chosen)

            # User jobs registered by the spark_jobs setting.
            squares = await client.submit_and_wait(
                "spark", "squares", kwargs={"n": 100}, timeout=WAIT
            )
            assert squares["result"]["total"] == sum(i * i for i in range(100))
            assert squares["result"]["job_id"] == squares["job_id"]  # the job's context
            assert squares["output"] is None
            table = await client.submit_and_wait("spark", "numbers", kwargs={"n": 7}, timeout=WAIT)
            assert table["result"]["rows"] == 7
            assert table["result"]["columns"] == ["id", "square"]
            assert sorted(r["square"] for r in table["result"]["preview"]) == [
                i * i for i in range(7)
            ]
            assert pq.read_table(table["output"]).num_rows == 7

            # A job reading the live bus through the zbus data source.
            for i in range(5):
                await bus_client.publish(f"/live/{i % 2}", {"i": i}, confirm=True)
            live = await client.submit_and_wait(
                "spark",
                "bus_topics",
                kwargs={"endpoint": endpoints.snapshot, "subtrees": "/live/"},
                timeout=WAIT,
            )
            assert live["result"]["counts"] == {"/live/0": 3, "/live/1": 2}

            # Failures reach the client, and the worker goes on serving.
            with pytest.raises(JobFailed) as failed:
                await client.submit_and_wait("spark", "broken", timeout=WAIT)
            assert failed.value.error_type == "SparkJobError"
            assert failed.value.message.startswith("AnalysisException: [UNRESOLVED_COLUMN")
            assert "\tat " not in failed.value.message and "Project" not in failed.value.message
            with pytest.raises(JobFailed) as failed:
                await client.submit_and_wait(
                    "spark", "fails", kwargs={"message": "no luck"}, timeout=WAIT
                )
            assert (failed.value.error_type, failed.value.message) == ("RuntimeError", "no luck")
            with pytest.raises(JobFailed) as failed:
                await client.submit_and_wait(
                    "spark", "topic-stats", kwargs={"since": "last tuesday"}, timeout=WAIT
                )
            assert failed.value.error_type == "ParamError"
            assert failed.value.message.startswith("since: expected ISO-8601")
            with pytest.raises(JobFailed) as failed:
                await client.submit_and_wait("spark", "no-such-job", timeout=WAIT)
            assert failed.value.error_type == "UnknownJobError"
            again = await client.submit_and_wait("spark", "squares", kwargs={"n": 3}, timeout=WAIT)
            assert again["result"]["total"] == 5

            # A running job shows its progress; it is announced as it goes.
            spark_jobs.GATE.clear()
            held_id = await client.submit("spark", "held")
            try:
                await check_progress(http, results, held_id)
            finally:
                spark_jobs.GATE.set()
            assert (await client.result(held_id, timeout=WAIT))["result"] == {"released": True}

            listed = (await http.get("/api/v1/spark/jobs")).json()
            assert listed["running"] == []
            finished = {j["job_id"]: j for j in listed["finished"]}
            stats = finished[job_id]
            assert (stats["job"], stats["state"], stats["output"]) == (
                "topic-stats",
                "succeeded",
                str(output),
            )
            assert stats["seconds"] >= 0 and stats["progress"]["spark_jobs"] >= 1
            assert set(stats["progress"]["tasks"]) == {"total", "completed", "active", "failed"}
            errors = [j["error"] for j in listed["finished"] if j["state"] == "failed"]
            assert "RuntimeError: no luck" in errors
            registered = {j["name"]: j["doc"] for j in listed["registered"]}
            assert registered["squares"] == "Sum of the squares of 0..n-1, computed by Spark."
            assert {"topic-stats", "compact", "export", "held"} <= set(registered)
            assert (await http.get("/api/v1/spark/jobs/nope")).status_code == 404

            info = (await http.get("/api/v1/spark")).json()
            assert info["ready"] is True and info["up"] is True and info["adopted"] is True
            assert info["master"] == "local[2]"
            assert info["app_id"] == local_session().sparkContext.applicationId
            assert info["spark_version"] == local_session().version
            assert info["session_uptime_seconds"] >= 0
            assert info["broker"]["connected"] is True
            assert (await http.get("/readyz")).status_code == 200

            async def result_announcements() -> float:
                text = (await http.get("/metrics")).text
                key = ("zbus_spark_announcements_total", (("kind", "result"), ("outcome", "sent")))
                return samples(text).get(key, 0)

            async def all_announced() -> bool:
                return await result_announcements() >= 6  # the six jobs that succeeded

            await async_wait_until(all_announced, within=WAIT, what="result announcements")
            metrics = samples((await http.get("/metrics")).text)

            def jobs(job: str, outcome: str) -> float:
                return metrics[("zbus_spark_jobs_total", (("job", job), ("outcome", outcome)))]

            assert jobs("topic-stats", "succeeded") == 1
            assert jobs("topic-stats", "failed") == 1
            assert jobs("squares", "succeeded") == 2
            assert jobs("broken", "failed") == 1
            assert jobs("other", "failed") == 1
            assert jobs("compact", "succeeded") == 0
            assert metrics[("zbus_spark_job_seconds_count", ())] == 10
            # topic-stats read its events; numbers wrote 7 rows.
            assert metrics[("zbus_spark_rows_processed_total", ())] == len(chosen) + 7
            assert metrics[("zbus_spark_session_up", ())] == 1
            assert metrics[("zbus_spark_running_jobs", ())] == 0


async def test_a_job_name_given_twice_stops_the_start(tmp_path: Path) -> None:
    service = SparkWorkerService(
        SparkWorkerSettings(
            admin_port=0,
            data_dir=tmp_path / "sparkworker",
            spark_jobs="compact=tests.support.spark_jobs:squares",
        ),
        session=local_session(),
        entry_points=[],
    )
    with pytest.raises(ConfigError, match="two jobs are named 'compact': one from built-in"):
        await asyncio.wait_for(service.run(), 30 * UNIT)
    assert local_session().sparkContext._jsc is not None  # an adopted session stays up


async def test_over_curve_to_the_broker_and_the_bus(tmp_path: Path) -> None:
    keys, allowed = tmp_path / "keys", tmp_path / "allowed"
    broker_public, broker_secret = generate_keys(keys, "broker")
    bus_public, bus_secret = generate_keys(keys, "bus")
    worker_public, worker_secret = generate_keys(keys, "sparkworker")
    client_public, client_secret = generate_keys(keys, "client")
    allowed.mkdir()
    for public in (worker_public, client_public):
        (allowed / public.name).write_bytes(public.read_bytes())
    secure = {"curve_secret_key": broker_secret, "curve_allowed_clients": allowed}
    async with (
        running_broker(tmp_path / "broker", **secure) as broker,
        running_bus(
            tmp_path / "bus", curve_secret_key=bus_secret, curve_allowed_clients=allowed
        ) as bus,
    ):
        endpoints = BusEndpoints.from_info(bus.info())
        client_curve = (load_keys(client_secret), load_keys(broker_public).public)
        bus_curve = (load_keys(client_secret), load_keys(bus_public).public)
        async with (
            running_sparkworker(
                tmp_path,
                broker,
                endpoints,
                curve_secret_key=worker_secret,
                broker_public_key=broker_public,
                eventbus_public_key=bus_public,
            ),
            AsyncEventBusClient(endpoints, producer="test", curve=bus_curve) as bus_client,
            AsyncBrokerClient(
                broker.endpoints["clients"], ack_timeout=ACK_TIMEOUT, curve=client_curve
            ) as client,
        ):
            results = await bus_client.subscribe(f"{TOPIC}/squares")
            reply = await client.submit_and_wait("spark", "squares", kwargs={"n": 4}, timeout=WAIT)
            assert reply["result"]["total"] == 0 + 1 + 4 + 9
            announced = await next_on(results, f"{TOPIC}/squares")
            assert announced["job_id"] == reply["job_id"]


async def test_a_running_job_is_cancelled_through_the_admin_api(tmp_path: Path) -> None:
    async with (
        running_broker(tmp_path / "broker") as broker,
        running_sparkworker(tmp_path, broker, None, admin_token="secret") as service,
        AsyncBrokerClient(broker.endpoints["clients"], ack_timeout=ACK_TIMEOUT) as client,
        httpx.AsyncClient(base_url=service.admin_url or "") as http,
    ):
        job_id = await client.submit("spark", "slow")

        async def spark_tasks_running() -> bool:
            one = await http.get(f"/api/v1/spark/jobs/{job_id}")
            return one.status_code == 200 and one.json()["progress"]["tasks"]["active"] > 0

        await async_wait_until(spark_tasks_running, within=WAIT, what="the slow job's tasks")
        assert (await http.post(f"/api/v1/spark/jobs/{job_id}/cancel")).status_code == 401
        auth = {"Authorization": "Bearer secret"}
        cancel = await http.post(f"/api/v1/spark/jobs/{job_id}/cancel", headers=auth)
        assert cancel.status_code == 200 and cancel.json()["cancelling"] is True
        with pytest.raises(JobFailed) as failed:
            await client.result(job_id, timeout=WAIT)
        assert failed.value.error_type == "JobCancelled"
        missing = await http.post("/api/v1/spark/jobs/nope/cancel", headers=auth)
        assert missing.status_code == 404
        # The worker goes on serving.
        squares = await client.submit_and_wait("spark", "squares", kwargs={"n": 3}, timeout=WAIT)
        assert squares["result"]["total"] == 5
