"""topic-stats on generated archives, checked against numbers computed here from the events."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession

from tests.support.archive import ArchivedEvent, make_events, write_archive
from tests.unit.sparkworker.conftest import START
from zbus.sparkworker.errors import ParamError
from zbus.sparkworker.jobs.results import materialise
from zbus.sparkworker.jobs.topic_stats import topic_stats


def expected(
    events: Sequence[ArchivedEvent],
    since: datetime | None = None,
    until: datetime | None = None,
    prefixes: Sequence[str] = (),
) -> tuple[dict[str, dict[str, Any]], float]:
    chosen = [
        e
        for e in events
        if (since is None or e.ts >= since)
        and (until is None or e.ts < until)
        and (not prefixes or any(e.topic.startswith(p) for p in prefixes))
    ]
    per_topic: dict[str, list[ArchivedEvent]] = defaultdict(list)
    for e in chosen:
        per_topic[e.topic].append(e)
    start = since or min(e.ts for e in chosen)
    end = until or max(e.ts for e in chosen)
    window = max(1.0, (end - start).total_seconds())
    stats = {
        topic: {
            "events": len(group),
            "bytes": sum(len(e.data) for e in group),
            "first_ts": min(e.ts for e in group),
            "last_ts": max(e.ts for e in group),
            "events_per_second": len(group) / window,
        }
        for topic, group in per_topic.items()
    }
    return stats, window


def run(spark: SparkSession, archive: Path, out: Path, **params: Any) -> dict[str, Any]:
    done = materialise(
        spark, topic_stats(spark, params, archive=str(archive)), default_path=str(out)
    )
    assert done.output == str(out)
    result: dict[str, Any] = done.result
    return result


def written(path: str) -> dict[str, dict[str, Any]]:
    rows = pq.read_table(path).to_pylist()
    return {r.pop("topic"): r for r in rows}


def check(result: dict[str, Any], stats: dict[str, dict[str, Any]], window: float) -> None:
    table = written(result["output"])
    assert table.keys() == stats.keys()
    for topic, want in stats.items():
        got = table[topic]
        assert (got["events"], got["bytes"]) == (want["events"], want["bytes"]), topic
        assert (got["first_ts"], got["last_ts"]) == (want["first_ts"], want["last_ts"]), topic
        assert got["events_per_second"] == pytest.approx(want["events_per_second"]), topic
    assert result["topics"] == len(stats)
    assert result["events"] == sum(s["events"] for s in stats.values())
    assert result["bytes"] == sum(s["bytes"] for s in stats.values())
    assert result["rows"] == len(stats)
    assert result["window"]["seconds"] == pytest.approx(window)
    assert result["columns"] == [
        "topic",
        "events",
        "bytes",
        "first_ts",
        "last_ts",
        "events_per_second",
    ]
    # The preview: topics by events, most first, ties by name.
    order = sorted(stats, key=lambda t: (-stats[t]["events"], t))
    assert [r["topic"] for r in result["preview"]] == order[:100]
    first = result["preview"][0]
    assert first["events"] == stats[order[0]]["events"]
    assert first["first_ts"] == stats[order[0]]["first_ts"].isoformat().replace("+00:00", "Z")


def test_everything(
    spark: SparkSession, archive: Path, events: list[ArchivedEvent], tmp_path: Path
) -> None:
    result = run(spark, archive, tmp_path / "out")
    stats, window = expected(events)
    check(result, stats, window)
    assert result["window"]["since"] == events[0].ts.isoformat().replace("+00:00", "Z")
    assert result["window"]["until"] == events[-1].ts.isoformat().replace("+00:00", "Z")


def test_a_file_above_the_archivers_mark_is_not_counted(
    spark: SparkSession, archive: Path, events: list[ArchivedEvent], tmp_path: Path
) -> None:
    # A flush that wrote its file and stopped before moving the mark: the bus rewrites
    # those events when it starts, so counting them now would count them twice later.
    write_archive(archive, make_events(50, ("sensors/temp",), START, first_seq=601))
    result = run(spark, archive, tmp_path / "out")
    stats, window = expected(events)
    check(result, stats, window)
    (archive / "_zbus_archive.json").write_text("{not json")
    with pytest.raises(ValueError, match="not an archive mark"):
        run(spark, archive, tmp_path / "out2")


def test_window_and_prefix(
    spark: SparkSession, archive: Path, events: list[ArchivedEvent], tmp_path: Path
) -> None:
    since = datetime(2024, 3, 10, 1, 30, tzinfo=UTC)
    until = datetime(2024, 3, 10, 20, 0, tzinfo=UTC)
    result = run(
        spark,
        archive,
        tmp_path / "out",
        since="2024-03-10T01:30:00Z",
        until=until.timestamp(),
        prefix="sensors/;orders/p",
    )
    stats, window = expected(events, since, until, ("sensors/", "orders/p"))
    assert set(stats) == {"sensors/temp", "sensors/humidity", "orders/paid"}
    check(result, stats, window)
    assert window == (until - since).total_seconds()
    assert result["prefixes"] == ["sensors/", "orders/p"]


def test_since_alone_runs_to_the_last_event(
    spark: SparkSession, archive: Path, events: list[ArchivedEvent], tmp_path: Path
) -> None:
    since = datetime(2024, 3, 10, 23, 0, tzinfo=UTC)
    result = run(spark, archive, tmp_path / "out", since=since.isoformat(), prefix=["logs/"])
    stats, window = expected(events, since, prefixes=("logs/",))
    check(result, stats, window)


def test_partitions_outside_the_window_are_not_read(
    spark: SparkSession, archive: Path, events: list[ArchivedEvent], tmp_path: Path
) -> None:
    # Not Parquet at all: reading this partition would fail the job.
    junk = archive / "date=2024-01-01"
    junk.mkdir()
    (junk / "part-00000000000000000000-00000000000000000000.parquet").write_bytes(b"junk")
    since = datetime(2024, 3, 10, tzinfo=UTC)
    result = run(spark, archive, tmp_path / "out", since=since.isoformat())
    check(result, *expected(events, since))


def test_nothing_selected(spark: SparkSession, archive: Path, tmp_path: Path) -> None:
    result = run(spark, archive, tmp_path / "a", prefix="nobody/")
    assert (result["topics"], result["events"], result["bytes"], result["rows"]) == (0, 0, 0, 0)
    assert result["window"] == {"since": None, "until": None, "seconds": 1.0}
    assert result["preview"] == []
    missing = run(spark, tmp_path / "no-archive", tmp_path / "b", since=0, until=3600)
    assert missing["events"] == 0
    assert missing["window"]["seconds"] == 3600.0


@pytest.mark.parametrize(
    ("params", "problem"),
    [
        ({"since": "tomorrow"}, "^since: expected ISO-8601"),
        ({"since": 100, "until": 50}, "^until: must be after since"),
        ({"prefix": 7}, "^prefix: "),
        ({"topic": "a"}, "^topic: unknown parameter of topic-stats"),
        ({"archive": ""}, "^archive: expected a non-empty string"),
    ],
)
def test_bad_params(spark: SparkSession, params: dict[str, Any], problem: str) -> None:
    with pytest.raises(ParamError, match=problem):
        topic_stats(spark, params, archive="unused")
