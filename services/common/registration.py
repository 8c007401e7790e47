"""Every zbus service registers itself with the catalog (DBP) when one is configured.

The node library (``services.catalog.client``) does the dialog: REGISTRATION with the
service's name, address, endpoints and admin URL; heartbeats (UDP, TCP when the
catalog's go missing); registering again after a DISCONNECT or a catalog restart; and
DISCONNECT when the service stops.
"""

from __future__ import annotations

import contextlib
import logging
import os
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

from services.catalog.client import CatalogNode

if TYPE_CHECKING:
    from services.common.service import Service

log = logging.getLogger(__name__)

HEARTBEAT_INTERVAL = 1.0


def node_info(service: Service) -> dict[str, Any]:
    """The REGISTRATION body: the spec's minimum fields plus zbus's endpoints."""
    endpoints = {k: v for k, v in service.info()["endpoints"].items() if v}
    first = next((v for k, v in endpoints.items() if k != "admin"), endpoints.get("admin", ""))
    parsed = urlparse(first.replace("tcp://", "http://", 1))
    return {
        "name": service.settings.node_name or service.name,
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

    def __init__(self, service: Service, endpoint: str) -> None:
        self.endpoint = endpoint
        self.node = CatalogNode(
            endpoint,
            node_info(service),
            heartbeat_interval=HEARTBEAT_INTERVAL,
            curve=service.curve_client(service.settings.catalog_public_key),
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
