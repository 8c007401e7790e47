"""What the PPPP door's core hands its shell to send to one subscriber, and how it takes
back what ZeroMQ did not take, sans-I/O (ADR 0006, "The door as served").

The core counts a message as sent when it hands it out (:class:`Batch`): its position
moves, its bytes count in flight, a SYNC's cursor moves on. The shell sends a batch's
messages in order and stops at the first one ZeroMQ refuses (the subscriber's queue is
full, or its connection is gone); it then tells the core how many went
(:meth:`~zbus.eventbus.core.pppp.PpppCore.unsent`), and the core takes back the rest
(:func:`take_back`), as if it had never handed them out: the positions go back, the
bytes stop counting, a SYNC goes on from its last item sent. A message the queue cannot
take stays a position; nothing is dropped.

A batch keeps, besides its messages, a short log of what each run of messages changed
(:attr:`Batch.ops`): one entry per conversation and kind of message, not per message,
so that the live path hands out messages at the cost of an ``append``.
"""

from __future__ import annotations

from collections import deque
from typing import Any

from zbus.common.protocols.pppp import Heartbeat, encode
from zbus.eventbus.core.pppp._subscribers import Conversation, Subscriber

HEARTBEAT = encode(Heartbeat())

#: Kinds of run in :attr:`Batch.ops`.
LIVE, RESEND, SYNC_ITEMS, SYNC_END, BEATS, RELEASE = range(6)

Op = tuple[int, int, Any, Any]  # (kind, index of its first message, conversation, extra)


class Batch:
    """Messages to one subscriber, in the order to send them.

    Attributes:
        identity: the subscriber's ROUTER identity.
        messages: each message's frames (after the identity).
        ops: what each run of messages changed, for :func:`take_back` (the core's).
    """

    __slots__ = ("beat", "identity", "messages", "ops", "published_at", "sends", "sent_at")

    def __init__(self, sub: Subscriber) -> None:
        self.identity = sub.identity
        self.messages: list[list[bytes]] = []
        self.ops: list[Op] = []
        # The subscriber as it was before: what a batch ZeroMQ took none of goes back to.
        self.sends = sub.sends
        self.sent_at, self.published_at, self.beat = sub.sent_at, sub.published_at, sub.beat

    def __len__(self) -> int:
        return len(self.messages)

    def run(self, kind: int, conv: Conversation | None, extra: Any = None) -> None:
        """Messages of ``kind`` (of ``conv``) follow, unless the last run is the same."""
        ops = self.ops
        if ops:
            last = ops[-1]
            if last[0] == kind and last[2] is conv and kind != RELEASE:
                return
        ops.append((kind, len(self.messages), conv, extra))

    def released(self, conv: Conversation, entries: list[tuple[int, int]]) -> None:
        """SYNC messages let go, counting the messages of this batch before now as sent."""
        self.ops.append((RELEASE, len(self.messages), conv, entries))


def take_back(batch: Batch, taken: int, sub: Subscriber, sent: dict[str, int]) -> None:
    """Undo what ``batch``'s messages from index ``taken`` on changed: ZeroMQ did not take
    them. ``sent`` is the core's count of messages sent by kind."""
    messages = batch.messages
    end = len(messages)
    for kind, start, conv, extra in reversed(batch.ops):
        if kind == RELEASE:
            if start > taken:  # counted messages that did not go: not passed after all
                _unrelease(sub, conv, extra)
            continue
        if end <= taken:
            break
        first = max(start, taken)
        count = end - first
        end = start
        if count <= 0:
            continue
        if kind == BEATS:
            sent["heartbeat"] -= count
        elif kind in (LIVE, RESEND):
            _unsend_publishes(sub, conv, count, kind == RESEND, sent)
        elif kind == SYNC_ITEMS:
            # The SYNC goes on after its last item taken ([channel, 0, topic, ...]), or
            # from where the run started.
            last = messages[first - 1][2].decode("utf-8") if first > start else extra
            _unsend_items(sub, conv, count, last)
            sent["sync"] -= count
        else:  # SYNC_END
            freed = conv.sync_flight.pop()[1]
            conv.sync_bytes -= freed
            sub.inflight -= freed
            conv.sync.ended = False
            sent["sync"] -= 1
    sub.sends -= len(messages) - taken
    if taken == 0:
        sub.sent_at, sub.published_at, sub.beat = batch.sent_at, batch.published_at, batch.beat
        return
    sub.beat = messages[taken - 1] is HEARTBEAT
    if all(m is HEARTBEAT for m in messages[:taken]):
        sub.published_at = batch.published_at


def _unsend_publishes(
    sub: Subscriber, conv: Conversation, count: int, resend: bool, sent: dict[str, int]
) -> None:
    flight: deque[tuple[int, int]] = conv.flight
    freed, cseqs = 0, []
    for _ in range(count):
        cseq, size = flight.pop()
        freed += size
        cseqs.append(cseq)
    conv.inflight_bytes -= freed
    sub.inflight -= freed
    if resend:
        conv.add_resend([(c, c) for c in cseqs])
        sent["resend"] -= count
    else:
        conv.next = cseqs[-1]  # the first one not taken: the next to send
        sent["publish"] -= count


def _unsend_items(sub: Subscriber, conv: Conversation, count: int, cursor: str | None) -> None:
    sync = conv.sync
    assert sync is not None
    flight = conv.sync_flight
    freed = 0
    for _ in range(count):
        freed += flight.pop()[1]
    conv.sync_bytes -= freed
    sub.inflight -= freed
    sync.items -= count
    sync.pages_done = False
    sync.page = None  # read again from the last item taken: a page asked for is not
    sync.reading = 0  # the one that follows it any more
    sync.cursor = cursor


def _unrelease(sub: Subscriber, conv: Conversation, entries: list[tuple[int, int]]) -> None:
    conv.sync_flight.extendleft(reversed(entries))
    freed = sum(size for _, size in entries)
    conv.sync_bytes += freed
    sub.inflight += freed


__all__ = [
    "BEATS",
    "HEARTBEAT",
    "LIVE",
    "RELEASE",
    "RESEND",
    "SYNC_END",
    "SYNC_ITEMS",
    "Batch",
    "take_back",
]
