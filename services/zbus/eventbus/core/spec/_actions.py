"""What the Event BUS snapshot core asks its shell to do, and what the shell reports back.

Every action is a value: the shell performs it (a send, a read of the log, a reader
closed) and hands the result to the core as an input. The log's events come back as
:class:`~zbus.eventbus.core.log.Event` values; the core reads their fields and
never the log.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import TypeAlias


class Sent(enum.Enum):
    """What became of a message handed to the socket."""

    OK = "ok"
    FULL = "full"  # the peer's queue is at its bound: try again later
    GONE = "gone"  # the peer is not connected any more


@dataclass(frozen=True, slots=True)
class Reply:
    """Send one message to one client; ``page`` when it is a ZB-SNAPSHOT page (a page
    that finds the client's queue full is dropped and counted: the client asks again)."""

    identity: bytes
    frames: list[bytes]
    page: bool = False


@dataclass(frozen=True, slots=True)
class ReadLatest:
    """Read one page of the latest event of each matching topic (ZB-SNAPSHOT "latest")."""

    identity: bytes
    subtrees: tuple[str, ...]
    since: int
    after: str | None
    limit: int
    max_bytes: int


@dataclass(frozen=True, slots=True)
class ReadLog:
    """Read one page of every matching event above ``after_seq`` (ZB-SNAPSHOT "log")."""

    identity: bytes
    subtrees: tuple[str, ...]
    after_seq: int
    limit: int
    max_bytes: int


@dataclass(frozen=True, slots=True)
class OpenTransfer:
    """Open a read connection for a spec transfer and start its one read transaction:
    every matching event above ``since`` when ``resume``, else each topic's latest."""

    transfer: int
    subtrees: tuple[str, ...]
    since: int
    resume: bool


@dataclass(frozen=True, slots=True)
class ReadTransfer:
    """Take the transfer's next events: ``limit`` at most, and stop once they hold
    ``max_bytes`` of data (at least one event)."""

    transfer: int
    limit: int
    max_bytes: int


@dataclass(frozen=True, slots=True)
class SendTransfer:
    """Send ``messages`` to the transfer's client in order, up to the first that is
    not sent; report how many went and what stopped the rest."""

    transfer: int
    identity: bytes
    messages: list[list[bytes]]


@dataclass(frozen=True, slots=True)
class CloseTransfer:
    """Close the transfer's read connection (which ends its read transaction)."""

    transfer: int


Action: TypeAlias = (
    Reply | ReadLatest | ReadLog | OpenTransfer | ReadTransfer | SendTransfer | CloseTransfer
)


@dataclass(frozen=True, slots=True)
class Refusal:
    """A request refused: counted by ``reason``; the shell logs ``detail`` (and the
    traceback of ``error``, a bug's exception, when there is one) and sends ``reply``
    back when there is one."""

    identity: bytes
    reason: str
    detail: str
    error: Exception | None = None
    reply: list[bytes] | None = None


@dataclass(slots=True)
class SnapshotOutput:
    """What the core handed back since the last :meth:`take`.

    Attributes:
        actions: to perform in order; some report back to the core.
        counts: increments of the snapshot metrics, by (metric, label): ``snapshots``
            by kind, ``rejected`` by reason, ``overflows`` and ``aborted`` (label "").
        refusals: requests refused, to log.
        stalled: (identity, messages sent) of the spec transfers dropped because their
            client read nothing, to log.
    """

    actions: list[Action] = field(default_factory=list)
    counts: dict[tuple[str, str], int] = field(default_factory=dict)
    refusals: list[Refusal] = field(default_factory=list)
    stalled: list[tuple[bytes, int]] = field(default_factory=list)


class Outputs:
    """The output under construction, shared by the parts of the core."""

    def __init__(self) -> None:
        self.out = SnapshotOutput()
        #: Every count since the core started (for tests and status).
        self.totals: dict[tuple[str, str], int] = {}

    def emit(self, action: Action) -> None:
        self.out.actions.append(action)

    def count(self, metric: str, label: str = "", n: int = 1) -> None:
        key = (metric, label)
        self.out.counts[key] = self.out.counts.get(key, 0) + n
        self.totals[key] = self.totals.get(key, 0) + n

    def refuse(
        self, identity: bytes, reason: str, detail: str, error: Exception | None = None
    ) -> None:
        self.count("rejected", reason)
        self.out.refusals.append(Refusal(identity, reason, detail, error))

    def take(self) -> SnapshotOutput:
        out, self.out = self.out, SnapshotOutput()
        return out
