"""The catalog's data: node records, its configuration and what its core sends.

Shared by the sans-I/O core (:mod:`zbus.catalog.core.catalog`), the registry store
(:mod:`zbus.catalog.server.store`) and the wiring.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final, Literal, TypeAlias

from zbus.common.protocols.dbp import (
    HEARTBEAT_INTERVAL_RANGE,
    HEARTBEAT_MISSES_RANGE,
    PORT_RANGE,
    SPEC,
    DBPCommand,
    Dialect,
    JSONObject,
    TimeEncoding,
)

#: Liveness of a node (seed 004, "Heartbeating"):
#:
#: - ``active``: heard from within one heartbeat interval;
#: - ``late``: one interval passed without a command from it;
#: - ``inactive``: ``heartbeat_misses`` intervals passed ("consider the other peer
#:   disconnected if no heartbeat arrives within some multiple of that interval");
#: - ``gone``: expired (inactive for ``CatalogConfig.grace`` more seconds) or
#:   disconnected. A gone node is no longer in the core; its record is kept in the store.
NodeState: TypeAlias = Literal["active", "late", "inactive", "gone"]
NODE_STATES: Final[tuple[NodeState, ...]] = ("active", "late", "inactive", "gone")


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeRecord:
    """One registered node, as stored and as rebuilt after a restart.

    Attributes:
        name: the service name it registered with (unique among live nodes).
        identity: ROUTER identity of the connection it registered on.
        info: the REGISTRATION body with every UPDATE merged in.
        state: see :data:`NodeState`.
        registered_at: catalog time of the (last) approved REGISTRATION.
        last_heartbeat: catalog time of the last command from it (any command but
            DISCONNECT acts as a heartbeat, seed 004 "Heartbeating").
        heartbeat_interval: the interval the catalog told it to heartbeat at.
        address: ``host:port`` its last UDP heartbeat came from, or None.
        time_encoding: the time encoding it registered with; the catalog writes its own
            commands to the node in it (FLOAT32 means the Hermes dialect).
    """

    name: str
    identity: bytes
    info: JSONObject
    state: NodeState
    registered_at: float
    last_heartbeat: float
    heartbeat_interval: float
    address: str | None = None
    time_encoding: TimeEncoding = TimeEncoding.ASCII


#: Largest grace, in seconds, an inactive node is kept for (a day).
MAX_GRACE: Final = 86400.0
#: Most log records the catalog keeps per service (``ZBUS_LOG_WINDOW``).
MAX_LOG_WINDOW: Final = 100_000

#: The keys of ``CatalogCore.counters``; the wiring exports them as metrics.
COUNTERS: Final = (
    "registrations_approved",
    "registrations_denied_malformed",  # missing or badly typed service information
    "registrations_denied_name_taken",  # a live node of another identity has the name
    "registrations_denied_policy",  # name or CURVE key not in the allowed sets
    "updates",
    "updates_denied",  # an UPDATE that changes the name or is malformed (nothing kept)
    "updates_denied_policy",  # a Hermes UPDATE by name from a key other than the node's
    "info_requests",
    "heartbeats_tcp",
    "heartbeats_udp",
    "heartbeats_unknown",  # TCP: unknown identity; UDP: no live, confirmed node by that name
    "heartbeats_sent",
    "disconnects_received",
    "disconnects_sent",
    "unexpected_commands",  # valid DBP the catalog does not take from that peer
    "invalid_messages",  # frames that did not decode (reported by the wiring)
    "expiries",
)


@dataclass(frozen=True, slots=True)
class CatalogConfig:
    """Tunables and policy of the catalog core.

    Attributes:
        name: the service name in the catalog's own HEARTBEATs.
        heartbeat_interval: seconds between heartbeats, both ways; sent to every node in
            APPROVED, and the interval the node's liveness is judged by.
        heartbeat_misses: intervals of silence after which a node is inactive (the
            spec: "usually 3-5").
        grace: seconds an inactive node is kept before it expires.
        udp_port: the UDP heartbeat port, sent to nodes in APPROVED.
        allowed_names: service names that may register; None allows any.
        allowed_keys: CURVE public keys (32 raw bytes) that may register; None allows
            any peer, including one without a key.
    """

    name: str = "catalog"
    heartbeat_interval: float = 3.0
    heartbeat_misses: int = 3
    grace: float = 30.0
    udp_port: int = 5246
    allowed_names: frozenset[str] | None = None
    allowed_keys: frozenset[bytes] | None = field(default=None)

    def __post_init__(self) -> None:
        lo, hi = HEARTBEAT_INTERVAL_RANGE
        if not lo <= self.heartbeat_interval <= hi:  # NaN fails every comparison
            raise ValueError(
                f"CatalogConfig.heartbeat_interval: expected {lo:g}-{hi:g} seconds, "
                f"got {self.heartbeat_interval!r}"
            )
        low, high = HEARTBEAT_MISSES_RANGE
        if not low <= self.heartbeat_misses <= high:
            raise ValueError(
                f"CatalogConfig.heartbeat_misses: expected {low}-{high}, "
                f"got {self.heartbeat_misses!r}"
            )
        if not 0 <= self.grace <= MAX_GRACE:
            raise ValueError(
                f"CatalogConfig.grace: expected 0-{MAX_GRACE:g} seconds, got {self.grace!r}"
            )
        if not PORT_RANGE[0] <= self.udp_port <= PORT_RANGE[1]:
            raise ValueError(f"CatalogConfig.udp_port: expected 1-65535, got {self.udp_port!r}")


@dataclass(frozen=True, slots=True)
class Outgoing:
    """A command for the ROUTER to send to ``identity``, encoded with ``dialect``
    (``dbp.encode(command, dialect)``): HERMES for a peer that wrote float32 times, so
    that it also gets the ``OmO`` DENIED token and its empty body frames."""

    identity: bytes
    command: DBPCommand
    dialect: Dialect = SPEC
