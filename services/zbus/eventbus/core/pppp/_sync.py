"""The SYNC of a PPPP conversation on its way out, within the subscriber's bytes in
flight, sans-I/O (ADR 0006, "The conversation"; ``docs/protocols/pppp.md``, "Memory
bound").

A SYNC is the latest event of every topic of the channel, read from the log a page at a
time (a :class:`~zbus.eventbus.core.pppp.SyncRead` the shell answers), then its end
marker; the subscriber ACKs it only whole. Its messages count in the subscriber's bytes
in flight like any other. A SYNC larger than the room there cannot wait for its ACK, so
its messages are let go once ZeroMQ's queue has provably passed them
(:meth:`SyncPump.release_passed`).
"""

from __future__ import annotations

from zbus.common.protocols.pppp import encode
from zbus.common.protocols.pppp_event import SyncEnd, encode_sync_end
from zbus.eventbus.core.pppp._batch import BEATS, HEARTBEAT, SYNC_END, SYNC_ITEMS, Batch
from zbus.eventbus.core.pppp._subscribers import (
    MESSAGE_OVERHEAD,
    Conversation,
    Subscriber,
    Sync,
)
from zbus.eventbus.core.pppp._types import Limits, Read, SyncRead

SYNC_PAGE = 256  # SYNC items read from the log at once
ZERO = (0).to_bytes(8, "big")


class SyncPump:
    """Hands out SYNCs for :class:`~zbus.eventbus.core.pppp.PpppCore`, counting in its
    ``sent``, asking for pages in its ``reads``."""

    def __init__(self, limits: Limits, sent: dict[str, int], reads: list[Read]) -> None:
        self.limits = limits
        self.sent = sent
        self.reads = reads
        self._tokens = 0

    def pump(
        self, sub: Subscriber, conv: Conversation, sync: Sync, batch: Batch, now: float, budget: int
    ) -> int:
        """Hand out the SYNC's items, then its end. Returns the budget left: 0 when the
        budget ran out, positive with the SYNC not ended when there is no room for more
        until an ACK, or while its next page is being read."""
        channel, identity = conv.channel, sub.identity
        raw = channel.raw
        extra = MESSAGE_OVERHEAD + len(raw) + 8 + len(identity)
        append = batch.messages.append
        while not sync.pages_done and budget > 0:
            if sync.page is None:
                if not sync.reading:
                    self._read(sub, conv, sync, min(budget, SYNC_PAGE))
                return budget
            items, cursor = sync.page
            sync.page = None  # what is not sent now is read again
            budget -= 1 if not items else 0
            for payload in items:
                size = sum(map(len, payload)) + extra
                budget = self._room(sub, batch, size, budget)
                if budget <= 0:
                    return budget
                if sub.inflight and sub.inflight + size > self.limits.peer_bytes:
                    return budget  # no room until an ACK
                batch.run(SYNC_ITEMS, conv, sync.cursor)
                append([raw, ZERO, *payload])
                self._sent(sub, conv, size, now)
                sync.items += 1
                sync.cursor = payload[0].decode("utf-8")
                budget -= 1
            if cursor is None:
                sync.pages_done = True
            else:
                sync.cursor = cursor
                self._read(sub, conv, sync, SYNC_PAGE)  # the next page, at once
        if not sync.pages_done:
            return budget
        end = encode(encode_sync_end(channel.name, SyncEnd(sync.head, sync.items)))
        size = sum(map(len, end)) + MESSAGE_OVERHEAD + len(identity)
        budget = self._room(sub, batch, size, budget)
        if budget <= 0:
            return budget
        if sub.inflight and sub.inflight + size > self.limits.peer_bytes:
            return budget
        batch.run(SYNC_END, conv)
        append(end)
        self._sent(sub, conv, size, now)
        sync.ended = True
        return budget - 1

    def _read(self, sub: Subscriber, conv: Conversation, sync: Sync, limit: int) -> None:
        self._tokens += 1
        sync.reading = self._tokens
        self.reads.append(
            SyncRead(conv.channel.name, sub.identity, self._tokens, sync.cursor, sync.seq, limit)
        )

    def _sent(self, sub: Subscriber, conv: Conversation, size: int, now: float) -> None:
        sub.sends += 1
        conv.sync_flight.append((sub.sends, size))
        conv.sync_bytes += size
        sub.inflight += size
        self.sent["sync"] += 1
        sub.sent(now, publish=True)

    def _room(self, sub: Subscriber, batch: Batch, size: int, budget: int) -> int:
        """Make room for a SYNC message of ``size`` bytes when its SYNC messages fill the
        subscriber's bytes: a SYNC is ACKed only whole, so what frees them is ZeroMQ's
        queue passing them. The queue holds at most ``queue_messages`` messages, so once
        ZeroMQ takes a message, every message sent ``queue_messages`` or more before it
        has left the queue. HEARTBEATs (a few bytes each) are handed out until that frees
        the room; a subscriber that does not read fills its queue, ZeroMQ refuses them,
        and the core takes back what they freed. Returns the budget left, 0 when the
        budget ran out."""
        peer_bytes = self.limits.peer_bytes
        while sub.inflight and sub.inflight + size > peer_bytes:
            if not self.release_passed(sub, batch):
                return budget  # what fills it is messages: an ACK frees them
            if sub.inflight + size <= peer_bytes:
                break
            if budget <= 0:
                return 0
            batch.run(BEATS, None)
            batch.messages.append(HEARTBEAT)
            sub.sends += 1
            self.sent["heartbeat"] += 1
            budget -= 1
        return budget

    def release_passed(self, sub: Subscriber, batch: Batch) -> bool:
        """Stop counting the SYNC messages ZeroMQ's queue has passed, once it took what
        was handed out before; False when the subscriber has no SYNC message counted."""
        passed, counted = sub.sends - self.limits.queue_messages, False
        for conv in sub.conversations.values():
            flight = conv.sync_flight
            if not flight:
                continue
            counted = True
            if flight[0][0] > passed:
                continue
            entries = []
            while flight and flight[0][0] <= passed:
                entries.append(flight.popleft())
            freed = sum(size for _, size in entries)
            conv.sync_bytes -= freed
            sub.inflight -= freed
            batch.released(conv, entries)
        return counted


__all__ = ["SYNC_PAGE", "SyncPump"]
