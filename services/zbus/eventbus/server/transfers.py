"""Spec snapshots (SYNC... SYNCEND) served in turns, so that none holds up another.

A SYNCSTART with sequence 0 asks for the state: the latest event of every matching
topic. With N > 0 (a client resuming) it asks for every matching event above N, as the
RFC says ("all events with sequence number above") and as the Node.js bus does: several
per topic when a topic changed several times (ADR 0002). Either can be long: the whole
state of a million topics, or a log of millions of events since N.

Each transfer reads from a connection of its own, in one read transaction (its read
point is SYNCEND's sequence, so SYNCs and SYNCEND agree whatever is published
meanwhile), lazily, as far as it has sent. The snapshot thread gives every transfer a
turn of at most ``TURN`` messages and answers new requests between turns; a transfer
whose client's queue is full (its byte bound) waits for the next turn with the message
it could not send, and one whose client reads nothing for ``STALL_SECONDS`` is dropped.
At most ``MAX_ACTIVE`` transfers read at once (a connection each); up to ``MAX_WAITING``
more wait their turn; past that a request is refused and counted (``busy``). A client
has one transfer at a time: a new SYNCSTART from it replaces the one under way (an RFC
client asks once per connection, and one that comes back with the same identity must
not get the rest of its old answer first).
"""

from __future__ import annotations

import enum
import logging
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from zbus.common.protocols import eventbus as eb
from zbus.eventbus.server.metrics import BusMetrics
from zbus.eventbus.server.records import EventLogReader, LoggedEvent
from zbus.eventbus.server.store import StoreError

log = logging.getLogger(__name__)

TURN = 256  # messages a transfer may send per turn
MAX_ACTIVE = 16  # transfers reading at once, each with its own read connection
MAX_WAITING = 1024
STALL_SECONDS = 30.0  # a spec client that reads nothing for this long loses its snapshot


class Sent(enum.Enum):
    """What became of a message handed to the socket."""

    OK = "ok"
    FULL = "full"  # the peer's queue is at its bound: try again later
    GONE = "gone"  # the peer is not connected any more


@dataclass
class _Transfer:
    identity: bytes
    request: eb.SyncStart
    reader: EventLogReader | None = None
    sequence: int = 0
    events: Iterator[LoggedEvent] | None = None
    held: list[bytes] | None = None  # the message a full queue refused, sent first
    progress_at: float = 0.0
    ended: bool = False  # SYNCEND is the held message (or was sent)
    sent: int = 0


class SpecTransfers:
    """The spec snapshots under way, and the turns that move them on."""

    def __init__(
        self,
        open_reader: Callable[[], EventLogReader],
        send: Callable[[bytes, list[bytes]], Sent],
        dialect: eb.Dialect,
        metrics: BusMetrics,
    ) -> None:
        self._open_reader = open_reader
        self._send = send
        self._dialect = dialect
        self._metrics = metrics
        self._active: list[_Transfer] = []
        self._waiting: deque[_Transfer] = deque()
        self._of: dict[bytes, _Transfer] = {}  # each client's transfer

    @property
    def busy(self) -> bool:
        """Transfers are under way: the thread must give them turns."""
        return bool(self._active)

    def request(self, identity: bytes, cmd: eb.SyncStart, now: float) -> bool:
        """Queue a SYNCSTART, in place of the client's transfer under way if it has one;
        False when refused (too many waiting already)."""
        old = self._of.get(identity)
        if old is not None:
            self._metrics.snapshot_aborted.inc()
            self._finish(old)
        if len(self._waiting) >= MAX_WAITING:
            return False
        t = _Transfer(identity, cmd)
        self._of[identity] = t
        self._metrics.snapshots.labels("spec-resume" if cmd.sequence else "spec").inc()
        self._waiting.append(t)
        self._admit(now)
        return True

    def turn(self, now: float) -> bool:
        """Give every active transfer a turn; True when any of them sent something."""
        progressed = False
        for t in list(self._active):
            try:
                progressed |= self._move(t, now)
            except StoreError as exc:
                self._metrics.rejected.labels("snapshot", "storage").inc()
                log.error("snapshot read failed", extra={"error": str(exc)})
                self._finish(t)
            except Exception:  # a bug must cost one snapshot, not the bus
                self._metrics.rejected.labels("snapshot", "internal").inc()
                log.exception("snapshot transfer failed", extra={"peer": t.identity.hex()})
                self._finish(t)
        self._admit(now)
        return progressed

    def close(self) -> None:
        for t in [*self._active, *self._waiting]:
            self._finish(t)

    # ------------------------------------------------------------------ internals
    def _admit(self, now: float) -> None:
        while self._waiting and len(self._active) < MAX_ACTIVE:
            t = self._waiting.popleft()
            t.progress_at = now  # the stall clock starts when its turns do
            self._active.append(t)

    def _move(self, t: _Transfer, now: float) -> bool:
        if t.events is None:
            t.reader = self._open_reader()
            since = t.request.sequence
            read = t.reader.resume if since else t.reader.snapshot
            t.sequence, t.events = read(t.request.subtrees, since)
        encode, dialect = eb.encode, self._dialect
        sent = 0
        while sent < TURN:
            frames = t.held
            if frames is None:
                e = next(t.events, None)
                if e is None:
                    frames = encode(eb.SyncEnd(t.request.subtrees, t.sequence), dialect)
                    t.ended = True
                else:
                    frames = encode(
                        eb.Sync(e.topic, e.seq, e.producer, e.ts, e.uuid, e.data), dialect
                    )
            outcome = self._send(t.identity, frames)
            if outcome is Sent.FULL:
                t.held = frames
                break
            if outcome is Sent.GONE:
                self._metrics.snapshot_aborted.inc()
                self._finish(t)
                return sent > 0
            t.held = None
            sent += 1
            if t.ended:
                self._finish(t)
                return True
        if sent:
            t.progress_at = now
            t.sent += sent
        elif now - t.progress_at > STALL_SECONDS:
            self._metrics.snapshot_aborted.inc()
            log.warning(
                "spec snapshot dropped: the client read nothing",
                extra={"peer": t.identity.hex(), "sent": t.sent, "seconds": STALL_SECONDS},
            )
            self._finish(t)
        return sent > 0

    def _finish(self, t: _Transfer) -> None:
        if t in self._active:
            self._active.remove(t)
        elif t in self._waiting:
            self._waiting.remove(t)
        else:
            return
        if self._of.get(t.identity) is t:
            del self._of[t.identity]
        if t.reader is not None:
            t.reader.close()  # ends its read transaction
            t.reader = None
