"""The PPPP door's sending, sans-I/O: what each ready subscriber can take now is handed
out in a :class:`~zbus.eventbus.core.pppp.Batch` (ADR 0006, "Backlogs are positions").

Per subscriber, in turn and within :data:`PUMP_BUDGET` messages: the SYNC under way, the
NACKed ranges, then new messages from ``next`` within the window and the subscriber's
bytes in flight. A message older than the event cache is asked of the log (a
:class:`~zbus.eventbus.core.pppp.MessagesRead`); its conversation waits, and the answer
(:meth:`Sender.on_messages`) makes its subscribers ready again. A batch ZeroMQ did not
take whole comes back through :meth:`Sender.unsent`.
"""

from __future__ import annotations

from collections.abc import Sequence

from zbus.eventbus.core.pppp._batch import LIVE, RESEND, Batch, take_back
from zbus.eventbus.core.pppp._cache import (
    ENTRY_OVERHEAD,
    EventCache,
    Payload,
    ReadBuffer,
    payload_bytes,
)
from zbus.eventbus.core.pppp._channels import Channel, ChannelIndex
from zbus.eventbus.core.pppp._subscribers import MESSAGE_OVERHEAD, Conversation, Subscriber, Times
from zbus.eventbus.core.pppp._sync import SyncPump
from zbus.eventbus.core.pppp._timers import Deadlines
from zbus.eventbus.core.pppp._types import Limits, MessagesRead, MiB, Read, SyncRead

PUMP_BUDGET = 256  # messages handed out to one subscriber before the next one gets a turn
READ_PAGE = 1024  # messages read from the log at once for a backlog
PENDING: Payload = ()  # a message being read from the log


class Sender:
    """The sending half of :class:`~zbus.eventbus.core.pppp.PpppCore`."""

    # The core's state the sending reads and moves.
    times: Times
    limits: Limits
    channels: ChannelIndex
    subscribers: dict[bytes, Subscriber]
    ready: set[bytes]
    timers: Deadlines
    sent: dict[str, int]

    def __init__(self, limits: Limits) -> None:
        self.cache = EventCache(limits.cache_bytes)
        self.reads = ReadBuffer(max(MiB, limits.cache_bytes // 8))
        self.batches: dict[bytes, Batch] = {}  # to send, by subscriber
        self.requests: list[Read] = []  # reads of the log to make
        self.unavailable = 0  # messages the log no longer had (never, with the hold)
        self.asked: set[tuple[int, int]] = set()  # (channel uid, cseq) being read
        self.answers: dict[tuple[int, int], Payload | None] = {}  # read, for the pump
        self.syncs = SyncPump(limits, self.sent, self.requests)

    # ------------------------------------------------------------------ sending
    def pump(self, now: float) -> None:
        """Hand out what the ready subscribers can take: SYNCs, resends, new messages."""
        subscribers, times, earlier = self.subscribers, self.times, self.timers.earlier
        batches = self.batches
        for identity in list(self.ready):
            sub = subscribers.get(identity)
            if sub is None or not sub.live:
                self.ready.discard(identity)
                continue
            batch = batches.get(identity)
            if batch is None:
                batch = batches[identity] = Batch(sub)
            sends = sub.sends
            if self._pump_one(sub, batch, now):
                self.ready.discard(identity)
            if sub.sends != sends:
                earlier(identity, sub.next_due(times))
            elif not batch.messages:
                del batches[identity]
        self.answers.clear()  # what a pump did not use is read again when wanted

    @property
    def has_work(self) -> bool:
        """Some ready subscriber was not stopped by a full queue."""
        subscribers = self.subscribers
        return any(
            (s := subscribers.get(i)) is not None and not s.blocked for i in list(self.ready)
        )

    def _pump_one(self, sub: Subscriber, batch: Batch, now: float) -> bool:
        """True when everything that can go to ``sub`` now was handed out (or waits for
        a read of the log, whose answer makes it ready again)."""
        budget = PUMP_BUDGET
        for conv in list(sub.conversations.values()):
            if not conv.live or not conv.settled or not conv.channel.settled:
                continue
            budget = self._pump_conversation(sub, conv, batch, now, budget)
            if budget == 0:
                sub.blocked = False
                return False
        sub.blocked = False
        return True

    def _pump_conversation(
        self, sub: Subscriber, conv: Conversation, batch: Batch, now: float, budget: int
    ) -> int:
        """Hand out to one conversation; returns the budget left."""
        channel = conv.channel
        raw = channel.raw
        sync = conv.sync
        if sync is not None and not sync.ended:
            budget = self.syncs.pump(sub, conv, sync, batch, now, budget)
            if budget <= 0 or not sync.ended:
                return budget
        extra = MESSAGE_OVERHEAD - ENTRY_OVERHEAD + len(raw) + 8 + len(sub.identity)
        peer_bytes = self.limits.peer_bytes
        while conv.resend and budget > 0:
            first, last = conv.resend[0]
            payload = self._message(channel, first)
            if payload is PENDING:
                return budget  # being read: the answer makes the subscriber ready
            if payload is not None:
                size = payload_bytes(payload) + extra
                if sub.inflight and sub.inflight + size > peer_bytes:
                    return budget  # no room until an ACK
                batch.run(RESEND, conv)
                batch.messages.append([raw, first.to_bytes(8, "big"), *payload])
                conv.flight.append((first, size))
                conv.inflight_bytes += size
                sub.inflight += size
                sub.sends += 1
                self.sent["resend"] += 1
                sub.sent(now, publish=True)
                budget -= 1
            else:
                self.unavailable += 1
            if first == last:
                conv.resend.pop(0)
            else:
                conv.resend[0] = (first + 1, last)
        return self._pump_new(sub, conv, batch, now, budget)

    def _pump_new(
        self, sub: Subscriber, conv: Conversation, batch: Batch, now: float, budget: int
    ) -> int:
        """New messages from ``next`` within the window and the subscriber's bytes in
        flight: the hot path. The payload of a cached message is the cache's own frames,
        its size counted once."""
        channel, raw = conv.channel, conv.channel.raw
        limit = min(channel.head, conv.acked + self.limits.window)
        nxt, inflight, peer_bytes = conv.next, sub.inflight, self.limits.peer_bytes
        if budget <= 0 or nxt > limit or inflight >= peer_bytes:
            return budget
        entry_of, recent, offset = self.cache.entry, channel.recent, channel.recent_offset()
        cut, held = channel.cut, len(channel.recent)
        extra = MESSAGE_OVERHEAD - ENTRY_OVERHEAD + len(raw) + 8 + len(sub.identity)
        record, out = conv.flight.append, batch.messages
        start, count = len(out), 0
        append = out.append
        while budget > 0 and nxt <= limit:
            i = nxt + offset
            entry = entry_of(recent[i]) if cut <= i < held else None
            if entry is None:
                payload = self._message(channel, nxt)
                if payload is None:
                    self.unavailable += 1
                    nxt += 1
                    continue
                if payload is PENDING:
                    break  # being read: the answer makes the subscriber ready
                size = payload_bytes(payload)
            else:
                payload, size = entry
            size += extra
            if inflight and inflight + size > peer_bytes:
                break  # no room until an ACK
            append([raw, nxt.to_bytes(8, "big"), *payload])
            record((nxt, size))
            nxt += 1
            inflight += size
            count += 1
            budget -= 1
        conv.next = nxt
        conv.inflight_bytes += inflight - sub.inflight
        sub.inflight = inflight
        if count:
            batch.ops.append((LIVE, start, conv, None))
            sub.sends += count
            self.sent["publish"] += count
            sub.sent(now, publish=True)
        return budget

    def _message(self, channel: Channel, cseq: int) -> Payload | None:
        """The payload of message ``cseq`` of ``channel`` from the cache or what was read
        back; :data:`PENDING` while it is being read from the log; None when the log no
        longer has it."""
        if cseq <= channel.checkpoint[0] or cseq > channel.head:
            return None
        seq = channel.lookup(cseq)
        if seq is not None:
            payload = self.cache.get(seq)
            if payload is not None:
                return payload
        payload = self.reads.get(channel.uid, cseq)
        if payload is not None:
            return payload
        key = (channel.uid, cseq)
        if key in self.answers:
            return self.answers.pop(key)
        if key not in self.asked:
            self.asked.add(key)
            after, skip = channel.locate(cseq)
            count = min(READ_PAGE, channel.head - cseq + 1)
            self.requests.append(MessagesRead(channel.name, channel.uid, cseq, after, skip, count))
        return PENDING

    def on_messages(self, read: MessagesRead, rows: Sequence[tuple[int, Payload]]) -> None:
        """The answer to ``read``: ``(global seq, payload)`` of the messages from
        ``read.cseq`` on (none: the log no longer has message ``read.cseq``, or the read
        failed)."""
        key = (read.uid, read.cseq)
        self.asked.discard(key)
        self.answers[key] = rows[0][1] if rows else None  # the one wanted, whatever fits
        for i, (_, item) in enumerate(rows):
            self.reads.add(read.uid, read.cseq + i, item)
        channel = self.channels.get(read.channel)
        if channel is not None and channel.uid == read.uid:
            self.ready.update(channel.subscribers)

    def on_sync_page(self, read: SyncRead, items: list[Payload], after: str | None) -> None:
        """The answer to ``read``: the SYNC items of the page, and the cursor of the next
        page (None: the last page). A failed read answers no items and ``read.after``."""
        sub = self.subscribers.get(read.identity)
        conv = sub.conversations.get(read.channel) if sub is not None else None
        sync = conv.sync if conv is not None else None
        if sync is None or sync.reading != read.token:
            return  # the SYNC it was for is over
        sync.reading = 0
        sync.page = (items, after)
        self.ready.add(read.identity)

    def unsent(self, batch: Batch, taken: int) -> None:
        """ZeroMQ took only the first ``taken`` messages of ``batch``: the rest are taken
        back, to be handed out again once the subscriber's queue has room (or, when its
        connection is gone, after :meth:`gone`)."""
        sub = self.subscribers.get(batch.identity)
        if sub is None:
            return
        take_back(batch, taken, sub, self.sent)
        sub.blocked = True
        self.ready.add(sub.identity)
        self.timers.earlier(sub.identity, sub.next_due(self.times))


__all__ = ["PENDING", "PUMP_BUDGET", "READ_PAGE", "Sender"]
