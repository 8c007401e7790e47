"""One SparkSession per test process (a JVM holds one SparkContext), local mode."""

from __future__ import annotations

import functools
import os
import sys

from pyspark.sql import SparkSession


@functools.cache
def local_session() -> SparkSession:
    """The process-wide test session: local[2], no UI, UTC, two shuffle partitions."""
    # Executors' Python workers must run this interpreter (the one with zbus installed).
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    return (
        SparkSession.builder.master("local[2]")
        .appName("zbus-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.optimizer.canChangeCachedPlanOutputPartitioning", "true")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
        .getOrCreate()
    )
