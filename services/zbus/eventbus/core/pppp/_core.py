"""The event bus's PPPP door (seed 003, ADR 0006), sans-I/O.

The door's shell (:mod:`zbus.eventbus.doors.pppp.door`) feeds :meth:`PpppCore.receive`
every message its ROUTER reads, with its identity; :meth:`PpppCore.add_events` every
event the bus committed, in global sequence order; calls :meth:`PpppCore.tick` when
:meth:`PpppCore.next_deadline` is due and :meth:`PpppCore.pump` to hand out what the
subscribers can take. :meth:`PpppCore.take` then gives what to do: the messages to send
(a :class:`~zbus.eventbus.core.pppp.Batch` per subscriber), the reads of the log to make,
and the CUSTOMs to publish. The shell answers each read with :meth:`PpppCore.on_messages`,
:meth:`PpppCore.on_sync_page` or :meth:`PpppCore.on_log_page`, and tells what ZeroMQ did
not take with :meth:`PpppCore.unsent`. At its group-commit pace it stores what
:meth:`PpppCore.take_changes` hands out and moves the retention hold as told. The core
reads no clock, no socket and no file: ``now`` is monotonic seconds.

What the core keeps is positions, not messages (``docs/protocols/pppp.md``, "The door as
served", has the memory bound): per channel its numbering
(:mod:`~zbus.eventbus.core.pppp._channels`), per subscriber and channel ``acked``, ``next``
and the ranges to resend (:mod:`~zbus.eventbus.core.pppp._subscribers`), and one cache of
recent events shared by all (:mod:`~zbus.eventbus.core.pppp._cache`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

from zbus.common.protocols.errors import ProtocolError
from zbus.common.protocols.pppp import (
    AckNack,
    Custom,
    Heartbeat,
    Subscribe,
    decode_from_subscriber,
)
from zbus.common.rejects import reject_reason
from zbus.eventbus.core.pppp._batch import BEATS, HEARTBEAT, Batch
from zbus.eventbus.core.pppp._cache import (
    ENTRY_OVERHEAD,
    payload_frames,
)
from zbus.eventbus.core.pppp._channels import Channel, ChannelIndex
from zbus.eventbus.core.pppp._sending import Sender
from zbus.eventbus.core.pppp._subscribers import (
    Conversation,
    Subscriber,
    Sync,
    Times,
)
from zbus.eventbus.core.pppp._timers import Deadlines
from zbus.eventbus.core.pppp._types import (
    COMMANDS,
    MAX_CHANNEL_BYTES,
    REASONS,
    SENT,
    CatchUpRead,
    Changes,
    Limits,
    MiB,
    Read,
)

CATCH_UP_PAGE = 2000  # events read from the log at once to catch up
CATCH_UP_BYTES = 8 * MiB


class Output(NamedTuple):
    """What :meth:`PpppCore.take` hands the shell.

    Attributes:
        sends: per subscriber, the messages to send in order (:meth:`PpppCore.unsent`
            when ZeroMQ did not take them all).
        reads: the reads of the log to make and answer.
        customs: ``(identity, payload)`` of each CUSTOM to publish as an event.
    """

    sends: list[Batch]
    reads: list[Read]
    customs: list[tuple[bytes, tuple[bytes, ...]]]


class PpppCore(Sender):
    """Channels, subscribers, their positions and timers."""

    def __init__(self, times: Times, limits: Limits) -> None:
        self.times = times
        self.limits = limits
        self.channels = ChannelIndex()
        self.subscribers: dict[bytes, Subscriber] = {}
        self.taken = 0  # the global sequence up to which events were taken in
        self.ready: set[bytes] = set()  # live subscribers that may have something to send
        self.received = dict.fromkeys(COMMANDS, 0)
        self.malformed = dict.fromkeys(REASONS, 0)
        self.sent = dict.fromkeys(SENT, 0)
        self.nacks = 0  # messages NACKed
        self.first_idle_resends = 0
        self.disconnects = 0
        self.grace_expiries = 0
        self.stream_gaps = 0  # gaps in the bus's stream, repaired from the log
        self.refusals: list[tuple[bytes, str, str]] = []  # for the shell to log
        self.customs: list[tuple[bytes, tuple[bytes, ...]]] = []  # to publish as events
        self.behind = False  # the log may hold events not taken in: catch up from it
        self.held: int | None = 0  # the retention hold last handed out
        self._catching_up = False  # a CatchUpRead is out
        self._positions: dict[tuple[bytes, str], int | None] = {}
        self._checkpoints: dict[str, tuple[int, int] | None] = {}
        self._moved: set[str] = set()
        self.timers = Deadlines()
        #: A replicated bus's door: a new channel sends nothing until :meth:`settle`.
        self.replicated = False
        super().__init__(limits)

    # ------------------------------------------------------------------ restart
    def load(
        self,
        taken: int,
        channels: Iterable[tuple[str, int, int]],
        positions: Iterable[tuple[bytes, str, int]],
        now: float,
    ) -> None:
        """Take back what was stored: channels at their checkpoints, and subscribers,
        not connected, each conversation kept for the grace period from ``now``. The log
        may hold events above ``taken``: the core catches up from it."""
        self.taken = taken
        self.behind = True
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
                channel.settled = not self.replicated
                self._checkpoints[name] = channel.checkpoint
            conv = Conversation(channel, channel.head, channel.head + 1)
            conv.sync = Sync(channel.head, channel.through)
            if self.replicated:  # where it starts goes into the log before anything is sent
                conv.settled = False
                self._positions[(identity, name)] = conv.acked
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

    def settle(self, name: str, checkpoint: tuple[int, int]) -> bool:
        """The in-sync replicas hold channel ``name``'s checkpoint: its conversations may
        send. True when it settled a channel waiting for that checkpoint."""
        channel = self.channels.get(name)
        if channel is None or channel.settled or channel.checkpoint != checkpoint:
            return False
        channel.settled = True
        self.ready.update(channel.subscribers)
        return True

    def settle_position(self, identity: bytes, name: str, acked: int) -> bool:
        """The in-sync replicas hold where ``identity``'s conversation on ``name`` starts:
        it may send. True when it settled a conversation waiting for that position."""
        sub = self.subscribers.get(identity)
        conv = sub.conversations.get(name) if sub is not None else None
        if conv is None or conv.settled or conv.acked != acked:
            return False
        conv.settled = True
        self.ready.add(identity)
        return True

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
    def add_events(self, first_seq: int, rows: Sequence[Sequence[Any]]) -> None:
        """Events the bus committed, ``[topic, producer, timestamp, uuid, data]`` from
        global sequence ``first_seq`` on (the stream's batches). A batch past a gap, or
        any while catching up, is left to the log."""
        if self.behind:
            return
        if first_seq > self.taken + 1:
            self._gap()
            return
        self.add_sequenced(enumerate(rows, first_seq))

    def log_at(self, last_seq: int) -> None:
        """The stream's heartbeat: the log's last sequence is ``last_seq``."""
        if not self.behind and last_seq > self.taken:
            self._gap()

    def _gap(self) -> None:
        if self.channels:
            self.stream_gaps += 1  # with no channel there is nothing to number: no gap
        self.behind = True

    def on_log_page(
        self, read: CatchUpRead, events: Iterable[tuple[int, Sequence[Any]]], last: int | None
    ) -> None:
        """The answer to ``read``: the events read as ``(global seq, row)``, and the log's
        last sequence when no more page follows (None: read on)."""
        self._catching_up = False
        if read.channels:
            self.add_sequenced(events)
        if last is not None:
            self.advance(last)
            self.behind = False

    def read_failed(self, read: CatchUpRead) -> None:
        """``read`` could not be made: the core asks again."""
        self._catching_up = False

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

    # ------------------------------------------------------------------ output
    def take(self) -> Output:
        """What to send, what to read and what to publish, since the last call. Every
        batch is sent (or reported :meth:`unsent`) and every read answered before the
        core is given anything else."""
        if self.behind and not self._catching_up:
            self._catching_up = True
            names = tuple(self.channels.channels)
            if names:
                self.requests.append(CatchUpRead(names, self.taken, CATCH_UP_PAGE, CATCH_UP_BYTES))
            else:  # nothing to number: only where the log ends
                self.requests.append(CatchUpRead((), self.taken, 1, CATCH_UP_BYTES))
        sends = list(self.batches.values())
        self.batches.clear()
        reads = self.requests[:]
        self.requests.clear()
        customs, self.customs = self.customs, []
        return Output(sends, reads, customs)

    # ------------------------------------------------------------------ timers
    def tick(self, now: float) -> None:
        """Heartbeats, first-idle resends, disconnects and grace expiries due by ``now``:
        only the subscribers due are looked at."""
        subscribers = self.subscribers
        for identity in self.timers.due(now):
            sub = subscribers.get(identity)
            if sub is not None:
                self.tick_one(sub, now)

    def tick_one(self, sub: Subscriber, now: float) -> None:
        """The timers of one subscriber that is due."""
        times, identity = self.times, sub.identity
        if sub.live:
            if now >= sub.dead_at(times):
                self._disconnect(sub, now)
            else:
                resend_at = sub.resend_due(times)
                if resend_at is not None and now >= resend_at:
                    self._resend_last(sub, now)
                if now >= sub.heartbeat_due(times):
                    batch = self.batches.get(identity)
                    if batch is None:
                        batch = self.batches[identity] = Batch(sub)
                    batch.run(BEATS, None)
                    batch.messages.append(HEARTBEAT)
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
        hold = self.channels.lowest_checkpoint()
        changes = Changes(self._positions, self._checkpoints, hold, self.held)
        self._positions, self._checkpoints, self.held = {}, {}, hold
        return changes

    def restore(self, changes: Changes) -> None:
        """Changes that could not be stored: kept for the next try (newer ones win). A
        hold that was to go up after them goes up after the next write."""
        self._positions = {**changes.positions, **self._positions}
        self._checkpoints = {**changes.checkpoints, **self._checkpoints}
        if not changes.hold_first and self.held == changes.hold:
            self.held = changes.held

    def backlog(self, channel: Channel) -> int:
        """Messages of ``channel`` some subscriber has not ACKed yet, at most."""
        lowest = channel.head
        for identity in list(channel.subscribers):
            sub = self.subscribers.get(identity)
            conv = sub.conversations.get(channel.name) if sub is not None else None
            if conv is not None:
                lowest = min(lowest, conv.acked)
        return channel.head - lowest


__all__ = ["COMMANDS", "REASONS", "SENT", "Changes", "Limits", "Output", "PpppCore"]
