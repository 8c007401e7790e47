"""The SNAPSHOT door of the Event BUS, sans-I/O: requests in, actions out.

zbus clients get one page per ZB-SNAPSHOT request (ADR 0002), at most ``limit`` events
and ``page_bytes``, which bounds the server's memory whatever the snapshot size and the
client's speed. Spec clients get SYNC... SYNCEND, served in turns
(:mod:`zbus.eventbus.core.spec._transfers`) so that a long one holds up no other
request. A page that finds its client's queue full is dropped and counted (the client
asks again); a SYNC waits for its transfer's next turn.

The shell (:mod:`zbus.eventbus.server.snapshots`) feeds :meth:`SnapshotCore.receive`
every request the ROUTER reads, performs the actions :meth:`SnapshotCore.take` hands
back (sends, reads of the log, readers closed) and reports their results through the
other inputs; it calls :meth:`SnapshotCore.tick` once :meth:`SnapshotCore.next_deadline`
passes. ``now`` is monotonic seconds; the core reads no clock, socket or log.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from zbus.common.protocols import eventbus as eb
from zbus.common.protocols import eventbus_ext as ext
from zbus.common.protocols.errors import ProtocolError
from zbus.common.rejects import reject_reason
from zbus.eventbus.core.log import Event
from zbus.eventbus.core.spec._actions import (
    Action,
    OpenTransfer,
    Outputs,
    ReadLatest,
    ReadLog,
    ReadTransfer,
    Reply,
    SendTransfer,
    Sent,
    SnapshotOutput,
)
from zbus.eventbus.core.spec._transfers import Transfers

PAGE_HEADROOM = 8192  # a page's map, cursor and sequence around its events


@dataclass(frozen=True, slots=True)
class SnapshotLimits:
    """The sizes the SNAPSHOT door works to.

    Attributes:
        message_bytes: the largest message the door sends (a page, with its headroom).
        read_bytes: the data one read of a spec transfer takes, at most (one event more):
            what a transfer keeps when its client's queue is full.
    """

    message_bytes: int
    read_bytes: int

    @property
    def page_bytes(self) -> int:
        """The events of one page, at most (at least one event)."""
        return self.message_bytes - PAGE_HEADROOM


_STORAGE_DETAIL = {"storage": "storage failed", "internal": "internal error"}


class SnapshotCore:
    """Every SNAPSHOT request of one bus: pages, spec transfers, refusals."""

    def __init__(self, dialect: eb.Dialect, limits: SnapshotLimits) -> None:
        self.dialect = dialect
        self.limits = limits
        self._out = Outputs()
        self.transfers = Transfers(self._out, dialect, limits.read_bytes)

    @property
    def totals(self) -> dict[tuple[str, str], int]:
        """Every count since the core started, by (metric, label)."""
        return self._out.totals

    # ------------------------------------------------------------------ input
    def receive(self, identity: bytes, frames: Sequence[bytes], now: float) -> None:
        """Handle one request from ``identity`` (the frames after the identity)."""
        extension = bool(frames) and ext.is_extension(frames[0])
        try:
            if extension:
                self._page(identity, ext.decode_snapshot_request(frames))
            else:
                self._spec(identity, eb.decode_snapshot_request(frames, self.dialect), now)
        except ProtocolError as exc:
            self._out.refuse(identity, reject_reason(exc), str(exc))
            if extension:
                self._out.emit(Reply(identity, ext.encode(ext.Error(str(exc)))))
        except Exception as exc:  # a bug must cost one request, not the door
            self._out.refuse(identity, "internal", str(exc), exc)
            if extension:
                message = f"internal error: {exc}"
                self._out.emit(Reply(identity, ext.encode(ext.Error(message))))

    def page_read(
        self,
        identity: bytes,
        events: Sequence[Event],
        next_cursor: str | None,
        sequence: int,
        now: float,
    ) -> None:
        """A page the shell read for ``identity`` (ReadLatest or ReadLog): send it."""
        # An Event is the tuple (seq, topic, producer, ts, uuid, data): msgpack packs it
        # as the page's row, with no list built per event.
        self._out.emit(Reply(identity, ext.encode_page(events, next_cursor, sequence), page=True))

    def replied(self, reply: Reply, outcome: Sent) -> None:
        """A :class:`Reply` was not sent (``outcome`` FULL or GONE)."""
        if reply.page and outcome is Sent.FULL:
            self._out.count("overflows")  # dropped: the client asks again

    def transfer_opened(self, transfer: int, sequence: int, now: float) -> None:
        """An :class:`OpenTransfer` succeeded; ``sequence`` is its read point's."""
        self.transfers.opened(transfer, sequence, now)

    def transfer_read(
        self, transfer: int, events: Sequence[Event], ended: bool, now: float
    ) -> None:
        """A :class:`ReadTransfer`'s events; ``ended`` when the read reached the end."""
        self.transfers.read(transfer, events, ended, now)

    def transfer_sent(self, transfer: int, count: int, outcome: Sent, now: float) -> None:
        """A :class:`SendTransfer`: ``count`` messages went, then ``outcome``."""
        self.transfers.sent(transfer, count, outcome, now)

    def failed(self, action: Action, reason: str, detail: str, now: float) -> None:
        """Performing ``action`` failed: ``reason`` is ``storage`` (the log) or
        ``internal`` (a bug, which must cost one request, not the door)."""
        if isinstance(action, ReadLatest | ReadLog):
            self._out.count("rejected", reason)  # the shell logged it
            message = f"{_STORAGE_DETAIL.get(reason, reason)}: {detail}"
            self._out.emit(Reply(action.identity, ext.encode(ext.Error(message))))
        elif isinstance(action, OpenTransfer | ReadTransfer | SendTransfer):
            self.transfers.failed(action.transfer, reason, now)

    def next_deadline(self) -> float | None:
        """When :meth:`tick` has something to do next (None: nothing until a request)."""
        return self.transfers.next_deadline()

    def tick(self, now: float) -> None:
        """Give the spec transfers their turn when it is due."""
        self.transfers.tick(now)

    def close(self, now: float) -> None:
        """Drop every transfer: the door is stopping (their readers are closed)."""
        self.transfers.close(now)

    # ----------------------------------------------------------------- output
    def take(self) -> SnapshotOutput:
        """The actions, counts and refusals since the last call."""
        return self._out.take()

    # -------------------------------------------------------------- internals
    def _page(self, identity: bytes, q: ext.SnapshotQuery) -> None:
        self._out.count("snapshots", f"page-{q.mode}")
        limit, max_bytes = q.limit, self.limits.page_bytes
        if q.mode == "latest":
            self._out.emit(ReadLatest(identity, q.subtrees, q.since, q.after, limit, max_bytes))
        else:
            self._out.emit(ReadLog(identity, q.subtrees, ext.log_cursor(q), limit, max_bytes))

    def _spec(self, identity: bytes, cmd: eb.SyncStart, now: float) -> None:
        if not self.transfers.request(identity, cmd, now):
            self._out.refuse(identity, "busy", "too many spec snapshots under way")
