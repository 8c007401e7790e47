"""User jobs for the sparkworker's tests.

Registered as ``ZBUS_SPARK_JOBS=squares=tests.support.spark_jobs:squares,...``.
"""

from __future__ import annotations

import threading
from typing import Any

from pyspark.sql import DataFrame, SparkSession

from zbus.sparkworker.jobs import current_job


def squares(spark: SparkSession, params: dict[str, Any]) -> dict[str, Any]:
    """Sum of the squares of 0..n-1, computed by Spark."""
    n = int(params.get("n", 10))
    row = spark.range(n).selectExpr("sum(id * id) AS total").first()
    context = current_job()
    return {
        "n": n,
        "total": int(row["total"]) if row is not None and row["total"] is not None else 0,
        "job_id": None if context is None else context.job_id,
    }


def numbers(spark: SparkSession, params: dict[str, Any]) -> DataFrame:
    """A table of n numbers and their squares (written by the worker)."""
    return spark.range(int(params.get("n", 5))).selectExpr("id", "id * id AS square")


def broken(spark: SparkSession, params: dict[str, Any]) -> None:
    """A query Spark refuses: the column does not exist."""
    spark.range(3).selectExpr("no_such_column").collect()


def fails(spark: SparkSession, params: dict[str, Any]) -> None:
    """Raises what the client asked for."""
    raise RuntimeError(params.get("message", "failed on request"))


def stops_session(spark: SparkSession, params: dict[str, Any]) -> str:
    """Stops the session, which a job must never be able to take the worker down with."""
    spark.stop()
    return "stopped"


not_callable = 42


#: Opened by a test to let :func:`held` finish (the service runs in the test's process).
GATE = threading.Event()


def held(spark: SparkSession, params: dict[str, Any]) -> dict[str, Any]:
    """Runs a query, then waits until the test opens the gate."""
    spark.range(0, 1000, numPartitions=4).selectExpr("sum(id)").collect()
    if not GATE.wait(float(params.get("timeout", 60))):
        raise TimeoutError("the gate stayed closed")
    return {"released": True}


def bus_topics(spark: SparkSession, params: dict[str, Any]) -> dict[str, Any]:
    """Events per topic read from the live bus with the ``zbus`` data source."""
    reader = spark.read.format("zbus").option("endpoint", params["endpoint"])
    frame = reader.option("subtrees", params.get("subtrees", "")).load()
    counts = {row["topic"]: row["count"] for row in frame.groupBy("topic").count().collect()}
    return {"counts": counts}


def slow(spark: SparkSession, params: dict[str, Any]) -> int:
    """A Spark action that runs until it is cancelled (a filtered count of 10^13 rows)."""
    rows = spark.range(0, 10**13, numPartitions=1000).where("id % 7 = 3")
    row = rows.selectExpr("count(*) AS n").first()
    return 0 if row is None else int(row["n"])
