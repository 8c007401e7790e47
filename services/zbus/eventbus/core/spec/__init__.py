"""The Event BUS door's core, sans-I/O: the SNAPSHOT service (pages, spec transfers in
turns, refusals), the COLLECTOR's (events for the log, refusals, confirms) and the
PUBLISHER's (subscriptions, BROADCAST, HUGZ).

A core takes what arrived and the time, and hands back what to send, what to read and
its next deadline; a read of the log is an action its shell performs, whose result comes
back as an input. The shells are :mod:`zbus.eventbus.server.snapshots` and
:mod:`zbus.eventbus.server.pipeline`.
"""

from zbus.eventbus.core.spec._actions import (
    Action,
    CloseTransfer,
    OpenTransfer,
    ReadLatest,
    ReadLog,
    ReadTransfer,
    Refusal,
    Reply,
    SendTransfer,
    Sent,
    SnapshotOutput,
)
from zbus.eventbus.core.spec._collector import Confirm, SpecCollector
from zbus.eventbus.core.spec._publisher import (
    HeartbeatSchedule,
    SpecPublisher,
    Subscriptions,
    matches,
)
from zbus.eventbus.core.spec._snapshots import PAGE_HEADROOM, SnapshotCore, SnapshotLimits
from zbus.eventbus.core.spec._transfers import (
    MAX_ACTIVE,
    MAX_WAITING,
    RETRY,
    STALL_SECONDS,
    TURN,
    State,
    Transfer,
    Transfers,
)

__all__ = [
    "MAX_ACTIVE",
    "MAX_WAITING",
    "PAGE_HEADROOM",
    "RETRY",
    "STALL_SECONDS",
    "TURN",
    "Action",
    "CloseTransfer",
    "Confirm",
    "HeartbeatSchedule",
    "OpenTransfer",
    "ReadLatest",
    "ReadLog",
    "ReadTransfer",
    "Refusal",
    "Reply",
    "SendTransfer",
    "Sent",
    "SnapshotCore",
    "SnapshotLimits",
    "SnapshotOutput",
    "SpecCollector",
    "SpecPublisher",
    "State",
    "Subscriptions",
    "Transfer",
    "Transfers",
    "matches",
]
