"""Every zbus service registers itself with the catalog (DBP) when one is configured.

The node library (``zbus.catalog.client.node``) does the dialog: REGISTRATION with the
service's name, address, endpoints and admin URL; heartbeats (UDP, TCP when the
catalog's go missing); registering again after a DISCONNECT or a catalog restart; and
DISCONNECT when the service stops.
"""

from __future__ import annotations

import contextlib
import logging
import os
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlparse

from zbus.catalog.client.node import CatalogNode, RegistrationDenied
from zbus.common.clock import Clock
from zbus.common.security import CurveClient


class NodeSettings(Protocol):
    def registered_name(self, service: str) -> str: ...
    @property
    def host(self) -> str: ...
    @property
    def catalog_public_key(self) -> Path | None: ...


class RegisteredService(Protocol):
    """What registration needs of its service (``zbus.runtime.service.Service``)."""

    @property
    def name(self) -> str: ...
    @property
    def admin_url(self) -> str | None: ...
    @property
    def settings(self) -> NodeSettings: ...
    @property
    def clock(self) -> Clock: ...
    def info(self) -> dict[str, Any]: ...
    def curve_client(self, server_key: Path | None) -> CurveClient | None: ...


log = logging.getLogger(__name__)

HEARTBEAT_INTERVAL = 1.0


def name_taken(exc: RegistrationDenied) -> bool:
    """Whether the catalog denied the name because another live node holds it (its
    reason text, seed 004 leaving the reasons free): a state that passes once the
    catalog misses the holder's heartbeats, unlike a policy denial."""
    return any(reason.startswith("name taken") for reason in exc.reasons)


def node_info(service: RegisteredService) -> dict[str, Any]:
    """The REGISTRATION body: the spec's minimum fields plus zbus's endpoints."""
    endpoints = {k: v for k, v in service.info()["endpoints"].items() if v}
    first = next((v for k, v in endpoints.items() if k != "admin"), endpoints.get("admin", ""))
    parsed = urlparse(first.replace("tcp://", "http://", 1))
    return {
        "name": service.settings.registered_name(service.name),
        "ip": parsed.hostname or service.settings.host,
        "port": parsed.port or 0,
        "function": service.name,
        "heartbeat_interval": HEARTBEAT_INTERVAL,
        "endpoints": endpoints,
        "admin": service.admin_url,
        "pid": os.getpid(),
        "version": service.info()["version"],
    }


class CatalogRegistration:
    """The service's node in the catalog, kept alive for the service's lifetime."""

    def __init__(self, service: RegisteredService, endpoint: str) -> None:
        self.endpoint = endpoint
        self.node = CatalogNode(
            endpoint,
            node_info(service),
            heartbeat_interval=HEARTBEAT_INTERVAL,
            curve=service.curve_client(service.settings.catalog_public_key),
            clock=service.clock,
        )

    @property
    def registered(self) -> bool:
        return self.node.registered

    async def run(self) -> None:
        """Register (retrying until the catalog answers) and keep the node alive."""
        log.info("registering with the catalog", extra={"catalog": self.endpoint})
        await self.node.run()

    async def stop(self) -> None:
        with contextlib.suppress(Exception):  # leaving must never fail a shutdown
            await self.node.stop()
