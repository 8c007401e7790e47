"""The sparkworker's settings: defaults, Spark settings, user job specs, refusals."""

from __future__ import annotations

from pathlib import Path

import pytest

from zbus.common.settings import ConfigError
from zbus.sparkworker.config import SparkWorkerSettings, parse_spark_conf


def test_defaults(tmp_path: Path) -> None:
    settings = SparkWorkerSettings.load([], data_dir=tmp_path / "data" / "sparkworker")
    assert settings.admin_port == 8704
    assert settings.spark_queue == "spark"
    assert settings.concurrency == 2
    assert settings.spark_master == "local[*]"
    assert settings.broker_endpoint == "tcp://127.0.0.1:47290"
    assert settings.announce_topic == "/zbus/pipeline/results"
    # Beside the bus's default archive when both run from one state directory.
    assert settings.archive_uri() == str(tmp_path / "data" / "eventbus" / "archive")
    assert settings.output_uri() == str(tmp_path / "data" / "sparkworker" / "output")


def test_flags_and_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ZBUS_SPARK_MASTER", "spark://10.0.0.5:7077")
    monkeypatch.setenv("ZBUS_SPARK_CONF", "spark.executor.memory=2g")
    settings = SparkWorkerSettings.load(
        ["--archive-path", "s3a://bucket/archive", "--concurrency", "4", "--announce-topic", "x/"]
    )
    assert settings.spark_master == "spark://10.0.0.5:7077"
    assert settings.spark_conf_map() == {"spark.executor.memory": "2g"}
    assert settings.archive_uri() == "s3a://bucket/archive"
    assert settings.concurrency == 4
    assert settings.announce_topic == "x"


def test_spark_conf_lists_keep_their_commas() -> None:
    assert parse_spark_conf(
        "spark.jars=a.jar,b.jar, spark.sql.shuffle.partitions = 8,,spark.x=a=b"
    ) == {"spark.jars": "a.jar,b.jar", "spark.sql.shuffle.partitions": "8", "spark.x": "a=b"}
    assert parse_spark_conf("") == {}


@pytest.mark.parametrize(
    ("field", "value", "problem"),
    [
        ("spark_conf", "executor.memory=2g", "is not a Spark setting"),
        ("spark_conf", "a.jar,spark.x=1", "expected key=value"),
        ("spark_master", "lokal[2]", "expected local"),
        ("spark_jobs", "nightly", "expected name=module:function"),
        ("spark_jobs", "nightly=pkg.mod", "expected module:function"),
        ("spark_jobs", "bad name=pkg.mod:fn", "invalid job name"),
        ("concurrency", "0", "greater than or equal to 1"),
    ],
)
def test_bad_settings_are_named(field: str, value: str, problem: str) -> None:
    flag = "--" + field.replace("_", "-")
    with pytest.raises(ConfigError, match=f"{field}.*{problem}"):
        SparkWorkerSettings.load([flag, value])
