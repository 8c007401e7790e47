"""A real catalog in this process, and the info a test node registers with."""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

from tests.support.running import running_service
from zbus.catalog.server.config import CatalogSettings
from zbus.catalog.server.service import CatalogService
from zbus.common.clock import Clock


def running_catalog(
    data_dir: Path, clock: Clock | None = None, **settings: Any
) -> AbstractAsyncContextManager[CatalogService]:
    """A catalog on this loop, on ports it chose (port 0), without a beacon unless
    ``settings`` say otherwise, reading ``clock`` (the system's by default)."""
    service = CatalogService(
        CatalogSettings(
            **{"port": 0, "udp_port": 0, "beacon_port": 0, "data_dir": data_dir, **settings}
        ),
        clock=clock,
    )
    return running_service(service, "catalog start")


def node_info(name: str) -> dict[str, Any]:
    """A test node's registration info: ``name`` on 127.0.0.1, heartbeats every 0.1 s."""
    return {
        "name": name,
        "ip": "127.0.0.1",
        "port": 1,
        "function": "test",
        "heartbeat_interval": 0.1,
    }
