"""The event bus's PPPP door (seed 003, ADR 0006), sans-I/O.

The wiring (:mod:`zbus.eventbus.server.pppp_door`) feeds :meth:`PpppCore.receive` every
message the ROUTER on port 5560 reads, with its identity; feeds :meth:`PpppCore.add_events`
every event the bus committed, in global sequence order; calls :meth:`PpppCore.tick` for
the timers and :meth:`PpppCore.pump` to send, with a ``send`` that reports whether
ZeroMQ took the message; and stores what :meth:`PpppCore.take_changes` hands out. The
core reads no clock and no socket: ``now`` is monotonic seconds. Messages older than the
cache are read through an :class:`EventSource`, the log behind an interface.

What the core keeps is positions, not messages (``docs/protocols/pppp.md``, "The door as
served", has the memory bound): per channel its numbering
(:mod:`~zbus.eventbus.core.pppp_channels`), per subscriber and channel ``acked``, ``next``
and the ranges to resend (:mod:`~zbus.eventbus.core.pppp_subscribers`), and one cache of
recent events shared by all (:mod:`~zbus.eventbus.core.pppp_cache`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from zbus.common.protocols.errors import ProtocolError
from zbus.common.protocols.pppp import (
    AckNack,
    Custom,
    Heartbeat,
    Subscribe,
    decode_from_subscriber,
)
from zbus.common.rejects import reject_reason
from zbus.eventbus.core.pppp_cache import (
    ENTRY_OVERHEAD,
    EventCache,
    Payload,
    ReadBuffer,
    payload_bytes,
    payload_frames,
)
from zbus.eventbus.core.pppp_channels import Channel, ChannelIndex
from zbus.eventbus.core.pppp_subscribers import (
    MESSAGE_OVERHEAD,
    Conversation,
    Subscriber,
    Sync,
    Times,
)
from zbus.eventbus.core.pppp_sync import HEARTBEAT, SyncPump
from zbus.eventbus.core.pppp_timers import Deadlines
from zbus.eventbus.core.pppp_types import (
    COMMANDS,
    MAX_CHANNEL_BYTES,
    REASONS,
    SENT,
    Changes,
    EventSource,
    Limits,
    MiB,
    Send,
)

PUMP_BUDGET = 256  # messages sent to one subscriber before the next one gets a turn
READ_PAGE = 1024  # messages read from the log at once for a backlog


class PpppCore:
    """Channels, subscribers, their positions and timers."""

    def __init__(self, times: Times, limits: Limits, source: EventSource) -> None:
        self.times = times
        self.limits = limits
        self.source = source
        self.channels = ChannelIndex()
        self.subscribers: dict[bytes, Subscriber] = {}
        self.cache = EventCache(limits.cache_bytes)
        self.reads = ReadBuffer(max(MiB, limits.cache_bytes // 8))
        self.taken = 0  # the global sequence up to which events were taken in
        self.ready: set[bytes] = set()  # live subscribers that may have something to send
        self.received = dict.fromkeys(COMMANDS, 0)
        self.malformed = dict.fromkeys(REASONS, 0)
        self.sent = dict.fromkeys(SENT, 0)
        self.nacks = 0  # messages NACKed
        self.first_idle_resends = 0
        self.disconnects = 0
        self.grace_expiries = 0
        self.unavailable = 0  # messages the log no longer had (never, with the hold)
        self.refusals: list[tuple[bytes, str, str]] = []  # for the wiring to log
        self.customs: list[tuple[bytes, tuple[bytes, ...]]] = []  # to publish as events
        self._positions: dict[tuple[bytes, str], int | None] = {}
        self._checkpoints: dict[str, tuple[int, int] | None] = {}
        self._moved: set[str] = set()
        self.timers = Deadlines()
        self.syncs = SyncPump(source, limits, self.sent)

    # ------------------------------------------------------------------ restart
    def load(
        self,
        taken: int,
        channels: Iterable[tuple[str, int, int]],
        positions: Iterable[tuple[bytes, str, int]],
        now: float,
    ) -> None:
        """Take back what was stored: channels at their checkpoints, and subscribers,
        not connected, each conversation kept for the grace period from ``now``."""
        self.taken = taken
        for name, cseq, seq in channels:
            self.channels.add(name, (cseq, seq))
        for identity, name, acked in positions:
            channel = self.channels.get(name)
            if channel is None or acked < channel.checkpoint[0]:
                self._positions[(identity, name)] = None
                continue
            sub = self.subscribers.get(identity)
            if sub is None:
                sub = self.subscribers[identity] = Subscriber(
                    identity, now, now, now, now, live=False
                )
            sub.conversations[name] = Conversation(
                channel, acked, acked + 1, live=False, grace_until=now + self.times.grace
            )
            channel.subscribers.add(identity)
        for name, channel in list(self.channels.channels.items()):
            if not channel.subscribers:
                self._drop_channel(name)
        for identity in self.subscribers:
            self.timers.set(identity, now)

    # ------------------------------------------------------------------ inbound
    def receive(
        self, identity: bytes, frames: list[bytes], now: float, connection: object = None
    ) -> None:
        """One message from a subscriber, on ``connection`` (any value that differs for a
        new connection of the same identity; None: unknown)."""
        sub = self.subscribers.get(identity)
        if sub is not None and connection is not None and connection != sub.connection:
            if sub.connection is not None:
                self.gone(identity)  # a new connection: the old one's queue went with it
            sub.connection = connection
        try:
            cmd = decode_from_subscriber(frames)
        except ProtocolError as exc:
            self.received["malformed"] += 1
            if sub is not None and sub.live:
                sub.heard(now)  # any traffic is a sign of life
            self._refuse(identity, reject_reason(exc), str(exc))
            return
        if type(cmd) is Subscribe:
            self.received["SUBSCRIBE"] += 1
            if len(frames[0]) - 1 > MAX_CHANNEL_BYTES:
                self._refuse(
                    identity,
                    "channel_too_long",
                    f"a channel has {MAX_CHANNEL_BYTES} bytes at most, got {len(frames[0]) - 1}",
                )
                return
            self._subscribe(identity, cmd.channel, now, connection)
            return
        if type(cmd) is AckNack:
            self.received["ACK/NACK"] += 1
        elif type(cmd) is Heartbeat:
            self.received["HEARTBEAT"] += 1
        else:
            self.received["CUSTOM"] += 1
        if sub is None or not sub.live:
            self._refuse(identity, "no_conversation", "not subscribed: SUBSCRIBE first")
            return
        sub.heard(now)
        if type(cmd) is AckNack:
            self._ack(sub, cmd, now)
        elif type(cmd) is Custom:
            self._custom(sub, cmd)

    def _refuse(self, identity: bytes, reason: str, detail: str) -> None:
        self.malformed[reason] += 1
        if len(self.refusals) < 1000:
            self.refusals.append((identity, reason, detail))

    def _subscribe(self, identity: bytes, name: str, now: float, connection: object) -> None:
        sub = self.subscribers.get(identity)
        if sub is None:
            if len(self.subscribers) >= self.limits.max_subscribers:
                self._refuse(
                    identity,
                    "too_many_subscribers",
                    f"the door serves {self.limits.max_subscribers} subscribers at most",
                )
                return
            sub = Subscriber(identity, now, now, now, now, connection=connection)
            self.subscribers[identity] = sub
        conv = sub.conversations.get(name)
        if conv is None and len(sub.conversations) >= self.limits.max_channels:
            self._refuse(
                identity,
                "too_many_channels",
                f"a subscriber has {self.limits.max_channels} channels at most",
            )
            if not sub.conversations:
                del self.subscribers[identity]
            return
        if not sub.live:
            sub.live = True
            sub.sent_at = sub.published_at = now
            sub.beat = False
        sub.heard(now)
        sub.answered_at = now
        if conv is None:
            channel = self.channels.get(name)
            if channel is None:
                channel = self.channels.add(name, (0, self.taken))
                self._checkpoints[name] = channel.checkpoint
            conv = Conversation(channel, channel.head, channel.head + 1)
            conv.sync = Sync(channel.head, channel.through)
            channel.subscribers.add(identity)
            sub.conversations[name] = conv
        elif conv.sync is not None:
            # A SUBSCRIBE while a SYNC is not ACKed: the SYNC again, at today's head.
            channel = conv.channel
            conv.acked = channel.head
            conv.sync = Sync(channel.head, channel.through)
            conv.restart()
            self._moved.add(name)
        else:
            conv.restart()  # a subscriber the door knows: its backlog from acked + 1
        self.ready.add(identity)
        self.timers.earlier(identity, now)

    def _ack(self, sub: Subscriber, cmd: AckNack, now: float) -> None:
        conv = sub.conversations.get(cmd.channel)
        if conv is None or not conv.live:
            self._refuse(sub.identity, "not_subscribed", f"no subscription to {cmd.channel!r}")
            return
        sub.answered_at = now
        if len(cmd.missing) > self.limits.window:
            self._refuse(
                sub.identity,
                "too_many_ranges",
                f"{len(cmd.missing)} NACK ranges: at most {self.limits.window} (the window)",
            )
            return
        if cmd.highest > conv.sent:
            self._refuse(
                sub.identity,
                "ack_above_sent",
                f"ACK of {cmd.highest} on {cmd.channel!r}: only up to {conv.sent} was sent",
            )
            return
        sync = conv.sync
        if sync is not None:
            if not sync.ended or cmd.highest < sync.head:
                return  # the SYNC is not complete on the subscriber's side yet
            sync.acked = True
            conv.sync = None
            self._positions[(sub.identity, cmd.channel)] = conv.acked
            sub.inflight -= conv.release_sync()
            self.ready.add(sub.identity)
        moved, nacked = conv.apply_ack(cmd.highest, cmd.missing)
        if nacked:
            self.nacks += nacked
        if moved:
            self._positions[(sub.identity, cmd.channel)] = conv.acked
            self._moved.add(cmd.channel)
            sub.inflight -= conv.release()
        if moved or nacked:
            self.ready.add(sub.identity)

    def gone(self, identity: bytes) -> None:
        """ZeroMQ no longer has ``identity``'s connection (a send found it unreachable, or
        it spoke on a new one): what was queued for it is gone, so nothing is counted in
        flight any more, and its conversations go on from their first message not ACKed
        (one whose SYNC is under way finds out from the SYNC's count)."""
        sub = self.subscribers.get(identity)
        if sub is None:
            return
        sub.connection = None
        sub.inflight = 0
        for conv in sub.conversations.values():
            conv.forget()
            if conv.live and conv.sync is None and conv.sent > conv.acked:
                conv.next = conv.acked + 1
                conv.resend.clear()
        if sub.live:
            self.ready.add(identity)

    def _custom(self, sub: Subscriber, cmd: Custom) -> None:
        size = sum(map(len, cmd.payload)) + 5 * len(cmd.payload) + 5  # as msgpack
        if size > self.limits.max_custom_bytes:
            self._refuse(
                sub.identity,
                "custom_too_large",
                f"CUSTOM of {size} bytes: an event holds {self.limits.max_custom_bytes} at most",
            )
            return
        self.customs.append((sub.identity, cmd.payload))

    # ------------------------------------------------------------------ events
    def add_events(self, first_seq: int, rows: Iterable[Sequence[Any]]) -> None:
        """Events the bus committed, ``[topic, producer, timestamp, uuid, data]`` from
        global sequence ``first_seq`` on (the stream's batches)."""
        self.add_sequenced(enumerate(rows, first_seq))

    def add_sequenced(self, events: Iterable[tuple[int, Sequence[Any]]]) -> None:
        """Events as ``(global seq, [topic, producer, timestamp, uuid, data])`` in
        sequence order (the log's, which skips those of no channel); those up to
        :attr:`taken` are skipped. An event some channel numbers is encoded once, here,
        into the cache: every delivery of it sends those frames."""
        touched: dict[str, Channel] = {}
        route, cache, taken = self.channels.route, self.cache, self.taken
        try:
            for seq, row in events:
                if seq <= taken:
                    continue
                taken = seq
                topic, channels = route(row[0])
                numbered = False
                for channel in channels:
                    if channel.number(seq) is not None:
                        numbered = True
                        touched[channel.name] = channel
                if numbered:
                    payload = payload_frames(seq, topic, row[3], row[2], row[1], row[4])
                    cache.add(seq, payload, sum(map(len, payload)) + ENTRY_OVERHEAD)
        finally:
            self.taken = taken
        if touched:
            oldest = cache.oldest
            for channel in touched.values():
                channel.trim_recent(oldest)
                self.ready.update(channel.subscribers)

    def advance(self, through: int) -> None:
        """No event up to global ``through`` concerns any channel (none was there)."""
        self.taken = max(self.taken, through)

    # ------------------------------------------------------------------ sending
    def pump(self, now: float, send: Send) -> None:
        """Send what the ready subscribers can take: SYNCs, resends, new messages."""
        subscribers, times, earlier = self.subscribers, self.times, self.timers.earlier
        for identity in list(self.ready):
            sub = subscribers.get(identity)
            if sub is None or not sub.live:
                self.ready.discard(identity)
                continue
            sends = sub.sends
            if self._pump_one(sub, now, send):
                self.ready.discard(identity)
            if sub.sends != sends:
                earlier(identity, sub.next_due(times))

    @property
    def has_work(self) -> bool:
        """Some ready subscriber was not stopped by a full queue."""
        subscribers = self.subscribers
        return any(
            (s := subscribers.get(i)) is not None and not s.blocked for i in list(self.ready)
        )

    def _pump_one(self, sub: Subscriber, now: float, send: Send) -> bool:
        """True when everything that can go to ``sub`` now went."""
        budget = PUMP_BUDGET
        for conv in list(sub.conversations.values()):
            if not conv.live:
                continue
            budget = self._pump_conversation(sub, conv, now, send, budget)
            if budget < 0:
                sub.blocked = True
                return False
            if budget == 0:
                sub.blocked = False
                return False
        sub.blocked = False
        return True

    def _pump_conversation(
        self, sub: Subscriber, conv: Conversation, now: float, send: Send, budget: int
    ) -> int:
        """Send to one conversation; returns the budget left, or -1 when the queue is full."""
        channel, identity = conv.channel, sub.identity
        raw = channel.raw
        sync = conv.sync
        if sync is not None and not sync.ended:
            budget = self.syncs.pump(sub, conv, sync, now, send, budget)
            if budget <= 0 or not sync.ended:
                return budget
        extra = MESSAGE_OVERHEAD - ENTRY_OVERHEAD + len(raw) + 8 + len(identity)
        peer_bytes = self.limits.peer_bytes
        while conv.resend and budget > 0:
            first, last = conv.resend[0]
            payload = self._message(channel, first)
            if payload is not None:
                size = payload_bytes(payload) + extra
                if sub.inflight and sub.inflight + size > peer_bytes:
                    return budget  # no room until an ACK
                if not send(identity, [raw, first.to_bytes(8, "big"), *payload]):
                    return -1
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
        return self._pump_new(sub, conv, now, send, budget)

    def _pump_new(
        self, sub: Subscriber, conv: Conversation, now: float, send: Send, budget: int
    ) -> int:
        """New messages from ``next`` within the window and the subscriber's bytes in
        flight: the hot path. The payload of a cached message is the cache's own frames,
        its size counted once."""
        channel, identity, raw = conv.channel, sub.identity, conv.channel.raw
        limit = min(channel.head, conv.acked + self.limits.window)
        nxt, inflight, peer_bytes = conv.next, sub.inflight, self.limits.peer_bytes
        if budget <= 0 or nxt > limit or inflight >= peer_bytes:
            return budget
        entry_of, recent, offset = self.cache.entry, channel.recent, channel.recent_offset()
        cut, held = channel.cut, len(channel.recent)
        extra = MESSAGE_OVERHEAD - ENTRY_OVERHEAD + len(raw) + 8 + len(identity)
        record = conv.flight.append
        count, full = 0, False
        while budget > 0 and nxt <= limit:
            i = nxt + offset
            entry = entry_of(recent[i]) if cut <= i < held else None
            if entry is None:
                payload = self._message(channel, nxt)
                if payload is None:
                    self.unavailable += 1
                    nxt += 1
                    continue
                size = payload_bytes(payload)
            else:
                payload, size = entry
            size += extra
            if inflight and inflight + size > peer_bytes:
                break  # no room until an ACK
            if not send(identity, [raw, nxt.to_bytes(8, "big"), *payload]):
                full = True
                break
            record((nxt, size))
            nxt += 1
            inflight += size
            count += 1
            budget -= 1
        conv.next = nxt
        conv.inflight_bytes += inflight - sub.inflight
        sub.inflight = inflight
        if count:
            sub.sends += count
            self.sent["publish"] += count
            sub.sent(now, publish=True)
        return -1 if full else budget

    def _message(self, channel: Channel, cseq: int) -> Payload | None:
        """The payload of message ``cseq`` of ``channel``: from the cache, or read."""
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
        after, skip = channel.locate(cseq)
        count = min(READ_PAGE, channel.head - cseq + 1)
        got = self.source.read(channel.name, after, skip, count)
        for i, (_, item) in enumerate(got):
            self.reads.add(channel.uid, cseq + i, item)
        return got[0][1] if got else None

    # ------------------------------------------------------------------ timers
    def tick(self, now: float, send: Send) -> None:
        """Heartbeats, first-idle resends, disconnects and grace expiries due by ``now``:
        only the subscribers due are looked at."""
        subscribers = self.subscribers
        for identity in self.timers.due(now):
            sub = subscribers.get(identity)
            if sub is not None:
                self._tick_one(sub, now, send)

    def _tick_one(self, sub: Subscriber, now: float, send: Send) -> None:
        times, identity = self.times, sub.identity
        if sub.live:
            if now >= sub.dead_at(times):
                self._disconnect(sub, now)
            else:
                resend_at = sub.resend_due(times)
                if resend_at is not None and now >= resend_at:
                    self._resend_last(sub, now)
                if now >= sub.heartbeat_due(times) and send(identity, HEARTBEAT):
                    self.sent["heartbeat"] += 1
                    sub.sends += 1
                    sub.sent(now, publish=False)
        for name, conv in list(sub.conversations.items()):
            if conv.grace_until is not None and now >= conv.grace_until:
                self._drop_conversation(sub, name)
                self.grace_expiries += 1
        if not sub.conversations and not sub.live:
            del self.subscribers[identity]
            return
        self.timers.set(identity, sub.next_due(times))

    def next_deadline(self) -> float | None:
        """When :meth:`tick` has something to do next (None: nothing until a message)."""
        return self.timers.next()

    def _resend_last(self, sub: Subscriber, now: float) -> None:
        """The first-idle rule: the last message sent, again (its ACK tells the rest)."""
        for conv in sub.conversations.values():
            if not conv.live or not conv.owes_ack:
                continue
            if conv.sync is not None and conv.acked >= conv.sent:
                conv.sync.ended = False  # the SYNC's end marker is what was sent last
                conv.sync.pages_done = True
            else:
                conv.add_resend([(conv.sent, conv.sent)])
            self.first_idle_resends += 1
        sub.published_at = now  # not again before another misses x first idle
        self.ready.add(sub.identity)

    def _disconnect(self, sub: Subscriber, now: float) -> None:
        sub.live = False
        sub.blocked = False
        self.disconnects += 1
        self.ready.discard(sub.identity)
        for conv in sub.conversations.values():
            if conv.live:
                conv.live = False
                conv.grace_until = now + self.times.grace

    def _drop_conversation(self, sub: Subscriber, name: str) -> None:
        conv = sub.conversations.pop(name)
        channel = conv.channel
        channel.subscribers.discard(sub.identity)
        self._positions[(sub.identity, name)] = None
        if not channel.subscribers:
            self._drop_channel(name)
        else:
            self._moved.add(name)

    def _drop_channel(self, name: str) -> None:
        self.channels.remove(name)
        self._checkpoints[name] = None
        self._moved.discard(name)

    # ------------------------------------------------------------------ storing
    def take_changes(self) -> Changes:
        """Positions and checkpoints to store since the last call. A checkpoint moves
        only to where every conversation of its channel has ACKed."""
        for name in self._moved:
            channel = self.channels.get(name)
            if channel is None:
                continue
            lowest = min(
                (self.subscribers[i].conversations[name].acked for i in channel.subscribers),
                default=channel.head,
            )
            if channel.move_checkpoint(lowest):
                self._checkpoints[name] = channel.checkpoint
        self._moved.clear()
        changes = Changes(self._positions, self._checkpoints)
        self._positions, self._checkpoints = {}, {}
        return changes

    def restore(self, changes: Changes) -> None:
        """Changes that could not be stored: kept for the next try (newer ones win)."""
        self._positions = {**changes.positions, **self._positions}
        self._checkpoints = {**changes.checkpoints, **self._checkpoints}

    def backlog(self, channel: Channel) -> int:
        """Messages of ``channel`` some subscriber has not ACKed yet, at most."""
        lowest = channel.head
        for identity in list(channel.subscribers):
            sub = self.subscribers.get(identity)
            conv = sub.conversations.get(channel.name) if sub is not None else None
            if conv is not None:
                lowest = min(lowest, conv.acked)
        return channel.head - lowest


__all__ = ["COMMANDS", "REASONS", "SENT", "Changes", "EventSource", "Limits", "PpppCore", "Send"]
