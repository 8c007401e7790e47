"""What a pipeline job is: ``(spark, params) -> result``, and the shapes of its result."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Literal, TypeAlias

from pyspark.sql import Column, DataFrame, SparkSession

__all__ = ["JobContext", "JobFunction", "TableResult", "current_job", "job_context"]

#: A pipeline job: the warm session and the parameters the client sent (a JSON object).
JobFunction: TypeAlias = Callable[[SparkSession, dict[str, Any]], Any]


@dataclass(frozen=True)
class TableResult:
    """A table a job produced: the worker writes it and answers with a summary.

    A job may return a plain :class:`DataFrame` instead: it is the same as
    ``TableResult(frame)``.

    Attributes:
        frame: the table.
        summary: fields added to the answer.
        format: ``"parquet"`` or ``"csv"`` (with a header line).
        path: where to write it (must not exist); default
            ``<output_path>/<job>/<job_id>`` (replaced when a retry of the job writes it).
        preview: rows of the written table put in the answer (at most).
        order_by: the order of the preview rows (column names or columns).
        processed: what ``zbus_spark_rows_processed_total`` counts for this job when not
            the rows written (e.g. the events a report read).
        cached: frames the job cached to build the table, unpersisted once it is written.
    """

    frame: DataFrame
    summary: Mapping[str, Any] = field(default_factory=dict)
    format: Literal["parquet", "csv"] = "parquet"
    path: str | None = None
    preview: int = 20
    order_by: Sequence[str | Column] = ()
    processed: int | None = None
    cached: Sequence[DataFrame] = ()


@dataclass(frozen=True, slots=True)
class JobContext:
    """The job running in the current thread, for jobs that need more than their params.

    Attributes:
        job_id: the broker's job id (the Spark job group of its work).
        job: the name it was submitted under.
        archive_path: the bus's archive (the worker's setting).
        output_path: where results are written (the worker's setting).
    """

    job_id: str
    job: str
    archive_path: str
    output_path: str


_local = threading.local()


def current_job() -> JobContext | None:
    """The context of the job running in this thread (``None`` outside a job)."""
    context: JobContext | None = getattr(_local, "context", None)
    return context


@contextmanager
def job_context(context: JobContext) -> Iterator[JobContext]:
    """Make ``context`` the current job's in this thread while the block runs."""
    previous = current_job()
    _local.context = context
    try:
        yield context
    finally:
        _local.context = previous
