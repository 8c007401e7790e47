"""Settings of the job broker (``ZBUS_*`` environment variables or matching flags)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from zbus.broker.core.limits import (
    DAY,
    MAX_HEARTBEAT_INTERVAL,
    MAX_HEARTBEAT_MISSES,
    MAX_QUEUED,
    MAX_RETRIES,
    MAX_SECONDS,
)
from zbus.common.settings import ServiceSettings


class BrokerSettings(ServiceSettings):
    """The broker: ports, dialect, liveness, retries, storage."""

    client_port: int = Field(47291, ge=0, le=65535, description="ROUTER for clients")
    worker_port: int = Field(47290, ge=0, le=65535, description="ROUTER for workers")
    compat: Literal["spec", "eventmq"] = Field(
        "spec",
        description="'eventmq': also send eventmq's hand-off REPLY, heartbeat with the time, "
        "encode queue lists as JSON, and never DISCONNECT an uninformed jobmanager",
    )
    heartbeat_interval: float = Field(
        3.0, gt=0, le=MAX_HEARTBEAT_INTERVAL, description="seconds between HEARTBEATs"
    )
    heartbeat_misses: int = Field(
        2, ge=1, le=MAX_HEARTBEAT_MISSES, description="silent intervals before a worker is gone"
    )
    default_retries: int = Field(
        0, ge=0, le=MAX_RETRIES, description="retries of a job without retry-count"
    )
    backoff_base: float = Field(
        1.0, ge=0, le=MAX_SECONDS, description="first retry delay, doubling after"
    )
    backoff_max: float = Field(60.0, ge=0, le=MAX_SECONDS, description="longest retry delay")
    max_queued: int = Field(
        1_000_000, ge=1, le=MAX_QUEUED, description="unfinished jobs held at most"
    )
    result_ttl: float = Field(
        86_400.0, gt=0, le=3650 * DAY, description="seconds finished jobs are kept"
    )
    fsync: bool = Field(False, description="fsync every commit (survives power loss, slower)")
    batch_max: int = Field(
        2048, ge=1, le=100_000, description="messages taken per round (group commit)"
    )
