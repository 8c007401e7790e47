"""A PPPP door core on an in-memory log, and a subscriber's view of what it sends.

:class:`Door` is a shell as small as the real one: after each call into the core it
takes what the core hands out, sends each batch into a queue that may be full, tells the
core what did not go, and answers the reads from :class:`MemoryLog`.
"""

from __future__ import annotations

import uuid as uuidlib
from collections.abc import Callable
from dataclasses import dataclass, field

from zbus.common.protocols import pppp
from zbus.common.protocols.pppp_event import EventPayload, SyncEnd, decode_payload, encode_event
from zbus.eventbus.core.pppp import (
    Batch,
    CatchUpRead,
    Limits,
    MessagesRead,
    Payload,
    PpppCore,
    Read,
    Times,
)

TIMES = Times(first_idle=0.1, idle=1.0, misses=4, grace=300.0)


@dataclass
class MemoryLog:
    """The bus's log as a list: what the door's reads read."""

    events: list[tuple[int, str, bytes]] = field(default_factory=list)  # (seq, topic, data)
    reads: int = 0

    def append(self, topic: str, data: bytes = b"x") -> tuple[int, list[object]]:
        seq = len(self.events) + 1
        self.events.append((seq, topic, data))
        return seq, self.row(seq)

    def row(self, seq: int) -> list[object]:
        _, topic, data = self.events[seq - 1]
        return [topic, "p", "2026-01-01T00:00:00.000Z", str(uuidlib.UUID(int=seq)), data]

    def payload(self, seq: int) -> Payload:
        _, topic, data = self.events[seq - 1]
        event = EventPayload(
            topic, str(uuidlib.UUID(int=seq)), "2026-01-01T00:00:00.000Z", "p", data, seq
        )
        return encode_event("", 0, event).payload

    def read(
        self, channel: str, after_seq: int, skip: int, count: int
    ) -> list[tuple[int, Payload]]:
        self.reads += 1
        found = [s for s, t, _ in self.events if s > after_seq and t.startswith(channel)]
        return [(s, self.payload(s)) for s in found[skip : skip + count]]

    def sync_page(
        self, channel: str, after: str | None, through: int, limit: int
    ) -> tuple[list[Payload], str | None]:
        latest: dict[str, int] = {}
        for s, t, _ in self.events:
            if t.startswith(channel):
                latest[t] = s
        topics = sorted(t for t in latest if after is None or t > after)
        page = topics[:limit]
        items = [self.payload(latest[t]) for t in page if latest[t] <= through]
        return items, (page[-1] if len(topics) > limit else None)


class Door:
    """A core, its log, and what it sent to whom."""

    def __init__(self, *, times: Times = TIMES, **limits: int) -> None:
        self.log = MemoryLog()
        self.core = PpppCore(times, Limits(**limits))
        self.out: list[tuple[bytes, list[bytes]]] = []
        self.full: set[bytes] = set()  # identities whose queue is full
        self.gone: set[bytes] = set()  # identities whose connection is gone
        #: ``queue(identity, frames) -> bool``: whether ZeroMQ takes the message (None:
        #: it does unless the identity is in :attr:`full` or :attr:`gone`).
        self.queue: Callable[[bytes, list[bytes]], bool] | None = None
        self.customs: list[tuple[bytes, tuple[bytes, ...]]] = []
        self.now = 0.0

    def send(self, identity: bytes, frames: list[bytes]) -> bool:
        if self.queue is not None:
            if not self.queue(identity, frames):
                return False
        elif identity in self.full or identity in self.gone:
            return False
        self.out.append((identity, frames))
        return True

    def flush(self) -> None:
        """What the core handed out: sent (what did not go given back), reads answered
        (and what their answers make ready handed out too)."""
        core = self.core
        while True:
            sends, reads, customs = core.take()
            self.customs += customs
            for batch in sends:
                self._send_batch(batch)
            for read in reads:
                self.answer(read)
            if not reads:
                return
            core.pump(self.now)

    def _send_batch(self, batch: Batch) -> None:
        for taken, frames in enumerate(batch.messages):
            if not self.send(batch.identity, frames):
                self.core.unsent(batch, taken)
                if batch.identity in self.gone:
                    self.core.gone(batch.identity)
                return

    def answer(self, read: Read) -> None:
        """A read of the log, as the door's shell makes it."""
        if isinstance(read, MessagesRead):
            rows = self.log.read(read.channel, read.after_seq, read.skip, read.count)
            self.core.on_messages(read, rows)
        elif isinstance(read, CatchUpRead):
            found = [
                (s, self.log.row(s))
                for s, t, _ in self.log.events
                if s > read.after_seq and any(t.startswith(c) for c in read.channels)
            ]
            self.core.on_log_page(read, found, len(self.log.events))
        else:
            items, after = self.log.sync_page(read.channel, read.after, read.through, read.limit)
            self.core.on_sync_page(read, items, after)

    def publish(self, *topics: str) -> None:
        """Events committed and handed to the door, as the stream would."""
        for topic in topics:
            seq, row = self.log.append(topic)
            self.core.add_events(seq, [row])

    def receive(self, identity: bytes, cmd: pppp.PPPPCommand | list[bytes]) -> None:
        frames = cmd if isinstance(cmd, list) else pppp.encode(cmd)
        self.core.receive(identity, frames, self.now)

    def at(self, now: float) -> None:
        """Move the time to ``now`` and run the timers and the sending."""
        self.now = now
        self.core.tick(now)
        self.flush()
        self.core.pump(now)
        self.flush()

    def pump(self) -> None:
        self.core.pump(self.now)
        self.flush()

    def take(self, identity: bytes) -> list[pppp.PublisherCommand]:
        """What was sent to ``identity`` since the last take, decoded."""
        mine = [pppp.decode_from_publisher(f) for i, f in self.out if i == identity]
        self.out = [(i, f) for i, f in self.out if i != identity]
        return mine

    def messages(self, identity: bytes) -> list[tuple[int, str]]:
        """(sequence, topic) of each PUBLISH sent to ``identity`` since the last take;
        a SYNC end as (0, "<end h n>")."""
        out = []
        for cmd in self.take(identity):
            if isinstance(cmd, pppp.Publish):
                got = decode_payload(cmd)
                if isinstance(got, SyncEnd):
                    out.append((0, f"<end {got.head} {got.items}>"))
                else:
                    out.append((cmd.sequence, got.topic))
        return out

    def subscribe(self, identity: bytes, channel: str) -> list[tuple[int, str]]:
        """SUBSCRIBE, pump, and ACK the SYNC; returns the SYNC as sent."""
        self.receive(identity, pppp.Subscribe(channel))
        self.pump()
        sync = self.messages(identity)
        head = int(sync[-1][1].split()[1])
        self.receive(identity, pppp.AckNack(channel, head))
        return sync
