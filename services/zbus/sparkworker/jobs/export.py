"""``export``: archived events under topic prefixes and in a window, as Parquet or CSV."""

from __future__ import annotations

from typing import Any, Final

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from zbus.sparkworker.archive import read_archive, require_session_conf
from zbus.sparkworker.jobs.base import TableResult
from zbus.sparkworker.params import (
    check_params,
    optional,
    parse_choice,
    parse_prefixes,
    parse_text,
    since_until,
)

__all__ = ["export"]

_PARAMS: Final = ("prefix", "since", "until", "format", "path", "archive")
_ISO: Final = "yyyy-MM-dd'T'HH:mm:ss.SSSSSSXXX"  # the session time zone is UTC: 'Z'


def export(spark: SparkSession, params: dict[str, Any], *, archive: str) -> TableResult:
    """Copy events out of the archive, in sequence order.

    Params: ``prefix`` (topic prefixes, a list or ';'-separated; default: every topic),
    ``since``, ``until`` (ISO-8601 or epoch seconds; ``since <= ts < until``),
    ``format`` (``parquet``, the default, or ``csv``: a header line, ``ts`` as ISO-8601
    UTC and ``data`` as base64), ``path`` (must not exist; default
    ``<output_path>/export/<job_id>``), ``archive`` (default: the worker's archive path).
    Columns: ``seq``, ``topic``, ``producer``, ``ts``, ``uuid``, ``data``.
    """
    check_params("export", params, _PARAMS)
    since, until = since_until(params)
    prefixes = optional(params, "prefix", parse_prefixes) or ()
    fmt = optional(params, "format", parse_choice(("parquet", "csv"))) or "parquet"
    path = optional(params, "path", parse_text)
    root = optional(params, "archive", parse_text) or archive
    require_session_conf(spark)  # UTC text in CSV, microsecond timestamps in Parquet

    events = read_archive(spark, root, since, until, prefixes).drop("date").orderBy("seq")
    if fmt == "csv":
        events = events.select(
            "seq",
            "topic",
            "producer",
            F.date_format("ts", _ISO).alias("ts"),
            "uuid",
            F.base64("data").alias("data"),
        )
    return TableResult(
        events,
        summary={
            "archive": root,
            "prefixes": list(prefixes),
            "since": None if since is None else since.isoformat(),
            "until": None if until is None else until.isoformat(),
        },
        format="csv" if fmt == "csv" else "parquet",
        path=path,
        preview=0,
    )
