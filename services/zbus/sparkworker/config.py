"""Settings of the sparkworker (``ZBUS_*`` environment variables or matching flags)."""

from __future__ import annotations

import re
from typing import Final

from pydantic import Field, field_validator

from zbus.broker.client.worker import DEFAULT_ENDPOINT
from zbus.common.settings import ServiceSettings
from zbus.sparkworker.jobs.registry import parse_job_specs

__all__ = ["SparkWorkerSettings", "parse_spark_conf"]

_CONF_KEY: Final = re.compile(r"spark\.[A-Za-z0-9_.\-]+")
_MASTERS: Final = ("local", "spark://", "k8s://", "yarn", "mesos://")


def parse_spark_conf(text: str) -> dict[str, str]:
    """``"key=value,key=value"`` as a dict, in order.

    An item without ``=`` continues the value before it, so list values keep their
    commas: ``spark.jars=a.jar,b.jar`` is one setting. Keys are Spark's (``spark.*``;
    Hadoop's as ``spark.hadoop.*``).

    Raises:
        ValueError: a key that is not ``spark.*``, or a list that starts without ``=``.
    """
    conf: dict[str, str] = {}
    last: str | None = None
    for raw in text.split(","):
        item = raw.strip()
        if not item:
            continue
        key, sep, value = item.partition("=")
        if not sep:
            if last is None:
                raise ValueError(f"expected key=value, got {item!r}")
            conf[last] = f"{conf[last]},{item}"
            continue
        key = key.strip()
        if not _CONF_KEY.fullmatch(key):
            raise ValueError(f"{key!r} is not a Spark setting (spark.*)")
        conf[key] = value.strip()
        last = key
    return conf


class SparkWorkerSettings(ServiceSettings):
    """The sparkworker: its broker and queue, its Spark session, its jobs and outputs."""

    admin_port: int = Field(8704, ge=0, le=65535, description="admin HTTP port (0: any)")
    shutdown_timeout: float = Field(
        30.0, gt=0, le=3600, description="seconds a shutdown waits for running jobs, then forces"
    )
    broker_endpoint: str = Field(DEFAULT_ENDPOINT, description="the broker's worker port")
    spark_queue: str = Field(
        "spark", min_length=1, max_length=256, description="the queue jobs come from"
    )
    concurrency: int = Field(2, ge=1, le=256, description="jobs run at once")
    heartbeat_interval: float = Field(3.0, gt=0, le=3600, description="seconds between heartbeats")
    heartbeat_misses: int = Field(
        3, ge=1, le=100, description="silent intervals before reconnecting"
    )
    spark_master: str = Field(
        "local[*]", description="local[N], spark://host:port (standalone) or k8s://https://..."
    )
    spark_conf: str = Field(
        "", description="comma-separated spark.key=value settings of the session"
    )
    spark_app_name: str = Field("zbus-sparkworker", min_length=1, description="Spark app name")
    archive_path: str = Field(
        "",
        description="the event bus's archive (a path or a URI Spark reads); "
        "empty: <data_dir>/../eventbus/archive, the bus's default beside this service's",
    )
    output_path: str = Field(
        "", description="where job results are written; empty: <data_dir>/output"
    )
    spark_jobs: str = Field("", description="comma-separated name=module:function user jobs")
    announce_topic: str = Field(
        "/zbus/pipeline/results",
        min_length=1,
        description="results go to <topic>/<job>, progress to <topic>/<job>/progress",
    )
    announce_progress: bool = Field(True, description="publish progress events as well")
    progress_interval: float = Field(
        0.5, gt=0, description="seconds between looks at running jobs' Spark progress"
    )
    job_history: int = Field(100, ge=0, description="finished jobs the admin API lists")

    @field_validator("spark_conf")
    @classmethod
    def _spark_conf(cls, value: str) -> str:
        parse_spark_conf(value)
        return value

    @field_validator("spark_jobs")
    @classmethod
    def _spark_jobs(cls, value: str) -> str:
        parse_job_specs(value)
        return value

    @field_validator("spark_master")
    @classmethod
    def _spark_master(cls, value: str) -> str:
        value = value.strip()
        if not value.startswith(_MASTERS):
            raise ValueError("expected local[N], spark://host:port, k8s://..., yarn or mesos://...")
        return value

    @field_validator("announce_topic")
    @classmethod
    def _announce_topic(cls, value: str) -> str:
        value = value.rstrip("/")
        if not value or value.startswith("\0"):
            raise ValueError("expected a topic prefix")
        return value

    def archive_uri(self) -> str:
        """The archive: ``archive_path``, or the bus's default beside this data dir."""
        return self.archive_path or str(self.data_dir.parent / "eventbus" / "archive")

    def output_uri(self) -> str:
        """Where results go: ``output_path`` or ``<data_dir>/output``."""
        return self.output_path or str(self.data_dir / "output")

    def spark_conf_map(self) -> dict[str, str]:
        return parse_spark_conf(self.spark_conf)
