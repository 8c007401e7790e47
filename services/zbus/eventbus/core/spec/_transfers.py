"""Spec snapshots (SYNC... SYNCEND) served in turns, so that none holds up another.

A SYNCSTART with sequence 0 asks for the state: the latest event of every matching
topic. With N > 0 (a client resuming) it asks for every matching event above N, as the
RFC says ("all events with sequence number above") and as the Node.js bus does: several
per topic when a topic changed several times (ADR 0002). Either can be long: the whole
state of a million topics, or a log of millions of events since N.

Each transfer reads from a connection of its own, in one read transaction (its read
point is SYNCEND's sequence, so SYNCs and SYNCEND agree whatever is published
meanwhile), lazily, as far as it has sent. The shell gives every transfer a turn of at
most ``TURN`` messages (:meth:`Transfers.tick`) and answers new requests between turns.
A transfer whose client's queue is full (its byte bound) keeps the messages it could
not send and sends them first at its next turn; what it keeps is one read's worth, at
most ``TURN`` events and ``read_bytes`` of data plus one event. One whose client reads
nothing for ``STALL_SECONDS`` is dropped. At most ``MAX_ACTIVE`` transfers read at once
(a connection each); up to ``MAX_WAITING`` more wait their turn; past that a request is
refused and counted (``busy``). A client has one transfer at a time: a new SYNCSTART
from it replaces the one under way (an RFC client asks once per connection, and one
that comes back with the same identity must not get the rest of its old answer first).

The states of a transfer and the inputs each takes (anything else is ignored):

============  ================================  ==========================================
state         input                             then
============  ================================  ==========================================
WAITING       admitted (a free place)           IDLE
WAITING       replaced, closed                  gone (nothing to close)
IDLE          turn, not opened yet              OPENING: OpenTransfer
IDLE          turn, messages kept               SENDING: SendTransfer of those
IDLE          turn                              READING: ReadTransfer
OPENING       opened(sequence)                  READING: ReadTransfer
READING       read(events, ended)               SENDING: SendTransfer (SYNCs, SYNCEND last)
READING       read(nothing, not ended)          IDLE (its turn ends)
SENDING       sent all, SYNCEND among them      gone: CloseTransfer
SENDING       sent all, turn not used up        READING: ReadTransfer
SENDING       sent all, turn used up            IDLE
SENDING       FULL after n                      IDLE, the rest kept
SENDING       GONE                              gone, aborted: CloseTransfer
OPENING,      failed(reason)                    gone, rejected(reason): CloseTransfer
READING
any but       replaced, closed                  gone (replaced: aborted): CloseTransfer
WAITING
IDLE          its turn ended, nothing sent for  gone, aborted, stalled: CloseTransfer
              more than STALL_SECONDS
============  ================================  ==========================================

A turn ends when every transfer in it is back to IDLE (or gone); the next one is due at
once when any of them sent something, else after a growing wait (``RETRY``).
"""

from __future__ import annotations

import enum
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

from zbus.common.protocols import eventbus as eb
from zbus.eventbus.core.log import Event
from zbus.eventbus.core.spec._actions import (
    CloseTransfer,
    OpenTransfer,
    Outputs,
    ReadTransfer,
    SendTransfer,
    Sent,
)

TURN = 256  # messages a transfer may send per turn
MAX_ACTIVE = 16  # transfers reading at once, each with its own read connection
MAX_WAITING = 1024
STALL_SECONDS = 30.0  # a spec client that reads nothing for this long loses its snapshot
RETRY = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05)  # waits between turns that sent nothing


class State(enum.Enum):
    """Where a transfer is (see the module docstring)."""

    WAITING = "waiting"
    IDLE = "idle"
    OPENING = "opening"
    READING = "reading"
    SENDING = "sending"


@dataclass(eq=False, slots=True)
class Transfer:
    """One spec snapshot under way."""

    id: int
    identity: bytes
    request: eb.SyncStart
    state: State = State.WAITING
    opened: bool = False  # an OpenTransfer was asked for: a CloseTransfer is owed
    sequence: int = 0  # SYNCEND's: the read point's last sequence
    kept: list[list[bytes]] | None = None  # messages a full queue refused, sent first
    sending: list[list[bytes]] | None = None  # the SendTransfer under way
    ending: bool = False  # SYNCEND is the last of ``sending`` or ``kept``
    progress_at: float = 0.0
    turn_sent: int = 0
    sent: int = 0


class Transfers:
    """The spec snapshots under way, and the turns that move them on."""

    def __init__(self, out: Outputs, dialect: eb.Dialect, read_bytes: int) -> None:
        """``read_bytes``: the data one read of a transfer takes, at most (one event more)."""
        self._out = out
        self._dialect = dialect
        self._read_bytes = read_bytes
        self._active: list[Transfer] = []
        self._waiting: deque[Transfer] = deque()
        self._of: dict[bytes, Transfer] = {}  # each client's transfer
        self._by_id: dict[int, Transfer] = {}
        self._next_id = 1
        self._turn: set[Transfer] = set()  # the transfers whose turn is under way
        self._progressed = False
        self._idle_turns = 0
        self._next_turn: float | None = None

    # ----------------------------------------------------------------- status
    @property
    def busy(self) -> bool:
        """Transfers are under way: the shell must give them turns."""
        return bool(self._active)

    def get(self, transfer: int) -> Transfer | None:
        """The transfer with this id, while it is under way."""
        return self._by_id.get(transfer)

    def of(self, identity: bytes) -> Transfer | None:
        """The client's transfer, if it has one."""
        return self._of.get(identity)

    def next_deadline(self) -> float | None:
        """When the next turn is due (None: no transfer is under way)."""
        return self._next_turn if self._active and not self._turn else None

    # ----------------------------------------------------------------- inputs
    def request(self, identity: bytes, cmd: eb.SyncStart, now: float) -> bool:
        """Queue a SYNCSTART, in place of the client's transfer under way if it has one;
        False when refused (too many waiting already)."""
        old = self._of.get(identity)
        if old is not None:
            self._out.count("aborted")
            self._finish(old, now)
        if len(self._waiting) >= MAX_WAITING:
            return False
        t = Transfer(self._next_id, identity, cmd)
        self._next_id += 1
        self._of[identity] = t
        self._by_id[t.id] = t
        self._out.count("snapshots", "spec-resume" if cmd.sequence else "spec")
        self._waiting.append(t)
        self._admit(now)
        return True

    def tick(self, now: float) -> None:
        """Start a turn when one is due: each active transfer asks for its next step."""
        if self._turn or not self._active:
            return
        if self._next_turn is not None and now < self._next_turn:
            return
        self._progressed = False
        for t in list(self._active):
            t.turn_sent = 0
            self._turn.add(t)
            self._step(t, now)

    def opened(self, transfer: int, sequence: int, now: float) -> None:
        """The transfer's read transaction started, at the log's ``sequence``."""
        t = self._in(transfer, State.OPENING)
        if t is not None:
            t.sequence = sequence
            self._step(t, now)

    def read(self, transfer: int, events: Sequence[Event], ended: bool, now: float) -> None:
        """The transfer's next events; ``ended`` when its read reached the end."""
        t = self._in(transfer, State.READING)
        if t is None:
            return
        encode, dialect = eb.encode, self._dialect
        messages = [
            encode(eb.Sync(e.topic, e.seq, e.producer, e.ts, e.uuid, e.data), dialect)
            for e in events
        ]
        if ended:
            messages.append(encode(eb.SyncEnd(t.request.subtrees, t.sequence), dialect))
            t.ending = True
        if not messages:
            self._end_turn(t, now)
            return
        self._send(t, messages)

    def sent(self, transfer: int, count: int, outcome: Sent, now: float) -> None:
        """The first ``count`` messages of the transfer's SendTransfer went out; the
        rest did not, because of ``outcome`` (OK: there is no rest)."""
        t = self._in(transfer, State.SENDING)
        if t is None:
            return
        messages = t.sending or []
        t.sending = None
        t.turn_sent += count
        if count:
            self._progressed = True
        if outcome is Sent.GONE:
            self._out.count("aborted")
            self._finish(t, now)
            return
        if outcome is Sent.FULL or count < len(messages):
            t.kept = messages[count:]
            self._end_turn(t, now)
            return
        if t.ending:
            self._progressed = True
            self._finish(t, now)
            return
        self._step(t, now)

    def failed(self, transfer: int, reason: str, now: float) -> None:
        """Opening or reading the transfer failed (``storage``, ``internal``)."""
        t = self._by_id.get(transfer)
        if t is None or t.state not in (State.OPENING, State.READING, State.SENDING):
            return
        self._out.count("rejected", reason)  # the shell logged it
        self._finish(t, now)

    def close(self, now: float) -> None:
        """Drop every transfer (the shell is stopping)."""
        for t in [*self._active, *self._waiting]:
            self._finish(t, now)

    # -------------------------------------------------------------- internals
    def _in(self, transfer: int, state: State) -> Transfer | None:
        t = self._by_id.get(transfer)
        return t if t is not None and t.state is state else None

    def _step(self, t: Transfer, now: float) -> None:
        """The transfer's next action within its turn."""
        if not t.opened:
            t.opened = True
            t.state = State.OPENING
            since = t.request.sequence
            self._out.emit(OpenTransfer(t.id, t.request.subtrees, since, since > 0))
        elif t.kept is not None:
            messages, t.kept = t.kept, None
            self._send(t, messages)
        elif t.turn_sent >= TURN:
            self._end_turn(t, now)
        else:
            t.state = State.READING
            self._out.emit(ReadTransfer(t.id, TURN - t.turn_sent, self._read_bytes))

    def _send(self, t: Transfer, messages: list[list[bytes]]) -> None:
        t.state = State.SENDING
        t.sending = messages
        self._out.emit(SendTransfer(t.id, t.identity, messages))

    def _end_turn(self, t: Transfer, now: float) -> None:
        t.state = State.IDLE
        if t.turn_sent:
            t.progress_at = now
            t.sent += t.turn_sent
        elif now - t.progress_at > STALL_SECONDS:
            self._out.count("aborted")
            self._out.out.stalled.append((t.identity, t.sent))
            self._finish(t, now)
            return
        self._left_turn(t, now)

    def _left_turn(self, t: Transfer, now: float) -> None:
        if t not in self._turn:
            return
        self._turn.discard(t)
        if self._turn:
            return
        if self._progressed:
            self._idle_turns = 0
            self._next_turn = now
        else:
            self._idle_turns += 1
            self._next_turn = now + RETRY[min(self._idle_turns, len(RETRY)) - 1]
        self._admit(now)  # a transfer admitted now has its first turn at once

    def _admit(self, now: float) -> None:
        admitted = False
        while self._waiting and len(self._active) < MAX_ACTIVE:
            t = self._waiting.popleft()
            t.state = State.IDLE
            t.progress_at = now  # the stall clock starts when its turns do
            self._active.append(t)
            admitted = True
        if admitted and not self._turn:
            self._next_turn = now  # a new transfer gets its first turn at once

    def _finish(self, t: Transfer, now: float) -> None:
        if t.state is State.WAITING:
            self._waiting.remove(t)
        else:
            self._active.remove(t)
        del self._by_id[t.id]
        if self._of.get(t.identity) is t:
            del self._of[t.identity]
        t.kept = t.sending = None
        if t.opened:
            self._out.emit(CloseTransfer(t.id))  # ends its read transaction
        self._left_turn(t, now)
