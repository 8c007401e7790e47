"""The cold baseline of the pipeline benchmark: one ``topic-stats`` job in a new Spark
application, the way a job runs without a warm worker.

``spark-submit --master local[2] tests/bench/cold_topic_stats.py ARCHIVE OUTPUT`` builds a
session with the sparkworker's session settings (its defaults, then ``ZBUS_SPARK_CONF``
when set, as the worker applies them), runs the job function the worker runs, writes and
summarises its table as the worker does (``materialise``), prints the summary as one
JSON line after ``RESULT``, stops the session and exits. The repository root must be on
``PYTHONPATH``.
"""

from __future__ import annotations

import json
import os
import sys

from pyspark.sql import SparkSession

from zbus.sparkworker.archive import SESSION_CONF
from zbus.sparkworker.config import parse_spark_conf
from zbus.sparkworker.jobs.results import materialise
from zbus.sparkworker.jobs.topic_stats import topic_stats
from zbus.sparkworker.session import DEFAULT_CONF

MARK = "RESULT "


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: cold_topic_stats.py ARCHIVE OUTPUT", file=sys.stderr)
        return 2
    archive, output = argv
    # The worker's settings, in its order (the master comes from spark-submit's --master).
    conf = {
        **DEFAULT_CONF,
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.driver.host": "127.0.0.1",
        **parse_spark_conf(os.environ.get("ZBUS_SPARK_CONF", "")),
        **SESSION_CONF,
    }
    builder = SparkSession.builder.appName("zbus-bench-cold-topic-stats")
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    try:
        value = topic_stats(spark, {"archive": archive}, archive=archive)
        done = materialise(spark, value, default_path=output, where="result of topic-stats")
    finally:
        spark.stop()
    print(MARK + json.dumps({"result": done.result, "output": done.output}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
