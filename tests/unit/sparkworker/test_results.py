"""Answers: JSON values pass, tables are written and summarised, Spark errors are cut short."""

from __future__ import annotations

import math
from datetime import UTC, date, datetime
from decimal import Decimal
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from pyspark.errors import AnalysisException
from pyspark.sql import Row, SparkSession

from zbus.sparkworker.errors import SparkJobError, is_spark_error, spark_message
from zbus.sparkworker.jobs import TableResult
from zbus.sparkworker.jobs.results import jsonify, materialise


def test_json_values_pass_as_they_are(spark: SparkSession, tmp_path: Path) -> None:
    value = {"a": [1, 2.5, "x", None, True], "rows": 7}
    done = materialise(spark, value, default_path=str(tmp_path / "unused"))
    assert (done.result, done.output, done.rows) == (value, None, 7)
    assert materialise(spark, 3, default_path="unused").result == 3
    assert not (tmp_path / "unused").exists()


def test_jsonify_converts_what_spark_hands_over() -> None:
    when = datetime(2024, 3, 10, 12, 0, 0, 250_000, tzinfo=UTC)
    value = {
        "row": Row(n=1, at=when),
        "day": date(2024, 3, 10),
        "amount": Decimal("2.50"),
        "raw": b"\x00\x01",
        "nan": math.nan,
        "pair": (1, 2),
    }
    assert jsonify(value) == {
        "row": {"n": 1, "at": "2024-03-10T12:00:00.250000Z"},
        "day": "2024-03-10",
        "amount": 2.5,
        "raw": "AAE=",
        "nan": None,
        "pair": [1, 2],
    }
    with pytest.raises(TypeError, match=r"^result of x.a\[1\]: set is not a JSON value"):
        jsonify({"a": [1, {2}]}, "result of x")
    with pytest.raises(TypeError, match=r"keys must be strings"):
        jsonify({1: 2})


def test_a_dataframe_is_written_and_summarised(spark: SparkSession, tmp_path: Path) -> None:
    frame = spark.createDataFrame(
        [(i, f"n{i}", datetime(2024, 3, 10, 0, 0, i, tzinfo=UTC), bytes([i])) for i in range(30)],
        "id long, name string, at timestamp, raw binary",
    )
    out = tmp_path / "job" / "id-1"
    done = materialise(spark, frame, default_path=str(out))
    assert done.output == str(out) and done.rows == 30
    result = done.result
    assert result["output"] == str(out)
    assert (result["rows"], result["format"]) == (30, "parquet")
    assert result["columns"] == ["id", "name", "at", "raw"]
    assert len(result["preview"]) == 20
    assert pq.read_table(out).num_rows == 30
    by_id = {r["id"]: r for r in result["preview"]}
    some = next(iter(by_id))
    assert by_id[some]["name"] == f"n{some}"
    assert by_id[some]["at"] == f"2024-03-10T00:00:{some:02d}Z"
    assert by_id[some]["raw"] == jsonify(bytes([some]))
    # A retry of the job (same id, same default path) replaces the first attempt's output.
    retried = materialise(spark, frame.limit(3), default_path=str(out))
    assert retried.rows == 3 and pq.read_table(out).num_rows == 3


def test_table_result_options(spark: SparkSession, tmp_path: Path) -> None:
    frame = spark.range(50).selectExpr("id", "id % 7 AS bucket")
    cached = frame.cache()
    table = TableResult(
        cached,
        summary={"kind": "buckets", "when": datetime(2024, 1, 1, tzinfo=UTC)},
        preview=3,
        order_by=("bucket", "id"),
        processed=1000,
        cached=(cached,),
    )
    done = materialise(spark, table, default_path=str(tmp_path / "out"))
    assert done.rows == 1000  # what the job says it processed
    assert done.result["rows"] == 50
    assert done.result["kind"] == "buckets" and done.result["when"] == "2024-01-01T00:00:00Z"
    assert done.result["preview"] == [
        {"id": 0, "bucket": 0},
        {"id": 7, "bucket": 0},
        {"id": 14, "bucket": 0},
    ]
    assert not cached.is_cached


def test_spark_messages_are_cut_to_what_matters(spark: SparkSession) -> None:
    with pytest.raises(AnalysisException) as raised:
        spark.sql("SELECT no_such_column FROM range(3)").collect()
    assert is_spark_error(raised.value)
    message = spark_message(str(raised.value))
    assert message.startswith("[UNRESOLVED_COLUMN")
    assert "no_such_column" in message
    assert "Project" not in message and "\tat " not in message

    py4j_style = (
        "An error occurred while calling o36.sql.\n"
        ": org.apache.spark.SparkException: Job aborted due to stage failure\n"
        "\tat org.apache.spark.scheduler.DAGScheduler.failJobAndIndependentStages(x.scala:1)\n"
        "\tat scala.Option.foreach(Option.scala:1)\n"
    )
    assert spark_message(py4j_style) == (
        "org.apache.spark.SparkException: Job aborted due to stage failure"
    )
    assert len(spark_message("x" * 5000)) < 1100
    assert not is_spark_error(ValueError("x"))
    error = SparkJobError("AnalysisException", "bad column")
    assert str(error) == "AnalysisException: bad column"
    assert error.spark_type == "AnalysisException"
