"""A replica's PPPP door in its group (ADR 0010): the group's PPPP state, kept in the log.

With replication on, only the leader's door serves PPPP. Its changes (checkpoints and
ACK positions) go into the log as events on :data:`~zbus.eventbus.core.pppp.STATE_TOPIC`
instead of into a file of its own; every replica's door, the leader's too, folds the
state events it reads from the stream (up to the high watermark, so nothing a failover
could undo) into ``pppp-group.sqlite``, with the sequence folded up to
(:class:`~zbus.eventbus.doors.pppp.positions.PpppGroupPositions`). Each replica's file is
thus the same function of the same log.

- **A new channel** is numbered from where the door stood, and sends nothing until its
  checkpoint comes back through the log (:meth:`~zbus.eventbus.core.pppp.PpppCore.settle`):
  once a subscriber has a message of it, every in-sync replica numbers it the same way.
- **A door that becomes leader** folds in the log up to the end its replica had when it
  was elected (everything the old leader confirmed), then loads its core from the file,
  as after a restart: subscribers known, each within the grace period, resumed from its
  ACK position.
- **One batch of state in flight**: changes are taken again only once the last batch
  was answered, and a batch refused or given up is handed back to the core, so that the
  log's order is the order of the changes.
- **A gap** (the stream dropped a batch, or the door started behind the log) is filled by
  reading the state events from the log.

This module is the bookkeeping; :class:`~zbus.eventbus.doors.pppp.door.PpppDoor` calls it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import msgpack

from zbus.common.protocols import eventbus_ext as ext
from zbus.common.protocols.errors import ProtocolError
from zbus.common.sqlite import StoreError
from zbus.eventbus.core.link import Outgoing
from zbus.eventbus.core.log import EventLogReader
from zbus.eventbus.core.pppp import (
    STATE_PRODUCER,
    STATE_TOPIC,
    Changes,
    PpppCore,
    StateDelta,
    StateError,
    decode_state,
    encode_state,
)
from zbus.eventbus.doors.pppp.positions import PpppGroupPositions

log = logging.getLogger(__name__)

STATE_BYTES = STATE_TOPIC.encode("utf-8")
CATCH_UP_PAGE = 1000  # state events read from the log at once
MAX_STATE_EVENT_BYTES = 256 * 1024


def stream_header(payload: bytes) -> tuple[int, int]:
    """A stream batch's first sequence and event count, without decoding its events."""
    unpacker = msgpack.Unpacker(raw=False)
    unpacker.feed(payload)
    try:
        unpacker.read_array_header()
        first = unpacker.unpack()
        count = unpacker.read_array_header()
    except (ValueError, msgpack.UnpackException):
        raise StateError("not a stream batch") from None
    if type(first) is not int:
        raise StateError("not a stream batch")
    return first, count


class GroupState:
    """The door's side of its group: the fold of the log's state events, who serves,
    and the state batch in flight."""

    def __init__(
        self,
        path: Path,
        *,
        fsync: bool,
        leading: Callable[[], tuple[int, int]],
        max_event_bytes: int,
    ) -> None:
        self.store = PpppGroupPositions(path, fsync=fsync)
        self.leading = leading
        self.max_bytes = max(1024, min(MAX_STATE_EVENT_BYTES, max_event_bytes - 1024))
        #: The log's sequence up to which state events are folded in (in memory: some
        #: of it waits in :attr:`pending` for the next write).
        self.applied = self.store.applied()
        self._stored_applied = self.applied
        self.pending = StateDelta()
        self.checkpoints = {name: (c, s) for name, c, s in self.store.channels()}
        self.behind = True  # read the log from ``applied`` before taking the stream
        self.serving = 0  # the epoch this door serves PPPP in (0: it does not)
        self.held: int | None = None  # the retention hold last handed out
        self.promoting: tuple[int, int] | None = None  # (epoch, log end to fold in first)
        self.in_flight: Changes | None = None
        self._answers_due = 0
        self._refused = False
        self.bad_events = 0
        self.not_leader = 0  # messages from subscribers dropped: this door does not serve

    def close(self) -> None:
        self.store.close()

    # ------------------------------------------------------------- the stream
    def stream(self, messages: Iterable[list[bytes]], core: PpppCore | None) -> None:
        """Stream messages as they came: folded in, and handed to ``core`` when this
        door serves. A batch is decoded only for a serving core or when it holds a
        state event; the others are counted by their header."""
        for frames in messages:
            try:
                raw = len(frames) == 2 and frames[0] == ext.STREAM_BATCH
                if raw and core is None and STATE_BYTES not in frames[1]:
                    self.skipped(*stream_header(frames[1]))
                    continue
                got = ext.decode_stream_fast(frames)
            except (ProtocolError, StateError) as exc:
                log.error("pppp door: unreadable stream batch", extra={"error": str(exc)})
                continue
            if isinstance(got, int):  # a heartbeat: the log's last sequence
                self.heard(got)
                if core is not None:
                    core.log_at(got)
                continue
            first, rows = got
            self.rows(first, rows)
            if core is not None and rows:
                core.add_events(first, rows)

    def skipped(self, first: int, count: int) -> None:
        """A stream batch with no state event in it."""
        if self._follows(first, first + count - 1):
            self.applied = first + count - 1

    def rows(self, first: int, rows: Sequence[Sequence[Any]]) -> None:
        """A decoded stream batch (rows as the stream carries them)."""
        last = first + len(rows) - 1
        if not self._follows(first, last):
            return
        for offset in range(self.applied + 1 - first, len(rows)):
            row = rows[offset]
            if row[0] == STATE_TOPIC:
                self._fold(first + offset, row[1], row[4])
        self.applied = last

    def heard(self, last: int) -> None:
        """A stream heartbeat: the log's last sequence is ``last``."""
        if last > self.applied and not self.behind:
            self.behind = True  # events came that the door did not see

    def _follows(self, first: int, last: int) -> bool:
        """True when the batch ``first..last`` brings what follows :attr:`applied`; a
        batch past it leaves a gap, to be read from the log."""
        if self.behind or last <= self.applied:
            return False
        if first > self.applied + 1:
            self.behind = True
            return False
        return True

    def _fold(self, seq: int, producer: str, data: bytes) -> None:
        if producer != STATE_PRODUCER:
            self.bad_events += 1
            log.error("pppp state event from another producer ignored", extra={"seq": seq})
            return
        try:
            delta = decode_state(data)
        except StateError as exc:
            self.bad_events += 1
            log.error("pppp state event ignored", extra={"seq": seq, "error": str(exc)})
            return
        self.pending.update(delta)

    def catch_up(self, reader: EventLogReader) -> None:
        """Fold in the state events of the log above :attr:`applied`, up to its end."""
        try:
            for _ in range(100):  # bounded per turn of the door's loop
                page = reader.log_page((STATE_TOPIC,), self.applied, CATCH_UP_PAGE)
                for event in page.events:
                    if event.topic == STATE_TOPIC:
                        self._fold(event.seq, event.producer, event.data)
                    self.applied = max(self.applied, event.seq)
                if page.next is None:
                    self.applied = max(self.applied, page.sequence)
                    self.behind = False
                    return
        except StoreError as exc:
            log.warning("pppp door: reading the group's state failed", extra={"error": str(exc)})

    # --------------------------------------------------------------- storing
    def write(self, core: PpppCore | None) -> StateDelta | None:
        """Store what was folded in, and settle what it names in a serving ``core``;
        returns it (None: nothing new, or the write failed and is tried again)."""
        if not self.pending and self.applied == self._stored_applied:
            return None
        delta = self.pending
        try:
            self.store.apply(delta, self.applied)
        except StoreError as exc:
            log.error("pppp door: storing the group's state failed", extra={"error": str(exc)})
            return None
        self.pending, self._stored_applied = StateDelta(), self.applied
        for name, value in delta.checkpoints.items():
            if value is None:
                self.checkpoints.pop(name, None)
            else:
                self.checkpoints[name] = value
                if core is not None:
                    core.settle(name, value)
        if core is not None:
            for (identity, name), acked in delta.positions.items():
                if acked is not None:
                    core.settle_position(identity, name, acked)
        return delta

    def new_hold(self, core: PpppCore | None) -> int | None:
        """What retention must keep now, when that changed since the last call: every
        state event not folded in, every stored checkpoint and, while serving, every
        checkpoint of the core."""
        lowest = min(self.checkpoints.values(), key=lambda c: c[1], default=None)
        hold = self.applied if lowest is None else min(self.applied, lowest[1])
        if core is not None:
            held = core.channels.lowest_checkpoint()
            if held is not None:
                hold = min(hold, held)
        if hold == self.held:
            return None
        self.held = hold
        return hold

    # ------------------------------------------------------------ publishing
    def state_events(self, core: PpppCore) -> tuple[Changes, list[Outgoing]] | None:
        """The core's changes as state events to publish, unless a batch is in flight
        or nothing changed."""
        if self.in_flight is not None:
            return None
        changes = core.take_changes()
        if not changes:
            return None
        data = encode_state(changes.checkpoints, changes.positions, self.max_bytes)
        return changes, [Outgoing(STATE_TOPIC, STATE_PRODUCER, d) for d in data]

    def sent(self, changes: Changes, events: int) -> None:
        self.in_flight, self._answers_due, self._refused = changes, events, False

    def answered(self, count: int, refused: bool, core: PpppCore) -> None:
        """``count`` state events answered; once every one of the batch is, a batch not
        wholly stored goes back to the core, to be sent again."""
        if self.in_flight is None:
            return
        self._answers_due -= count
        self._refused = self._refused or refused
        if self._answers_due <= 0:
            if self._refused:
                core.restore(self.in_flight)
            self.in_flight = None

    # --------------------------------------------------------------- leading
    def role_change(self) -> str | None:
        """``"promote"`` when this door may start serving now, ``"demote"`` when it must
        stop, else None. Called at each turn; reads who leads."""
        epoch, log_end = self.leading()
        if self.serving and epoch != self.serving:
            self.serving, self.promoting, self.in_flight = 0, None, None
            return "demote"
        if not epoch or self.serving:
            self.promoting = None
            return None
        if self.promoting is None or self.promoting[0] != epoch:
            self.promoting = (epoch, log_end)
        if self.behind or self.applied < self.promoting[1]:
            return None
        self.serving, self.promoting = epoch, None
        return "promote"


__all__ = ["GroupState", "stream_header"]
