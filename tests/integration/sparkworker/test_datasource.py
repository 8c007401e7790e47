"""The ``zbus`` Spark data source against a real bus and the test process's SparkSession.

Spark's calls block, so the bus runs on a loop of its own in a background thread (the
suite's ``bus`` fixture) and the tests are plain functions; events are published with
the real blocking client.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import msgpack
import pytest
from pyspark.errors import PySparkException
from pyspark.sql import Row, SparkSession
from pyspark.sql.streaming.query import StreamingQuery

from tests.support.spark import local_session
from tests.support.waiting import UNIT, wait_until
from zbus.eventbus.client import BusEndpoints, EventBusClient, LogReader
from zbus.sparkworker.datasource import SCHEMA, ZbusOptions, register


@pytest.fixture(scope="module")
def spark() -> SparkSession:
    session = local_session()
    register(session)
    return session


def publish(bus: BusEndpoints, items: list[tuple[str, Any]]) -> list[int]:
    with EventBusClient(bus, producer="spark-test") as client:
        seqs = client.publish_many(items, confirm=True, timeout=30 * UNIT)
    assert seqs is not None
    return seqs


def rows(df: Any) -> list[tuple[int, str, Any]]:
    """(seq, topic, unpacked data), in sequence order."""
    got = df.select("seq", "topic", "data").collect()
    return sorted((r.seq, r.topic, msgpack.unpackb(r.data)) for r in got)


# ------------------------------------------------------------------------ batch
def test_a_batch_read_returns_exactly_a_sequence_range_across_partitions(
    spark: SparkSession, bus_endpoints: BusEndpoints
) -> None:
    items = [(f"/{'abc'[i % 3]}/{i}", i) for i in range(50)]
    assert publish(bus_endpoints, items) == list(range(1, 51))
    expected = [(i + 1, topic, data) for i, (topic, data) in enumerate(items)]

    df = (
        spark.read.format("zbus")
        .option("endpoint", bus_endpoints.snapshot)
        .option("startingSequence", 5)
        .option("endingSequence", 44)
        .option("partitionSize", 7)
        .option("pageSize", 3)
        .load()
    )
    assert df.schema == SCHEMA
    assert df.rdd.getNumPartitions() == 6  # 40 sequences, 7 per partition
    assert rows(df) == expected[4:44]

    # By default: from the first sequence to the bus's last when the query is planned.
    everything = spark.read.format("zbus").option("endpoint", bus_endpoints.snapshot).load()
    assert rows(everything) == expected

    # ts is the producer's timestamp, in UTC; the rest as published.
    with LogReader(bus_endpoints) as reader:
        logged = reader.page(after=9, limit=1).events[0]
    fmt = "yyyy-MM-dd'T'HH:mm:ss.SSS'Z'"
    got = everything.where("seq = 10").selectExpr("*", f'date_format(ts, "{fmt}") AS t').first()
    assert got is not None
    assert (got.t, got.uuid, got.producer, got.data) == (
        logged.ts,
        logged.uuid,
        "spark-test",
        logged.data,
    )


def test_a_batch_read_filters_by_subtree_and_reads_an_empty_bus(
    spark: SparkSession, bus_endpoints: BusEndpoints
) -> None:
    reader = spark.read.format("zbus").option("endpoint", bus_endpoints.snapshot)
    assert reader.load().collect() == []

    items = [(f"/{'abc'[i % 3]}/{i}", i) for i in range(30)]
    publish(bus_endpoints, items)
    wanted = [(i + 1, t, d) for i, (t, d) in enumerate(items) if t.startswith(("/a/", "/c/"))]
    for subtrees in ("/a/;/c/", "/c/, /a/"):
        df = reader.option("subtrees", subtrees).option("partitionSize", 4).load()
        assert rows(df) == wanted
    df = reader.option("subtrees", "/b/").option("startingSequence", 20).load()
    assert rows(df) == [(i + 1, t, d) for i, (t, d) in enumerate(items) if i >= 19 and i % 3 == 1]


# -------------------------------------------------------------------- streaming
def arrived(spark: SparkSession, query: StreamingQuery, table: str, count: int) -> list[Row]:
    """Process what is available until the sink holds ``count`` rows (or more): its rows."""
    got: list[Row] = []

    def enough() -> bool:
        query.processAllAvailable()
        got[:] = spark.sql(f"SELECT seq, topic, data FROM {table}").collect()
        return len(got) >= count

    wait_until(enough, 60, f"{count} rows in {table}")
    return got


def test_a_stream_from_latest_gets_each_new_event_exactly_once(
    spark: SparkSession, bus_endpoints: BusEndpoints, tmp_path: Path
) -> None:
    publish(bus_endpoints, [("/s/old", i) for i in range(5)])  # before the query: not read
    query = (
        spark.readStream.format("zbus")
        .option("endpoint", bus_endpoints.snapshot)
        .option("subtrees", "/s/")
        .option("partitionSize", 3)
        .load()
        .writeStream.format("memory")
        .queryName("zbus_latest")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .start()
    )
    try:
        query.processAllAvailable()  # the starting offset is taken by now
        first = publish(bus_endpoints, [(f"/s/{i}", i) for i in range(10)] + [("/other", -1)])[:10]
        got = arrived(spark, query, "zbus_latest", 10)
        assert sorted(r.seq for r in got) == first == list(range(6, 16))
        assert {(r.topic, msgpack.unpackb(r.data)) for r in got} == {
            (f"/s/{i}", i) for i in range(10)
        }

        second = publish(bus_endpoints, [(f"/s/again/{i}", i) for i in range(7)])
        got = arrived(spark, query, "zbus_latest", 17)
        assert sorted(r.seq for r in got) == first + second
        assert query.lastProgress is not None
        assert json.loads(query.lastProgress["sources"][0]["endOffset"]) == {"seq": second[-1]}
    finally:
        query.stop()


def test_available_now_from_a_sequence_respects_max_events_per_trigger(
    spark: SparkSession, bus_endpoints: BusEndpoints, tmp_path: Path
) -> None:
    publish(bus_endpoints, [(f"/n/{i}", i) for i in range(20)])
    query = (
        spark.readStream.format("zbus")
        .option("endpoint", bus_endpoints.snapshot)
        .option("startingOffsets", 6)
        .option("maxEventsPerTrigger", 4)
        .load()
        .writeStream.format("memory")
        .queryName("zbus_available_now")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    try:
        assert query.awaitTermination(int(120 * UNIT))
        assert query.exception() is None
        got = spark.sql("SELECT seq FROM zbus_available_now").collect()
        assert sorted(r.seq for r in got) == list(range(6, 21))
        batches = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
        assert batches == [4, 4, 4, 3]
    finally:
        query.stop()


# ---------------------------------------------------------------------- options
@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"startSeq": "3"}, "unknown option.*startseq.*startingSequence"),
        ({"pageSize": "0"}, "pageSize must be an integer in 1..10000"),
        ({"partitionSize": "many"}, "partitionSize must be an integer"),
        ({"timeout": "-1"}, "timeout is seconds"),
        ({"endpoint": "127.0.0.1:5556"}, "endpoint is the bus's base"),
        ({"maxEventsPerTrigger": "5"}, "maxEventsPerTrigger applies to spark.readStream only"),
        ({"startingSequence": "9", "endingSequence": "3"}, "endingSequence 3 is below"),
    ],
)
def test_a_bad_option_is_a_clear_error(
    spark: SparkSession, bus_endpoints: BusEndpoints, options: dict[str, str], message: str
) -> None:
    reader = spark.read.format("zbus").option("endpoint", bus_endpoints.snapshot).options(**options)
    with pytest.raises(PySparkException, match=message):
        reader.load().collect()


def test_a_batch_option_on_a_stream_and_a_dead_bus_are_clear_errors(
    spark: SparkSession, tmp_path: Path
) -> None:
    stream = spark.readStream.format("zbus").option("endingSequence", 9).load()
    query = stream.writeStream.format("memory").queryName("zbus_bad").start()
    try:
        with pytest.raises(PySparkException, match=r"endingSequence applies to spark\.read only"):
            query.awaitTermination(int(60 * UNIT))
    finally:
        query.stop()

    endpoint = "tcp://127.0.0.1:9"  # the discard port: nothing answers there
    dead = spark.read.format("zbus").option("endpoint", endpoint).option("timeout", 0.3 * UNIT)
    with pytest.raises(PySparkException, match=f"no answer from the bus at {re.escape(endpoint)}"):
        dead.load().collect()


def test_options_parse_case_insensitively_with_defaults() -> None:
    opts = ZbusOptions.parse({"SUBTREES": "/a; /b,,", "startingoffsets": "Earliest"}, "stream")
    assert opts.subtrees == ("/a", "/b")
    assert opts.starting_offsets == "earliest"
    assert (opts.endpoint, opts.partition_size, opts.page_size) == (
        "tcp://127.0.0.1:5556",
        100_000,
        5000,
    )
    assert ZbusOptions.parse({"startingOffsets": "12"}).starting_offsets == "12"
    with pytest.raises(ValueError, match="startingOffsets must be an integer in 1"):
        ZbusOptions.parse({"startingOffsets": "0"})
