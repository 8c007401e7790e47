"""The sans-I/O core of an event bus subscription: snapshot, live stream, repair, failover.

No sockets and no clock: the client feeds :class:`SubscriptionCore` what arrives
(snapshot pages, stream batches and heartbeats) with the time, and calls :meth:`tick`;
every call answers :class:`Actions`: events to hand to the user, the next ZB-SNAPSHOT
query to send, or ``failover``.

How a subscription stays exact (ADR 0002):

- The client connects the stream first and the core buffers it while the latest-value
  snapshot is paged. The first page's ``sequence`` is the read point S. Later pages are
  read later, so they may hold events newer than S: the core remembers the sequence it
  delivered per topic and drops any later event of that topic at or below it, which
  keeps every topic moving forward only. After the last page the buffer is replayed
  from S + 1, then live batches are delivered as they come.
- The stream carries every sequence, contiguously. ``last`` is the highest sequence
  covered so far. A batch that starts beyond ``last + 1``, or a heartbeat above
  ``last``, is a gap: the core pages the log (mode "log") from ``last``, buffers the
  live stream meanwhile, and delivers in sequence order. Anything at or below ``last``
  is a duplicate and dropped.
- After a failover, or when the stream goes backwards (a server restarted behind the
  same endpoint: ZeroMQ reconnects silently), the core probes the server's log for the
  last event it knows (by sequence and uuid). Found, it resumes from ``last`` through
  the log. Not found, or the server's sequence is below ``last``, it is another history
  (a bus that lost events, or another bus): the core starts over with a full snapshot
  and says so with ``reset``, since what the user built from earlier events is void.
- Silence on the stream for ``heartbeat_interval x misses``, or a query unanswered for
  as long, is a dead server: ``failover``. The client reconnects (the same or the next
  endpoints) and calls :meth:`reconnect`, which resumes from ``last``.

Stream rows are trusted to be ``[topic, producer, ts, uuid, data]`` lists with text
fields and binary data: the client checks them before they get here.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Sequence
from itertools import count
from typing import Any, NamedTuple, Protocol

from zbus.common.protocols import eventbus as eb
from zbus.common.protocols import eventbus_ext as ext
from zbus.common.protocols.eventbus_limits import subtrees_out_of_range
from zbus.eventbus.core.log import Event, event_from_row


def check_subtrees(subtrees: Iterable[str]) -> tuple[str, ...]:
    """Subtrees as a subscription takes them (an empty one: every topic).

    Raises:
        TypeError: a subtree that is not text.
        ValueError: too many or too long (the bus's range, ``eventbus_limits``).
    """
    out = tuple(subtrees)
    if not all(isinstance(s, str) for s in out):
        raise TypeError("subtrees must be strings")
    wrong = subtrees_out_of_range(out)
    if wrong is not None:
        raise ValueError(f"subtrees: {wrong}")
    return () if "" in out else out


def _event(seq: int, row: list[Any]) -> Event:
    return event_from_row((seq, *row))


class Actions(NamedTuple):
    """What the client must do after feeding the core one input."""

    events: Sequence[Event] = ()
    # Send it on the snapshot socket: a ZB-SNAPSHOT, or a SYNCSTART for the plain core.
    query: ext.SnapshotQuery | eb.SyncStart | None = None
    failover: bool = False  # drop the connection; reconnect, then call reconnect()
    reset: bool = False  # the events that follow start a new history: discard state


NOTHING = Actions()


class Phase(enum.Enum):
    IDLE = "idle"  # start() not called yet
    SNAPSHOT = "snapshot"  # paging the latest values, stream buffered
    REPLAY = "replay"  # paging the log from last, stream buffered
    LIVE = "live"  # delivering the stream as it arrives
    DISCONNECTED = "disconnected"  # failover returned, waiting for reconnect()


class SubscriptionLogic(Protocol):
    """What a client's subscription asks of its core: this module's, or the plain
    protocol's (:mod:`zbus.eventbus.core.plain_sync`)."""

    delivered: int
    duplicates: int
    repaired: int
    failovers: int
    resets: int
    last: int | None

    def start(self, now: float) -> Actions: ...

    def tick(self, now: float) -> Actions: ...

    def fail(self) -> Actions: ...

    def reconnect(self, now: float) -> Actions: ...

    def deadline(self) -> float | None: ...


class SubscriptionState:
    """What both subscription cores hold and check alike: the subtrees, the sequence to
    start after, the silence that fails a connection, the counters, and the one place a
    failover is decided and counted (the shell then opens sockets to
    ``next_endpoints()``)."""

    def __init__(
        self,
        subtrees: Iterable[str],
        since: int,
        heartbeat_interval: float,
        misses: int,
        max_buffer: int,
    ) -> None:
        # An empty prefix matches every topic, as it does on the server.
        self.subtrees: tuple[str, ...] = check_subtrees(subtrees)
        if not 0 <= since < 1 << 64:
            raise ValueError("since must be in 0..2**64-1")
        if heartbeat_interval <= 0 or misses < 1:
            raise ValueError("heartbeat_interval must be positive and misses at least 1")
        self.since = since
        self.interval = heartbeat_interval
        self.timeout = heartbeat_interval * misses
        self.max_buffer = max_buffer
        self.phase = Phase.IDLE
        self.last: int | None = None  # highest sequence covered; None until a read point
        # Counters, for the user and for metrics.
        self.delivered = 0
        self.duplicates = 0  # events at or below last, dropped
        self.repaired = 0  # events delivered from the log after a gap or a failover
        self.failovers = 0
        self.resets = 0
        self._floor = since  # events at or below it are not wanted

    def fail(self) -> Actions:
        """Give up on the connection now (a silent bus, or a refused query)."""
        if self.phase in (Phase.IDLE, Phase.DISCONNECTED):
            return NOTHING
        self.phase = Phase.DISCONNECTED
        self.failovers += 1
        return Actions(failover=True)


class SubscriptionCore(SubscriptionState):
    """One subscription's state; see the module docstring for the rules."""

    def __init__(
        self,
        subtrees: Iterable[str] = (),
        since: int = 0,
        heartbeat_interval: float = 1.0,
        misses: int = 3,
        page_limit: int = 1000,
        max_buffer: int = 100_000,
    ) -> None:
        if not 1 <= page_limit <= ext.MAX_LIMIT:
            raise ValueError(f"page_limit must be in 1..{ext.MAX_LIMIT}")
        super().__init__(subtrees, since, heartbeat_interval, misses, max_buffer)
        self.page_limit = page_limit
        self._seen: dict[str, int] = {}  # topic -> seq delivered by the snapshot
        self._seen_until = 0  # once last reaches it, _seen can filter nothing more
        self._buffer: list[tuple[int, list[list[Any]]]] = []
        self._buffered = 0  # events in _buffer
        self._stream_last: int | None = None  # highest sequence this connection announced
        self._rx = 0.0  # when the stream last said anything
        self._asked_at: float | None = None  # when the outstanding query was sent
        self._read_point: int | None = None
        self._anchor: tuple[int, str] | None = None  # (seq, uuid) of an event seen
        self._probing = False
        self._check_read_point = False
        self._restart_pending = False

    # ------------------------------------------------------------------ inputs
    def start(self, now: float) -> Actions:
        """Begin: the stream is connected (and buffered); send the first snapshot query."""
        if self.phase is not Phase.IDLE:
            raise RuntimeError("the subscription has already started")
        self._rx = now
        self.phase = Phase.SNAPSHOT
        return Actions(query=self._ask(self._latest(None), now))

    def on_page(self, page: ext.SnapshotPage, now: float) -> Actions:
        """A ZB-PAGE answering the outstanding query."""
        if self._asked_at is None or self.phase not in (Phase.SNAPSHOT, Phase.REPLAY):
            return NOTHING  # nothing was asked on this connection: not ours
        self._asked_at = None
        if self._restart_pending:
            # The stream went backwards while this page was on its way: the page may
            # describe a history that is gone.
            self._restart_pending = False
            return self._restart(now)
        if self._probing:
            return self._probe_page(page, now)
        if self.phase is Phase.SNAPSHOT:
            return self._snapshot_page(page, now)
        return self._replay_page(page, now)

    def on_batch(self, first_seq: int, rows: list[list[Any]], now: float) -> Actions:
        """A stream batch: ``rows`` of ``[topic, producer, ts, uuid, data]`` from ``first_seq``."""
        if self.phase in (Phase.IDLE, Phase.DISCONNECTED):
            return NOTHING  # the client closes its stream before reconnect()
        self._rx = now
        went_back = self._stream_last is not None and first_seq <= self._stream_last
        self._stream_last = first_seq + len(rows) - 1
        if went_back:
            return self._went_back(first_seq, rows, now)
        if self.phase is Phase.LIVE:
            out: list[Event] = []
            if self._take(first_seq, rows, out):
                self.delivered += len(out)
                return Actions(out) if out else NOTHING
            self._buffer.append((first_seq, rows))
            self._buffered = len(rows)
            return Actions(query=self._begin_replay(now))
        if self._buffered + len(rows) > self.max_buffer:
            # Dropping the buffer is safe: what it held shows up as a gap and comes
            # from the log instead. It bounds memory when the snapshot is slow.
            self._buffer = []
            self._buffered = 0
        self._buffer.append((first_seq, rows))
        self._buffered += len(rows)
        return NOTHING

    def on_heartbeat(self, seq: int, now: float) -> Actions:
        """A stream heartbeat: the server's sequence is ``seq``.

        It is handled as an empty batch at ``seq + 1``: everything up to ``seq`` has been
        sent, so the same gap and regression rules apply.
        """
        return self.on_batch(seq + 1, [], now)

    def tick(self, now: float) -> Actions:
        """Check the deadlines; ``failover`` once the server has been silent too long."""
        if self.phase in (Phase.IDLE, Phase.DISCONNECTED):
            return NOTHING
        deadline = self.deadline()
        if deadline is not None and now >= deadline:
            return self.fail()
        return NOTHING

    def reconnect(self, now: float) -> Actions:
        """The client has new sockets after a failover; resume from ``last``."""
        if self.phase is not Phase.DISCONNECTED:
            raise RuntimeError("reconnect() follows a failover")
        self._stream_last = None
        self._buffer = []
        self._buffered = 0
        self._rx = now
        self._asked_at = None
        self._restart_pending = False
        self._probing = False
        self._check_read_point = False
        return self._restart(now)

    def deadline(self) -> float | None:
        """When :meth:`tick` will next have something to do (None: never)."""
        if self.phase in (Phase.IDLE, Phase.DISCONNECTED):
            return None
        deadline = self._rx + self.timeout
        if self._asked_at is not None:
            deadline = min(deadline, self._asked_at + self.timeout)
        return deadline

    # -------------------------------------------------------------- internals
    def _latest(self, after: str | None) -> ext.SnapshotQuery:
        return ext.SnapshotQuery(self.subtrees, self._floor, after, "latest", self.page_limit)

    def _ask(self, query: ext.SnapshotQuery, now: float) -> ext.SnapshotQuery:
        self._asked_at = now
        return query

    def _went_back(self, first: int, rows: list[list[Any]], now: float) -> Actions:
        """The stream repeated itself: a server restarted behind the same endpoint
        (ZeroMQ reconnects silently). Check its history before going on."""
        self._buffer = [(first, rows)]
        self._buffered = len(rows)
        if self._asked_at is not None:
            self._restart_pending = True  # wait for the answer to what was asked
            return NOTHING
        return self._restart(now)

    def _take(self, first: int, rows: list[list[Any]], out: list[Event]) -> bool:
        """Deliver a contiguous stream message into ``out``; False when it leaves a gap."""
        last = self.last
        assert last is not None
        if first > last + 1:
            return False
        n = len(rows)
        end = first + n - 1
        if end <= last:
            self.duplicates += n
            return True
        if first <= last:
            skip = last + 1 - first
            self.duplicates += skip
            rows = rows[skip:]
            first = last + 1
        self.last = end
        subtrees, seen = self.subtrees, self._seen
        if not subtrees and not seen:
            out += map(_event, count(first), rows)
        else:
            seq = first
            for row in rows:
                topic = row[0]
                if (not subtrees or topic.startswith(subtrees)) and seen.get(topic, -1) < seq:
                    out.append(event_from_row((seq, *row)))
                seq += 1
            if seen and end >= self._seen_until:
                seen.clear()
        self._anchor = (end, rows[-1][3])
        return True

    def _snapshot_page(self, page: ext.SnapshotPage, now: float) -> Actions:
        if self._read_point is None:
            if page.sequence < self._floor:
                # The bus has not reached what the caller has already seen: it lost
                # events or it is another bus.
                return self._reset(now)
            self._read_point = page.sequence
        out: list[Event] = []
        seen, floor = self._seen, self._floor
        for e in page.events:
            if e.sequence <= floor or seen.get(e.topic, -1) >= e.sequence:
                continue
            seen[e.topic] = e.sequence
            out.append(Event(e.sequence, e.topic, e.producer, e.timestamp, e.uuid, e.data))
            if self._anchor is None or e.sequence > self._anchor[0]:
                self._anchor = (e.sequence, e.uuid)
        self.delivered += len(out)
        if page.next is not None:
            return Actions(out, self._ask(self._latest(page.next), now))
        self.last = self._read_point
        self._read_point = None
        self._seen_until = max(seen.values(), default=0)
        if self._seen_until <= self.last:
            seen.clear()
        return self._drain(out, now)

    def _begin_replay(self, now: float) -> ext.SnapshotQuery:
        assert self.last is not None
        self.phase = Phase.REPLAY
        self._check_read_point = True
        query = ext.SnapshotQuery(self.subtrees, self.last, None, "log", self.page_limit)
        return self._ask(query, now)

    def _replay_page(self, page: ext.SnapshotPage, now: float) -> Actions:
        last = self.last
        assert last is not None
        if self._check_read_point:
            self._check_read_point = False
            if page.sequence < last:
                return self._reset(now)  # the bus went back: it lost events
        out: list[Event] = []
        seen = self._seen
        for e in page.events:
            if e.sequence <= last:
                continue  # already covered (a replay page may overlap the stream)
            last = e.sequence
            self._anchor = (e.sequence, e.uuid)
            if seen.get(e.topic, -1) >= e.sequence:
                continue
            out.append(Event(e.sequence, e.topic, e.producer, e.timestamp, e.uuid, e.data))
        self.last = last
        self.repaired += len(out)
        self.delivered += len(out)
        if page.next is not None:
            query = ext.SnapshotQuery(self.subtrees, last, page.next, "log", self.page_limit)
            return Actions(out, self._ask(query, now))
        # The page was read after its sequence was taken: every matching event up to it
        # is in the replay, so last may move up to it.
        self.last = max(last, page.sequence)
        if seen and self.last >= self._seen_until:
            seen.clear()
        return self._drain(out, now)

    def _probe_page(self, page: ext.SnapshotPage, now: float) -> Actions:
        self._probing = False
        assert self._anchor is not None
        seq, uuid = self._anchor
        first = page.events[0] if page.events else None
        same = (
            (self.last is None or page.sequence >= self.last)
            and first is not None
            and first.sequence == seq
            and first.uuid.lower() == uuid.lower()
        )
        if not same:
            return self._reset(now)
        if self.last is None:
            return self._snapshot_again(now)
        return Actions(query=self._begin_replay(now))

    def _drain(self, out: list[Event], now: float) -> Actions:
        """Deliver the buffered stream after a snapshot or a replay, up to any gap."""
        buffer = self._buffer
        self._buffer, self._buffered = [], 0
        before = len(out)
        for i, (first, rows) in enumerate(buffer):
            if not self._take(first, rows, out):
                self._buffer = buffer[i:]
                self._buffered = sum(len(r) for _, r in self._buffer)
                self.delivered += len(out) - before
                return Actions(out, self._begin_replay(now))
        self.delivered += len(out) - before
        self.phase = Phase.LIVE
        return Actions(out) if out else NOTHING

    def _restart(self, now: float) -> Actions:
        """Pick up again on a new connection, or after the stream went backwards."""
        if self._anchor is not None:
            # Is this still the history the anchor was seen in? Ask for the event at its
            # sequence, whatever its topic: one lookup by sequence, however far back.
            self.phase = Phase.SNAPSHOT if self.last is None else Phase.REPLAY
            self._probing = True
            query = ext.SnapshotQuery((), self._anchor[0] - 1, None, "log", 1)
            return Actions(query=self._ask(query, now))
        if self.last is None:
            return self._snapshot_again(now)
        return Actions(query=self._begin_replay(now))

    def _snapshot_again(self, now: float) -> Actions:
        """Read the snapshot again from its start, in the same history: what was already
        delivered per topic stays in _seen, so only newer values come through."""
        self._read_point = None
        self.phase = Phase.SNAPSHOT
        return Actions(query=self._ask(self._latest(None), now))

    def _reset(self, now: float) -> Actions:
        """Start over with a full latest snapshot; the stream buffered so far is kept,
        as it comes from the connection the new snapshot is read from."""
        self.resets += 1
        self.last = None
        self._floor = 0
        self._seen.clear()
        self._seen_until = 0
        self._read_point = None
        self._anchor = None
        self._probing = False
        self._check_read_point = False
        self.phase = Phase.SNAPSHOT
        return Actions(query=self._ask(self._latest(None), now), reset=True)
