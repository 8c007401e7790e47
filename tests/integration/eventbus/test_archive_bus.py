"""The archive of a real bus: events published through the client, archived through the
admin API and at drain, and read back by a real SparkSession; a bad path or the archive
switched off leaves the bus working."""

from __future__ import annotations

from pathlib import Path

import httpx
import msgpack
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support.bus import running_bus
from zbus.eventbus.client import AsyncEventBusClient, BusEndpoints
from zbus.eventbus.server.archive import MARK_FILE, decode_mark

AUTH = {"authorization": "Bearer s3cret"}


async def metric(http: httpx.AsyncClient, name: str) -> float:
    families = text_string_to_metric_families((await http.get("/metrics")).text)
    return next(s.value for f in families for s in f.samples if s.name == name)


async def test_spark_reads_what_the_bus_archived(tmp_path: Path) -> None:
    archive = tmp_path / "archive"
    async with (
        running_bus(tmp_path, archive_interval=3600, admin_token="s3cret") as bus,
        httpx.AsyncClient(base_url=bus.admin_url or "") as http,
    ):
        endpoints = BusEndpoints.from_info(bus.info())
        async with AsyncEventBusClient(endpoints, producer="archive-test") as client:
            seqs = await client.publish_many(
                [(f"/sensors/{i % 3}", {"i": i}) for i in range(40)], confirm=True
            )
        assert seqs == list(range(1, 41))

        assert (await http.post("/api/v1/archive/flush")).status_code == 401
        flushed = await http.post("/api/v1/archive/flush", headers=AUTH)
        assert flushed.status_code == 200
        assert flushed.json() == {"archived_through": 40, "lag": 0}
        state = (await http.get("/api/v1/bus")).json()["archive"]
        assert state["enabled"] and state["path"] == str(archive)
        assert (state["archived_through"], state["lag"], state["last_error"]) == (40, 0, None)
        assert state["files"] >= 1
        assert await metric(http, "zbus_archive_events_total") == 40
        assert decode_mark((archive / MARK_FILE).read_bytes()) == 40

        for i in range(40, 50):  # archived by the drain's final flush
            event = {"topic": "/admin", "data": {"i": i}}
            assert (await http.post("/api/v1/events", json=event, headers=AUTH)).status_code == 200
    assert decode_mark((archive / MARK_FILE).read_bytes()) == 50

    pytest.importorskip("pyspark")
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    from tests.support.spark import local_session

    frame = local_session().read.parquet(str(archive))
    fields = {f.name: f.dataType for f in frame.schema.fields}
    assert fields == {
        "seq": T.LongType(),
        "topic": T.StringType(),
        "producer": T.StringType(),
        "ts": T.TimestampType(),
        "uuid": T.StringType(),
        "data": T.BinaryType(),
        "date": T.DateType(),  # the partition column, from the directory names
    }
    rows = frame.orderBy("seq").collect()
    assert [r.seq for r in rows] == list(range(1, 51))
    assert {r.topic for r in rows} == {"/sensors/0", "/sensors/1", "/sensors/2", "/admin"}
    assert [msgpack.unpackb(r.data)["i"] for r in rows] == list(range(50))
    assert {r.producer for r in rows} == {"archive-test", "admin-api"}
    assert frame.filter(F.to_date("ts") != F.col("date")).count() == 0


async def test_a_bad_archive_path_does_not_stop_the_bus(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_bytes(b"")
    async with (
        running_bus(tmp_path, archive_path=str(blocker / "archive")) as bus,
        httpx.AsyncClient(base_url=bus.admin_url or "") as http,
    ):
        published = await http.post("/api/v1/events", json={"topic": "/x", "data": 1})
        assert published.status_code == 200 and published.json()["seq"] == 1
        failed = await http.post("/api/v1/archive/flush")
        assert failed.status_code == 503 and "archive flush failed" in failed.text
        state = (await http.get("/api/v1/bus")).json()["archive"]
        assert state["failing"] and state["last_error"] and state["archived_through"] is None
        assert state["lag"] == 1
        assert await metric(http, "zbus_archive_errors_total") >= 1
        assert (await http.get("/readyz")).status_code == 200
        again = await http.post("/api/v1/events", json={"topic": "/x", "data": 2})
        assert again.json()["seq"] == 2


async def test_the_archive_can_be_switched_off(tmp_path: Path) -> None:
    async with (
        running_bus(tmp_path, archive=False) as bus,
        httpx.AsyncClient(base_url=bus.admin_url or "") as http,
    ):
        await http.post("/api/v1/events", json={"topic": "/x", "data": 1})
        assert (await http.post("/api/v1/archive/flush")).status_code == 409
        assert (await http.get("/api/v1/bus")).json()["archive"] == {"enabled": False}
    assert not (tmp_path / "archive").exists()
