"""Settings of the event bus (``ZBUS_*`` environment variables or matching flags)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from zbus.common.protocols.eventbus_limits import RECORD_OVERHEAD
from zbus.common.settings import ServiceSettings
from zbus.eventbus.core.flow import PeerBounds
from zbus.eventbus.core.mc0 import Mc0Limits, smallest_peer_bytes
from zbus.replication.settings import ReplicationSettings

MiB = 1024 * 1024


class EventBusSettings(ServiceSettings, ReplicationSettings):
    """The event bus: ports P..P+3, dialect, durability, retention, flow control."""

    port: int = Field(
        5556,
        ge=0,
        le=65532,
        description="SNAPSHOT port P; PUBLISHER is P+1, COLLECTOR P+2, "
        "STREAM P+3 unless set (0: every port chosen freely)",
    )
    publisher_port: int | None = Field(None, ge=0, le=65535)
    collector_port: int | None = Field(None, ge=0, le=65535)
    stream_port: int | None = Field(None, ge=0, le=65535)
    compat: Literal["spec", "node"] = Field(
        "spec",
        description="wire dialect of the spec ports: 'node' serves clients of the Node.js "
        "reference implementation (ASCII sequences, ',' subtree lists, no HUGZ)",
    )
    heartbeat_interval: float = Field(1.0, gt=0, description="seconds of silence before HUGZ")
    batch_max: int = Field(4096, ge=1, description="events committed per group commit, at most")
    batch_max_bytes: int = Field(
        16 * MiB,
        ge=64 * 1024,
        description="event data per group commit: the collector is drained up to this much",
    )
    max_batch_events: int = Field(10_000, ge=1, description="events in one ZB-PUB, at most")
    max_event_bytes: int = Field(
        MiB,
        ge=1024,
        le=64 * MiB,
        description="data of one event, at most: a PUB or ZB-PUB with a larger one is refused",
    )
    max_message_bytes: int = Field(
        8 * MiB,
        ge=64 * 1024,
        le=1024 * MiB,
        description="messages on the COLLECTOR, at most (ZeroMQ drops a larger one's peer)",
    )
    fsync: bool = Field(False, description="fsync every commit (survives power loss, slower)")
    stream_peer_bytes: int = Field(
        64 * MiB, ge=1, description="what one STREAM subscriber can make the bus hold"
    )
    publisher_peer_bytes: int = Field(
        64 * MiB, ge=1, description="what one PUBLISHER (spec) subscriber can make the bus hold"
    )
    snapshot_peer_bytes: int = Field(
        64 * MiB,
        ge=1,
        description="what one SNAPSHOT client can make the bus hold, requests and replies each",
    )
    collector_peer_bytes: int = Field(
        256 * MiB,
        ge=1,
        description="what one COLLECTOR peer can make the bus hold, requests and replies each",
    )
    retention_max_age: float | None = Field(
        None, gt=0, description="delete events older than this many seconds (latest per topic kept)"
    )
    retention_max_events: int | None = Field(
        None, ge=1, description="keep at most this many events (latest per topic kept)"
    )
    retention_interval: float = Field(60.0, gt=0, description="seconds between retention runs")
    archive: bool = Field(True, description="copy the log into Parquet files (docs/archive.md)")
    archive_path: str = Field(
        "",
        description="archive directory, or any URI pyarrow.fs opens (s3://, hdfs://, ...); "
        "empty: <data_dir>/archive",
    )
    archive_interval: float = Field(10.0, gt=0, description="seconds between archive flushes")
    archive_batch: int = Field(
        100_000,
        ge=1,
        description="flush early once this many events wait; at most this many per flush",
    )
    mc0_port: int | None = Field(
        None,
        ge=0,
        le=65535,
        description="the mc0 door's port (61616 in the local cluster and the containers); "
        "unset: no mc0 door; 0: any free port",
    )
    mc0_peer_bytes: int = Field(
        64 * MiB,
        ge=1,
        description="what one mc0 connection can make the bus hold, each way (docs/eventbus.md)",
    )

    pppp_port: int | None = Field(
        None,
        ge=0,
        le=65535,
        description="the PPPP door's port (5560 in the local cluster and the containers); "
        "unset: no PPPP door; 0: any free port",
    )
    pppp_first_idle: float = Field(
        0.1,
        ge=0.001,
        le=60,
        description="PPPP first idle time, seconds: a subscriber ACKs within it, and the "
        "first HEARTBEAT goes out after it",
    )
    pppp_idle: float = Field(
        1.0, ge=0.001, le=3600, description="PPPP idle time, seconds: HEARTBEAT every idle time"
    )
    pppp_misses: int = Field(
        4,
        ge=2,
        le=10,
        description="PPPP misses: a subscriber silent for misses x idle is disconnected; "
        "one that owes an ACK for misses x first idle gets its last message again",
    )
    pppp_grace: float = Field(
        300.0,
        ge=0,
        le=30 * 86400,
        description="PPPP grace period, seconds: a disconnected subscriber's positions are "
        "kept this long, then dropped (it gets a SYNC when it returns)",
    )
    pppp_window: int = Field(
        10_000,
        ge=1,
        le=1_000_000,
        description="PPPP messages sent and not ACKed, per subscriber and channel, at most",
    )
    pppp_peer_bytes: int = Field(
        64 * MiB,
        ge=1,
        description="PPPP bytes sent and not ACKed per subscriber and channel, at most; "
        "also bounds the subscriber's ZeroMQ queue",
    )
    pppp_cache_bytes: int = Field(
        64 * MiB,
        ge=MiB,
        le=64 * 1024 * MiB,
        description="PPPP recent-event cache, bytes (older messages are read from the log)",
    )
    pppp_max_channels: int = Field(
        64, ge=1, le=4096, description="PPPP channels one subscriber may hold, at most"
    )
    pppp_max_subscribers: int = Field(
        10_000, ge=1, le=1_000_000, description="PPPP subscribers the door serves, at most"
    )

    @model_validator(mode="after")
    def _derive_ports(self) -> EventBusSettings:
        base = self.port
        for offset, name in ((1, "publisher_port"), (2, "collector_port"), (3, "stream_port")):
            if getattr(self, name) is None:
                object.__setattr__(self, name, base + offset if base else 0)
        return self

    @model_validator(mode="after")
    def _check_bounds(self) -> EventBusSettings:
        problems = self.bounds().problems()
        smallest = self.max_event_bytes + RECORD_OVERHEAD + 1024
        if self.max_message_bytes < smallest:
            problems.append(
                f"max_message_bytes must be at least {smallest}: a ZB-PUB of one event of "
                "max_event_bytes must fit"
            )
        if problems:
            raise ValueError("; ".join(problems))
        return self

    def bounds(self) -> PeerBounds:
        """Every door's high-water marks and largest message (:mod:`zbus.eventbus.core.flow`)."""
        return PeerBounds.from_settings(
            max_event_bytes=self.max_event_bytes,
            max_message_bytes=self.max_message_bytes,
            max_batch_events=self.max_batch_events,
            stream_peer_bytes=self.stream_peer_bytes,
            publisher_peer_bytes=self.publisher_peer_bytes,
            snapshot_peer_bytes=self.snapshot_peer_bytes,
            collector_peer_bytes=self.collector_peer_bytes,
        )

    @model_validator(mode="after")
    def _check_mc0(self) -> EventBusSettings:
        if self.mc0_port is None:
            return self
        least = smallest_peer_bytes(self.mc0_limits())
        if self.mc0_peer_bytes < least:
            raise ValueError(
                f"mc0_peer_bytes must be at least {least}: four mc0 messages of the largest size"
            )
        return self

    @model_validator(mode="after")
    def _check_pppp(self) -> EventBusSettings:
        if self.pppp_port is None:
            return self
        problems = []
        if self.pppp_idle < self.pppp_first_idle:
            problems.append(
                f"pppp_idle ({self.pppp_idle:g} s) must be at least pppp_first_idle "
                f"({self.pppp_first_idle:g} s): the first idle time is the shorter one"
            )
        least = 2 * (self.max_event_bytes + RECORD_OVERHEAD + 1024)
        if self.pppp_peer_bytes < least:
            problems.append(
                f"pppp_peer_bytes must be at least {least}: two PPPP messages of the largest size"
            )
        if problems:
            raise ValueError("; ".join(problems))
        return self

    def mc0_limits(self) -> Mc0Limits:
        """The mc0 door's ranges: an event's data as on every door (max_event_bytes)."""
        return Mc0Limits(max_data_bytes=self.max_event_bytes)

    def archive_uri(self) -> str | None:
        """Where the archive goes (a local path or a URI), or None when it is off."""
        if not self.archive:
            return None
        return self.archive_path or str(self.data_dir / "archive")

    def ports(self) -> dict[str, int]:
        return {
            "snapshot": self.port,
            "publisher": self.publisher_port or 0,
            "collector": self.collector_port or 0,
            "stream": self.stream_port or 0,
        }
