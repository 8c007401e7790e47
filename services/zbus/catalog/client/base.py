"""The catalog node's parts without I/O: its errors, its states, its counters, the
reading of APPROVED's instructions and of the catalog's silence.

Apart from :mod:`zbus.catalog.client.node` (the sockets and the DBP dialog) because
these are what a caller of the node handles, catches or compares, and what can be
checked without a catalog; the node module re-exports the public names.
"""

from __future__ import annotations

import enum
import logging
import math
from collections.abc import Mapping
from types import TracebackType
from typing import Any, Final, Literal, Self

from zbus.common.protocols.dbp import (
    HEARTBEAT_INTERVAL_RANGE,
    HEARTBEAT_MISSES_RANGE,
    PORT_RANGE,
    Dialect,
    TimeEncoding,
)
from zbus.errors import ZbusError

__all__ = [
    "UDP_HEARTBEAT_KEY",
    "CatalogError",
    "CatalogReplyError",
    "CatalogUnavailable",
    "NodeState",
    "RegistrationDenied",
]

# The node library logs under its public module's name, whichever part logs.
log = logging.getLogger("zbus.catalog.client.node")

#: APPROVED configuration key naming the catalog's UDP heartbeat address: ``"host:port"``,
#: ``[host, port]`` or a bare port on the TCP endpoint's host.
UDP_HEARTBEAT_KEY: Final = "udp_heartbeat"


class StartStop:
    """``async with`` for what has ``start`` and ``stop``: started on entry, stopped on
    exit, whatever the block raised."""

    async def start(self) -> None:
        raise NotImplementedError

    async def stop(self) -> None:
        raise NotImplementedError

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()


class CatalogError(ZbusError):
    """Base class of the errors :class:`CatalogNode` raises."""


class RegistrationDenied(CatalogError):
    """The catalog answered REGISTRATION (or UPDATE) with DENIED."""

    def __init__(self, reasons: tuple[str, ...]) -> None:
        self.reasons = reasons
        super().__init__("catalog denied the registration: " + ("; ".join(reasons) or "no reason"))


class CatalogUnavailable(CatalogError):
    """The catalog did not answer in time, or the session ended while waiting."""


class CatalogReplyError(CatalogError, ValueError):
    """The catalog's answer to an info request is not DBP, or not in the shape of the
    request's dialect."""


class NodeState(enum.Enum):
    """Where a :class:`CatalogNode` is in its conversation with the catalog."""

    IDLE = "idle"
    REGISTERING = "registering"
    REGISTERED = "registered"
    DENIED = "denied"
    CLOSED = "closed"


#: The node's counters (``CatalogNode.counters``), every one present from the start.
COUNTERS: Final = (
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
    "info_requests",
    "malformed",  # frames that are not DBP, replies or instructions out of shape or range
    "unexpected",
)

#: Silence, in heartbeat intervals, after which UDP counts as having missed a beat.
FALLBACK_INTERVALS: Final = 1.5


def is_hermes(dialect: Dialect) -> bool:
    """Whether ``dialect`` writes Hermes's float32 time (the catalog's rule as well)."""
    return dialect.time_encoding is TimeEncoding.FLOAT32


def catalog_silence(
    silent: float, interval: float, misses: int, *, hermes: bool
) -> Literal["gone", "missed"] | None:
    """What ``silent`` seconds without a word from the catalog mean for the node.

    ``"gone"`` after ``interval * misses`` ("A peer MUST consider the other peer
    disconnected if no heartbeat arrives within some multiple of that interval"),
    ``"missed"`` after :data:`FALLBACK_INTERVALS` intervals (heartbeats then also go
    over TCP), else None. Always None in Hermes's dialect: Hermes's broker sends no
    heartbeats at all, so its silence says nothing.
    """
    if hermes:
        return None
    if silent >= interval * misses:
        return "gone"
    if silent >= interval * FALLBACK_INTERVALS:
        return "missed"
    return None


def _number(value: Any) -> bool:
    return type(value) in (int, float) and math.isfinite(value)


def read_instructions(config: Mapping[str, Any]) -> tuple[float | None, int | None, list[str]]:
    """APPROVED's ``heartbeat_interval`` and ``heartbeat_misses``, each None when absent
    or unusable, and what was unusable (a value out of its range is ignored, not
    trusted: the node keeps its own)."""
    problems = []
    interval = config.get("heartbeat_interval")
    lo, hi = HEARTBEAT_INTERVAL_RANGE
    if interval is not None and not (_number(interval) and lo <= interval <= hi):
        problems.append(f"heartbeat_interval must be {lo:g}-{hi:g} seconds, got {interval!r}")
        interval = None
    misses = config.get("heartbeat_misses")
    low, high = HEARTBEAT_MISSES_RANGE
    if misses is not None and not (type(misses) is int and low <= misses <= high):
        problems.append(f"heartbeat_misses must be an integer {low}-{high}, got {misses!r}")
        misses = None
    return (None if interval is None else float(interval)), misses, problems


def udp_target(endpoint: str, value: object) -> tuple[str, int] | None:
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
        # ASCII digits only, and few: int() refuses other digits and very long text.
        digits = text_port.isascii() and text_port.isdigit() and len(text_port) <= 5
        port = int(text_port) if digits else None
    elif isinstance(value, list | tuple) and len(value) == 2 and isinstance(value[0], str):
        host, port = value[0], value[1]
    if type(port) is int and PORT_RANGE[0] <= port <= PORT_RANGE[1]:
        return host, port
    if value is not None:
        log.warning("ignoring unusable %s in APPROVED: %r", UDP_HEARTBEAT_KEY, value)
    return None
