"""The sans-I/O core of a subscription over the plain Event BUS protocol (no zbus extensions).

What a client of the RFC does, for buses that speak nothing else (the Node.js reference
bus, or a zbus bus for a client that keeps to the RFC): SYNCSTART on the SNAPSHOT socket,
answered by SYNC... SYNCEND, and BROADCASTs on the PUBLISHER socket, subscribed by topic
prefix before the snapshot is asked for and held back until it has ended. The client
feeds :class:`PlainSubscriptionCore` what arrives, with the time, and does what the
:class:`~zbus.eventbus.core.sync.Actions` say, as with the extension core.

How it stays exact without the extensions' stream (which carries every sequence):

- The RFC: BROADCASTs at or below the last SYNCEND's or BROADCAST's sequence are dropped.
- A PUB socket delivers a subscriber what it sends once the subscription has reached it,
  which the client cannot see. The first message this connection gets proves it: a
  BROADCAST of sequence b says that every matching event after b reaches it, a HUGZ of
  sequence h (zbus's idle heartbeat, the bus's sequence) every event after h. When that
  mark is above what the snapshot covered, the events between may have gone by before
  the subscription took: the core asks again, SYNCSTART from its last sequence, which
  answers every event above it (a resuming client's request), and holds the BROADCASTs
  back meanwhile. Until a first message comes, it asks so every ``heartbeat_interval``
  (a quiet bus that sends no heartbeat, as the Node.js one, would otherwise leave events
  published in that window undelivered until the next event).
- BROADCASTs held back past ``max_buffer`` are dropped and asked for the same way.
- A bus that sends HUGZ (zbus does, the Node.js bus does not) and then falls silent for
  ``heartbeat_interval x misses``, or a SYNCSTART unanswered for as long, is a dead bus:
  ``failover``; after :meth:`reconnect` the core resumes with SYNCSTART from ``last``.
- ZeroMQ reconnects to a restarted bus by itself, and the subscription is void until
  the new connection has carried it there: the client says when its PUBLISHER
  connection is made (again) with :meth:`on_connected`, and the connection is proven
  anew, as the first one was.
- A SYNCEND below what the core has covered is another history (a bus that lost events,
  or another bus): the core starts over with the state (SYNCSTART 0) and says ``reset``.
  A different bus that is ahead cannot be told from the same one: the plain protocol has
  no way to ask for one event by sequence.

What the plain protocol cannot do: see events a PUB socket dropped for a subscriber past
its high-water mark (BROADCASTs are filtered by topic, so their sequences have gaps
anyway). zbus's own protocol repairs those.
"""

from __future__ import annotations

from collections.abc import Iterable

from zbus.common.protocols import eventbus as eb
from zbus.eventbus.core.log import Event
from zbus.eventbus.core.sync import NOTHING, Actions, Phase, SubscriptionState


class PlainSubscriptionCore(SubscriptionState):
    """One plain subscription's state; see the module docstring for the rules."""

    def __init__(
        self,
        subtrees: Iterable[str] = (),
        since: int = 0,
        heartbeat_interval: float = 1.0,
        misses: int = 3,
        max_buffer: int = 100_000,
    ) -> None:
        super().__init__(subtrees, since, heartbeat_interval, misses, max_buffer)
        if any(";" in s or "," in s for s in self.subtrees):
            raise ValueError("a subtree may not hold ';' or ',': they separate subtree lists")
        # last stays None until a SYNCEND; _floor is the outstanding SYNCSTART's sequence.
        self._asked_at: float | None = None
        self._repairing = False
        self._held: list[Event] = []  # BROADCASTs held back until the connection is covered
        self._lost = False  # held BROADCASTs were dropped: ask the log for them
        self._covered = False  # this connection is known to bring every event after last
        self._mark: int | None = None  # what the connection's first message stood for
        self._beats = False  # the bus sends HUGZ: silence means it is dead
        self._rx = 0.0
        self._probe_at: float | None = None  # when to ask again, not yet proven

    # ------------------------------------------------------------------ inputs
    def start(self, now: float) -> Actions:
        """Begin: the PUBLISHER subscription is connected; send the first SYNCSTART."""
        if self.phase is not Phase.IDLE:
            raise RuntimeError("the subscription has already started")
        self._rx = now
        return Actions(query=self._ask(self.since, now))

    def on_sync(self, sync: eb.Sync, now: float) -> Actions:
        """One SYNC of the outstanding snapshot."""
        if self._asked_at is None:
            return NOTHING  # nothing was asked on this connection: not ours
        self._asked_at = now  # the answer is coming: its deadline moves on
        covered = self._floor if self.last is None else max(self.last, self._floor)
        if (self._floor and sync.sequence <= covered) or not self._wants(sync.topic):
            self.duplicates += 1
            return NOTHING
        if self._repairing:
            self.last = sync.sequence  # a resume's SYNCs come in sequence order
            self.repaired += 1
        self.delivered += 1
        return Actions((Event(*_fields(sync)),))

    def on_sync_end(self, end: eb.SyncEnd, now: float) -> Actions:
        """SYNCEND: the snapshot is complete up to ``end.sequence``."""
        if self._asked_at is None:
            return NOTHING
        self._asked_at = None
        self._repairing = False
        if end.sequence < self._floor or (self.last is not None and end.sequence < self.last):
            return self._reset(now)  # the bus has not reached what was covered already
        self.last = end.sequence if self.last is None else max(self.last, end.sequence)
        self.phase = Phase.LIVE
        if self._lost:
            self._lost = False
            return self._catch_up(now)
        if not self._covered:
            if self._mark is None:
                self._probe_at = now + self.interval
                return NOTHING
            if self._mark > self.last:
                return self._catch_up(now)
            self._covered = True
        return self._release()

    def on_broadcast(self, b: eb.Broadcast, now: float) -> Actions:
        """A BROADCAST from the PUBLISHER socket."""
        if self.phase in (Phase.IDLE, Phase.DISCONNECTED):
            return NOTHING
        self._rx = now
        if not self._wants(b.topic):
            return NOTHING  # a topic that only shares the heartbeat's prefix
        first = self._mark is None
        if first:
            self._mark = b.sequence - 1  # the event itself came: everything after it will
        event = Event(*_fields(b))
        if self.phase is Phase.LIVE and self._covered:
            assert self.last is not None
            if b.sequence <= self.last:
                self.duplicates += 1
                return NOTHING
            self.last = b.sequence
            self.delivered += 1
            return Actions((event,))
        if len(self._held) >= self.max_buffer:
            self._held = []  # they come from the log instead: memory stays bounded
            self._lost = True
        self._held.append(event)
        if first and self.phase is Phase.LIVE:
            return self._decide(now)
        return NOTHING

    def on_heartbeat(self, seq: int, now: float) -> Actions:
        """A HUGZ: the bus's sequence is ``seq``, and it sends heartbeats."""
        if self.phase in (Phase.IDLE, Phase.DISCONNECTED):
            return NOTHING
        self._rx = now
        self._beats = True
        if self._mark is None:
            self._mark = seq
            if self.phase is Phase.LIVE:
                return self._decide(now)
        return NOTHING

    def on_connected(self, now: float) -> Actions:
        """The PUBLISHER connection was made, or made again after the bus went away: what
        was published meanwhile never reached this subscription. Prove it anew; live,
        ask for what came after ``last`` at once."""
        if self.phase in (Phase.IDLE, Phase.DISCONNECTED):
            return NOTHING
        self._covered = False
        self._mark = None
        if self.phase is Phase.LIVE:
            return self._catch_up(now)
        return NOTHING

    def tick(self, now: float) -> Actions:
        """Check the deadlines: ``failover`` once the bus has been silent too long, or a
        new SYNCSTART while the connection is not proven yet."""
        if self.phase in (Phase.IDLE, Phase.DISCONNECTED):
            return NOTHING
        asked, beats = self._asked_at, self._beats
        if (asked is not None and now >= asked + self.timeout) or (
            beats and now >= self._rx + self.timeout
        ):
            return self.fail()
        if self._probe_at is not None and now >= self._probe_at:
            return self._catch_up(now)
        return NOTHING

    def reconnect(self, now: float) -> Actions:
        """New sockets after a failover: resume with every event after ``last``."""
        if self.phase is not Phase.DISCONNECTED:
            raise RuntimeError("reconnect() follows a failover")
        self._held, self._lost = [], False
        self._covered, self._mark, self._beats = False, None, False
        self._rx = now
        if self.last is None:
            return Actions(query=self._ask(self.since, now))
        return self._catch_up(now)

    def deadline(self) -> float | None:
        """When :meth:`tick` will next have something to do (None: never)."""
        if self.phase in (Phase.IDLE, Phase.DISCONNECTED):
            return None
        ends = []
        if self._asked_at is not None:
            ends.append(self._asked_at + self.timeout)
        if self._beats:
            ends.append(self._rx + self.timeout)
        if self._probe_at is not None:
            ends.append(self._probe_at)
        return min(ends, default=None)

    # -------------------------------------------------------------- internals
    def _wants(self, topic: str) -> bool:
        return not self.subtrees or topic.startswith(self.subtrees)

    def _ask(self, since: int, now: float) -> eb.SyncStart:
        self.phase = Phase.SNAPSHOT
        self._asked_at = now
        self._probe_at = None
        self._floor = since
        return eb.SyncStart(self.subtrees, since)

    def _catch_up(self, now: float) -> Actions:
        """Ask for every event after ``last`` (the BROADCASTs stay held meanwhile)."""
        assert self.last is not None
        self._repairing = True
        self._covered = self._covered or self._mark is not None
        return Actions(query=self._ask(self.last, now))

    def _decide(self, now: float) -> Actions:
        """Live, and the connection's first message just came: covered, or catch up."""
        assert self.last is not None and self._mark is not None
        if self._mark > self.last:
            return self._catch_up(now)
        self._covered = True
        self._probe_at = None
        return self._release()

    def _release(self) -> Actions:
        """Deliver the held BROADCASTs after ``last``, once the connection is covered."""
        if not self._covered or not self._held:
            return NOTHING
        assert self.last is not None
        out = []
        for event in self._held:
            if event.seq <= self.last:
                self.duplicates += 1
                continue
            self.last = event.seq
            out.append(event)
        self._held = []
        self.delivered += len(out)
        return Actions(out) if out else NOTHING

    def _reset(self, now: float) -> Actions:
        """Another history: start over with its state, from sequence 0. The BROADCASTs
        held so far come from this bus: they stay, for after its state."""
        self.resets += 1
        self.last = None
        self._repairing = False
        return Actions(query=self._ask(0, now), reset=True)


def _fields(e: eb.Sync | eb.Broadcast) -> tuple[int, str, str, str, str, bytes]:
    return e.sequence, e.topic, e.producer, e.timestamp, e.uuid, e.data
