"""Turning what a job returned into its answer: JSON values as they are, tables written.

A table (:class:`~zbus.sparkworker.jobs.base.TableResult` or a plain DataFrame) is
written under the output path and summarised as ``{"output", "format", "rows",
"columns", "preview"}`` plus the job's own summary fields. Rows are counted while the
table is written (a Spark ``Observation``), not by a second pass.
"""

from __future__ import annotations

import base64
import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any, Final

from pyspark.sql import Column, DataFrame, Observation, Row, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import BinaryType, TimestampNTZType, TimestampType

from zbus.sparkworker.archive import local_or_uri, require_session_conf
from zbus.sparkworker.jobs.base import TableResult

__all__ = ["Materialised", "iso_micros", "jsonify", "materialise"]

_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
_ISO_LOCAL: Final = "yyyy-MM-dd'T'HH:mm:ss.SSSSSS"


@dataclass(frozen=True, slots=True)
class Materialised:
    """A job's answer: ``result`` (a JSON value), the path written, the rows counted."""

    result: Any
    output: str | None
    rows: int | None


def iso_utc(when: datetime) -> str:
    """An aware datetime as ISO-8601 in UTC with a ``Z``."""
    return when.astimezone(UTC).isoformat().replace("+00:00", "Z")


def iso_micros(micros: int | None) -> str | None:
    """Microseconds since the epoch as ISO-8601 UTC text (``None`` stays ``None``)."""
    return None if micros is None else iso_utc(_EPOCH + timedelta(microseconds=micros))


def jsonify(value: Any, where: str = "result") -> Any:
    """``value`` as JSON values: datetimes as ISO-8601 (UTC), bytes as base64, rows as
    objects, decimals as numbers, NaN and infinities as null.

    Raises:
        TypeError: a value of another type, naming where it is.
    """
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Row):
        return {k: jsonify(v, f"{where}.{k}") for k, v in value.asDict().items()}
    if isinstance(value, Mapping):
        out: dict[str, Any] = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise TypeError(f"{where}: object keys must be strings, got {key!r}")
            out[key] = jsonify(item, f"{where}.{key}")
        return out
    if isinstance(value, list | tuple):
        return [jsonify(item, f"{where}[{i}]") for i, item in enumerate(value)]
    if isinstance(value, datetime):
        # PySpark hands timestamps over as naive local times: astimezone reads them so.
        return iso_utc(value)
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, Decimal):
        return jsonify(float(value), where)
    if isinstance(value, bytes | bytearray):
        return base64.b64encode(value).decode()
    raise TypeError(f"{where}: {type(value).__name__} is not a JSON value: {value!r:.100}")


def materialise(
    spark: SparkSession, value: Any, *, default_path: str, where: str = "result"
) -> Materialised:
    """Write ``value`` when it is a table; otherwise check that it is a JSON value."""
    if isinstance(value, DataFrame):
        value = TableResult(value)
    if isinstance(value, TableResult):
        try:
            return _write(spark, value, default_path)
        finally:
            for frame in value.cached:
                frame.unpersist()
    result = jsonify(value, where)
    rows = result.get("rows") if isinstance(result, dict) else None
    return Materialised(result, None, rows if type(rows) is int else None)


def _preview(written: DataFrame, table: TableResult) -> list[dict[str, Any]]:
    """The first rows, converted by Spark where Python's view would depend on the
    process's time zone: timestamps travel as epoch microseconds."""
    columns: list[Column] = []
    stamps: list[str] = []
    for column in written.schema.fields:
        col = F.col(f"`{column.name}`")
        if isinstance(column.dataType, TimestampType):
            col = F.unix_micros(col)
            stamps.append(column.name)
        elif isinstance(column.dataType, TimestampNTZType):
            col = F.date_format(col, _ISO_LOCAL)
        elif isinstance(column.dataType, BinaryType):
            col = F.base64(col)
        columns.append(col.alias(column.name))
    ordered = written.orderBy(*table.order_by) if table.order_by else written
    rows = [row.asDict() for row in ordered.select(*columns).limit(table.preview).collect()]
    for row in rows:
        for name in stamps:
            row[name] = iso_micros(row[name])
    preview: list[dict[str, Any]] = jsonify(rows, "preview")
    return preview


def _write(spark: SparkSession, table: TableResult, default_path: str) -> Materialised:
    path = local_or_uri(table.path or default_path)
    require_session_conf(spark)  # timestamps written as microseconds, shown in UTC
    observation = Observation("zbus_rows")
    frame = table.frame.observe(observation, F.count(F.lit(1)).alias("rows"))
    # The default path belongs to this job id: a retry of the job (same id) replaces what
    # an earlier attempt left. A path the client chose is never overwritten.
    writer = frame.write.mode("errorifexists" if table.path else "overwrite")
    if table.format == "csv":
        writer.option("header", True).csv(path)
        written = spark.read.option("header", True).csv(path)
    elif table.format == "parquet":
        writer.parquet(path)
        written = spark.read.parquet(path)
    else:
        raise ValueError(f"format: expected parquet or csv, got {table.format!r}")
    rows = int(observation.get.get("rows", 0))
    result = {
        **jsonify(dict(table.summary), "summary"),
        "output": path,
        "format": table.format,
        "rows": rows,
        "columns": list(table.frame.columns),
        "preview": _preview(written, table) if table.preview > 0 and rows else [],
    }
    return Materialised(result, path, rows if table.processed is None else table.processed)
