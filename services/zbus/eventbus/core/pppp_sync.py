"""The SYNC of a PPPP conversation on its way out, within the subscriber's bytes in
flight, sans-I/O (ADR 0006, "The conversation"; ``docs/protocols/pppp.md``, "Memory
bound").

A SYNC is the latest event of every topic of the channel, read from the log a page at a
time, then its end marker; the subscriber ACKs it only whole. Its messages count in the
subscriber's bytes in flight like any other. A SYNC larger than the room there cannot
wait for its ACK, so its messages are let go once ZeroMQ's queue has provably passed
them (:meth:`SyncPump.release_passed`).
"""

from __future__ import annotations

from zbus.common.protocols.pppp import Heartbeat, encode
from zbus.common.protocols.pppp_event import SyncEnd, encode_sync_end
from zbus.eventbus.core.pppp_subscribers import (
    MESSAGE_OVERHEAD,
    Conversation,
    Subscriber,
    Sync,
)
from zbus.eventbus.core.pppp_types import EventSource, Limits, Send

SYNC_PAGE = 256  # SYNC items read from the log at once
HEARTBEAT = encode(Heartbeat())
ZERO = (0).to_bytes(8, "big")


class SyncPump:
    """Sends SYNCs for :class:`~zbus.eventbus.core.pppp.PpppCore`, counting in its
    ``sent``."""

    def __init__(self, source: EventSource, limits: Limits, sent: dict[str, int]) -> None:
        self.source = source
        self.limits = limits
        self.sent = sent

    def pump(
        self, sub: Subscriber, conv: Conversation, sync: Sync, now: float, send: Send, budget: int
    ) -> int:
        """Send the SYNC's items, then its end. Returns the budget left: -1 when the
        queue is full, 0 when the budget ran out, positive with the SYNC not ended when
        there is no room for more until an ACK."""
        channel, identity = conv.channel, sub.identity
        raw = channel.raw
        extra = MESSAGE_OVERHEAD + len(raw) + 8 + len(identity)
        while not sync.pages_done and budget > 0:
            items, cursor = self.source.sync_page(
                channel.name, sync.cursor, sync.seq, min(budget, SYNC_PAGE)
            )
            budget -= 1 if not items else 0
            for payload in items:
                size = sum(map(len, payload)) + extra
                budget = self._room(sub, size, now, send, budget)
                if budget <= 0:
                    return budget
                if sub.inflight and sub.inflight + size > self.limits.peer_bytes:
                    return budget  # no room until an ACK
                if not send(identity, [raw, ZERO, *payload]):
                    return -1
                self._sent(sub, conv, size, now)
                sync.items += 1
                sync.cursor = payload[0].decode("utf-8")
                budget -= 1
            if cursor is None:
                sync.pages_done = True
            else:
                sync.cursor = cursor
        if not sync.pages_done:
            return budget
        end = encode(encode_sync_end(channel.name, SyncEnd(sync.head, sync.items)))
        size = sum(map(len, end)) + MESSAGE_OVERHEAD + len(identity)
        budget = self._room(sub, size, now, send, budget)
        if budget <= 0:
            return budget
        if sub.inflight and sub.inflight + size > self.limits.peer_bytes:
            return budget
        if not send(identity, end):
            return -1
        self._sent(sub, conv, size, now)
        sync.ended = True
        return budget - 1

    def _sent(self, sub: Subscriber, conv: Conversation, size: int, now: float) -> None:
        sub.sends += 1
        conv.sync_flight.append((sub.sends, size))
        conv.sync_bytes += size
        sub.inflight += size
        self.sent["sync"] += 1
        sub.sent(now, publish=True)

    def _room(self, sub: Subscriber, size: int, now: float, send: Send, budget: int) -> int:
        """Make room for a SYNC message of ``size`` bytes when its SYNC messages fill the
        subscriber's bytes: a SYNC is ACKed only whole, so what frees them is ZeroMQ's
        queue passing them. The queue holds at most ``queue_messages`` messages, so once
        ZeroMQ takes a message, every message sent ``queue_messages`` or more before it
        has left the queue. HEARTBEATs (a few bytes each) are sent until that frees the
        room; a subscriber that does not read fills its queue and they stop. Returns the
        budget left, -1 when the queue is full, 0 when the budget ran out."""
        peer_bytes, identity = self.limits.peer_bytes, sub.identity
        while sub.inflight and sub.inflight + size > peer_bytes:
            if not self.release_passed(sub):
                return budget  # what fills it is messages: an ACK frees them
            if sub.inflight + size <= peer_bytes:
                break
            if budget <= 0:
                return 0
            if not send(identity, HEARTBEAT):
                return -1
            sub.sends += 1
            self.sent["heartbeat"] += 1
            budget -= 1
        return budget

    def release_passed(self, sub: Subscriber) -> bool:
        """Stop counting the SYNC messages ZeroMQ's queue has passed; False when the
        subscriber has no SYNC message counted."""
        passed, counted = sub.sends - self.limits.queue_messages, False
        for conv in sub.conversations.values():
            if conv.sync_flight:
                counted = True
                sub.inflight -= conv.release_sync(passed)
        return counted


__all__ = ["HEARTBEAT", "SYNC_PAGE", "SyncPump"]
