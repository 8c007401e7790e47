"""``topic-stats``: per topic, how many events and bytes, when, and how fast."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any, Final

from pyspark import StorageLevel
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from zbus.sparkworker.archive import read_archive
from zbus.sparkworker.jobs.base import TableResult
from zbus.sparkworker.jobs.results import iso_micros
from zbus.sparkworker.params import (
    check_params,
    optional,
    parse_prefixes,
    parse_text,
    since_until,
)

__all__ = ["PREVIEW_TOPICS", "topic_stats"]

PREVIEW_TOPICS: Final = 100
_PARAMS: Final = ("since", "until", "prefix", "archive")
_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND: Final = timedelta(microseconds=1)


def topic_stats(spark: SparkSession, params: dict[str, Any], *, archive: str) -> TableResult:
    """Per-topic events, bytes, first/last timestamp and rate over a window.

    Params: ``since``, ``until`` (ISO-8601 or epoch seconds; ``since <= ts < until``;
    default: everything), ``prefix`` (topic prefixes; default: every topic), ``archive``
    (default: the worker's archive path). The window is ``since..until``; a bound not
    given is the first (last) timestamp among the selected events; it is at least one
    second. The table (one row per topic, ``events_per_second = events / window``) is
    written as Parquet; the answer has the totals and the top topics by events.
    """
    check_params("topic-stats", params, _PARAMS)
    since, until = since_until(params)
    prefixes = optional(params, "prefix", parse_prefixes) or ()
    root = optional(params, "archive", parse_text) or archive

    events = read_archive(spark, root, since, until, prefixes)
    # One scan of the archive: the per-topic rows are kept for the totals and the table.
    per_topic = (
        events.groupBy("topic")
        .agg(
            F.count(F.lit(1)).alias("events"),
            F.coalesce(F.sum(F.length("data")), F.lit(0)).cast("long").alias("bytes"),
            F.min("ts").alias("first_ts"),
            F.max("ts").alias("last_ts"),
        )
        .persist(StorageLevel.MEMORY_AND_DISK)
    )
    totals = per_topic.agg(
        F.count(F.lit(1)).alias("topics"),
        F.coalesce(F.sum("events"), F.lit(0)).alias("events"),
        F.coalesce(F.sum("bytes"), F.lit(0)).alias("bytes"),
        F.min(F.unix_micros("first_ts")).alias("first"),
        F.max(F.unix_micros("last_ts")).alias("last"),
    ).first()
    assert totals is not None  # an aggregate without grouping has one row
    first = totals["first"] if since is None else (since - _EPOCH) // _MICROSECOND
    last = totals["last"] if until is None else (until - _EPOCH) // _MICROSECOND
    window = 1.0 if first is None or last is None else max(1.0, (last - first) / 1e6)
    table = per_topic.select(
        "topic",
        "events",
        "bytes",
        "first_ts",
        "last_ts",
        (F.col("events") / F.lit(window)).alias("events_per_second"),
    )
    return TableResult(
        table,
        summary={
            "archive": root,
            "prefixes": list(prefixes),
            "topics": int(totals["topics"]),
            "events": int(totals["events"]),
            "bytes": int(totals["bytes"]),
            "window": {"since": iso_micros(first), "until": iso_micros(last), "seconds": window},
        },
        preview=PREVIEW_TOPICS,
        order_by=(F.desc("events"), F.asc("topic")),
        processed=int(totals["events"]),
        cached=(per_topic,),
    )
