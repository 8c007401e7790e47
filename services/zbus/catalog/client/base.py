"""The catalog node's parts without I/O: its errors, its states, its counters and the
reading of the catalog's UDP heartbeat address.

Apart from :mod:`zbus.catalog.client.node` (the sockets and the DBP dialog) because
these are what a caller of the node handles, catches or compares, and what can be
checked without a catalog; the node module re-exports the public names.
"""

from __future__ import annotations

import enum
import logging
from typing import Final

from zbus.errors import ZbusError

__all__ = [
    "UDP_HEARTBEAT_KEY",
    "CatalogError",
    "CatalogUnavailable",
    "NodeState",
    "RegistrationDenied",
]

# The node library logs under its public module's name, whichever part logs.
log = logging.getLogger("zbus.catalog.client.node")

#: APPROVED configuration key naming the catalog's UDP heartbeat address: ``"host:port"``,
#: ``[host, port]`` or a bare port on the TCP endpoint's host.
UDP_HEARTBEAT_KEY: Final = "udp_heartbeat"


class CatalogError(ZbusError):
    """Base class of the errors :class:`CatalogNode` raises."""


class RegistrationDenied(CatalogError):
    """The catalog answered REGISTRATION (or UPDATE) with DENIED."""

    def __init__(self, reasons: tuple[str, ...]) -> None:
        self.reasons = reasons
        super().__init__("catalog denied the registration: " + ("; ".join(reasons) or "no reason"))


class CatalogUnavailable(CatalogError):
    """The catalog did not answer in time, or the session ended while waiting."""


class NodeState(enum.Enum):
    """Where a :class:`CatalogNode` is in its conversation with the catalog."""

    IDLE = "idle"
    REGISTERING = "registering"
    REGISTERED = "registered"
    DENIED = "denied"
    CLOSED = "closed"


_COUNTERS = (
    "registrations",
    "reregistrations",
    "registration_timeouts",
    "heartbeats_udp",
    "heartbeats_tcp",
    "heartbeats_received",
    "fallbacks_to_tcp",
    "returns_to_udp",
    "disconnects_received",
    "updates",
    "malformed",
    "unexpected",
)


def _udp_target(endpoint: str, value: object) -> tuple[str, int] | None:
    """The catalog's UDP heartbeat address from APPROVED's :data:`UDP_HEARTBEAT_KEY` value
    (``"host:port"``, ``[host, port]`` or a port on the host of the TCP ``endpoint``);
    None, with a warning when the value is there but unusable."""
    host = endpoint.rpartition("://")[2].rpartition(":")[0].strip("[]") or "127.0.0.1"
    if host == "*":
        host = "127.0.0.1"
    port: object = None
    if isinstance(value, int) and not isinstance(value, bool):
        port = value
    elif isinstance(value, str) and ":" in value:
        text_host, _, text_port = value.rpartition(":")
        host = text_host.strip("[]") or host
        port = int(text_port) if text_port.isdigit() else None
    elif isinstance(value, list | tuple) and len(value) == 2 and isinstance(value[0], str):
        host, port = value[0], value[1]
    if isinstance(port, int) and not isinstance(port, bool) and 0 < port <= 0xFFFF:
        return host, port
    if value is not None:
        log.warning("ignoring unusable %s in APPROVED: %r", UDP_HEARTBEAT_KEY, value)
    return None
