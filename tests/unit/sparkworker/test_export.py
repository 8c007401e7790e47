"""export: the chosen events, in sequence order, as Parquet or as CSV text."""

from __future__ import annotations

import base64
import csv
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from pyspark.errors import AnalysisException
from pyspark.sql import SparkSession

from tests.support.archive import ArchivedEvent
from zbus.sparkworker.errors import ParamError
from zbus.sparkworker.jobs.export import export
from zbus.sparkworker.jobs.results import materialise


def run(spark: SparkSession, archive: Path, out: Path, **params: Any) -> dict[str, Any]:
    done = materialise(spark, export(spark, params, archive=str(archive)), default_path=str(out))
    result: dict[str, Any] = done.result
    assert done.output == result["output"]
    return result


def test_parquet(
    spark: SparkSession, archive: Path, events: list[ArchivedEvent], tmp_path: Path
) -> None:
    since = datetime(2024, 3, 10, 6, 0, tzinfo=UTC)
    until = datetime(2024, 3, 10, 18, 0, tzinfo=UTC)
    result = run(
        spark,
        archive,
        tmp_path / "out",
        prefix=["orders/", "logs/"],
        since=since.isoformat(),
        until=until.isoformat(),
    )
    want = [e for e in events if since <= e.ts < until and e.topic.startswith(("orders/", "logs/"))]
    assert result["rows"] == len(want) > 0
    assert result["output"] == str(tmp_path / "out")
    assert result["format"] == "parquet"
    assert result["columns"] == ["seq", "topic", "producer", "ts", "uuid", "data"]
    table = pq.read_table(result["output"]).sort_by("seq").to_pylist()
    assert [
        (r["seq"], r["topic"], r["producer"], r["ts"], r["uuid"], r["data"]) for r in table
    ] == [(e.seq, e.topic, e.producer, e.ts, e.uuid, e.data) for e in want]


def test_csv_to_a_given_path(
    spark: SparkSession, archive: Path, events: list[ArchivedEvent], tmp_path: Path
) -> None:
    target = tmp_path / "exports" / "sensors"
    result = run(
        spark, archive, tmp_path / "unused", prefix="sensors/temp", format="CSV", path=str(target)
    )
    assert result["output"] == str(target) and result["format"] == "csv"
    want = [e for e in events if e.topic.startswith("sensors/temp")]
    assert result["rows"] == len(want)
    rows: list[dict[str, str]] = []
    for part in sorted(target.glob("part-*.csv")):  # Spark's part files are in seq order
        with part.open(newline="") as f:
            rows.extend(csv.DictReader(f))
    assert [int(r["seq"]) for r in rows] == [e.seq for e in want]
    first = rows[0]
    assert datetime.fromisoformat(first["ts"]) == want[0].ts
    assert first["ts"].endswith("Z")
    assert base64.b64decode(first["data"]) == want[0].data
    assert (first["topic"], first["producer"], first["uuid"]) == (
        want[0].topic,
        want[0].producer,
        want[0].uuid,
    )


def test_an_existing_path_is_not_overwritten(
    spark: SparkSession, archive: Path, tmp_path: Path
) -> None:
    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / "keep.txt").write_text("mine")
    with pytest.raises(AnalysisException, match=r"already exists"):
        run(spark, archive, tmp_path / "unused", path=str(taken))
    assert (taken / "keep.txt").read_text() == "mine"


@pytest.mark.parametrize(
    ("params", "problem"),
    [
        ({"format": "json"}, "^format: expected one of parquet, csv"),
        ({"until": "2024-01-01", "since": "2024-02-01"}, "^until: must be after since"),
        ({"path": 3}, "^path: expected a non-empty string"),
        ({"prefixes": "a"}, "^prefixes: unknown parameter of export"),
    ],
)
def test_bad_params(spark: SparkSession, params: dict[str, Any], problem: str) -> None:
    with pytest.raises(ParamError, match=problem):
        export(spark, params, archive="unused")
