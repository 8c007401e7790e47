"""Settings of the catalog (``ZBUS_*`` environment variables or matching flags)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field

from zbus.catalog.core.model import MAX_GRACE, MAX_LOG_WINDOW
from zbus.common.protocols.dbp import HEARTBEAT_INTERVAL_RANGE, HEARTBEAT_MISSES_RANGE
from zbus.common.settings import ServiceSettings

_BEAT_MIN, _BEAT_MAX = HEARTBEAT_INTERVAL_RANGE
_MISSES_MIN, _MISSES_MAX = HEARTBEAT_MISSES_RANGE


class CatalogSettings(ServiceSettings):
    """The catalog: DBP port, UDP heartbeats, liveness, policy."""

    port: int = Field(5246, ge=0, le=65535, description="DBP ROUTER (tcp)")
    udp_port: int = Field(5246, ge=0, le=65535, description="UDP heartbeats")
    heartbeat_interval: float = Field(
        3.0, ge=_BEAT_MIN, le=_BEAT_MAX, description="seconds between heartbeats (0.01-3600)"
    )
    heartbeat_misses: int = Field(
        3, ge=_MISSES_MIN, le=_MISSES_MAX, description="missed intervals before inactive (1-100)"
    )
    grace: float = Field(
        30.0, ge=0, le=MAX_GRACE, description="seconds an inactive node is kept (0-86400)"
    )
    beacon_port: int = Field(5245, ge=0, le=65535, description="UDP beacon port (0: no beacon)")
    beacon_addresses: str = Field(
        "",
        description="comma-separated addresses the beacon is sent to (empty: 127.0.0.1 when "
        "the catalog binds loopback, else the broadcast address 255.255.255.255)",
    )
    beacon_format: Literal["zbus", "shalom"] = Field(
        "zbus", description="'shalom': Hermes' 'SHALOM <port>' beacon instead of zbus's"
    )
    allowed_names: str = Field(
        "", description="comma-separated service names allowed to register (empty: any)"
    )
    # eventbus_endpoint (every service's setting) also turns on log aggregation here.
    log_window: int = Field(
        1000, ge=1, le=MAX_LOG_WINDOW, description="recent log records kept per service (1-100000)"
    )

    history_interval: float = Field(
        5.0,
        ge=0.5,
        le=60.0,
        description="seconds between the dashboard's samples of every service (0.5-60)",
    )
    launcher_state: Path | None = Field(
        None,
        description="the state file of the `zbus up` that runs this catalog (it sets it): "
        "restart counts and given-up services in /api/v1/cluster (unset: none)",
    )

    def beacon_targets(self) -> list[str]:
        given = [a.strip() for a in self.beacon_addresses.split(",") if a.strip()]
        if given:
            return given
        return ["127.0.0.1"] if self.host.startswith("127.") else ["255.255.255.255"]

    def allowed(self) -> frozenset[str] | None:
        names = frozenset(n.strip() for n in self.allowed_names.split(",") if n.strip())
        return names or None
