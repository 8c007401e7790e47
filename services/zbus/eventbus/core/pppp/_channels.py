"""PPPP channels and their sequences, sans-I/O (ADR 0006, "Channels and their sequences").

A channel is a topic prefix. Its sequence numbers are a function of the bus's log: from
a checkpoint ``(cseq, seq)`` on, every logged event whose topic starts with the channel
and whose global sequence is above ``seq`` gets ``cseq + 1``, ``cseq + 2``, ... in log
order. Nothing is stored per event; after a restart the same events are numbered the same
way by reading the log from the checkpoint.

To find channel sequence ``n`` again a channel keeps, besides its checkpoint:

- ``recent``: the global sequence of each of its latest messages while the event cache
  still holds them (trimmed as the cache evicts: bounded by the cache);
- ``marks``: one ``(cseq, seq)`` every :data:`MARK_EVERY` sequences above the checkpoint,
  from which a log read finds ``n`` by skipping fewer than :data:`MARK_EVERY` events.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

from zbus.eventbus.core.pppp._state import STATE_TOPIC

MARK_EVERY = 256
#: Channels at most before matching a topic walks its prefixes instead of the channels.
_SCAN_CHANNELS = 16
#: Topics whose channels :meth:`ChannelIndex.route` remembers (then it starts afresh).
ROUTES = 1024


@dataclass(slots=True)
class Channel:
    """One channel: where its numbering stands and how to find its messages."""

    name: str
    checkpoint: tuple[int, int]  # (cseq, seq): cseq messages up to global seq
    head: int = 0  # the last channel sequence given
    through: int = 0  # global sequence up to which this channel is numbered
    marks: list[tuple[int, int]] = field(default_factory=list)
    # Global sequences of messages recent_base+1..head: recent[cut:] (a list, so that
    # any of them is found at once; the dead head is cut away in large steps).
    recent: list[int] = field(default_factory=list)
    recent_base: int = 0
    cut: int = 0
    subscribers: set[bytes] = field(default_factory=set)  # identities with a conversation
    uid: int = 0  # unique among the channels of a door's life: a recreated channel's
    # messages are numbered afresh, so nothing read for the old one may be taken for them
    # False while a replicated bus's in-sync replicas do not hold its checkpoint yet: it
    # is numbered, and nothing of it is sent (ADR 0010).
    settled: bool = True
    raw: bytes = field(init=False, default=b"")  # the name as sent, encoded once

    def __post_init__(self) -> None:
        self.head, self.through = self.checkpoint
        self.recent_base = self.head
        self.raw = self.name.encode("utf-8")

    def number(self, seq: int) -> int | None:
        """Give the event at global ``seq`` (whose topic matches) its channel sequence;
        None when this channel is numbered past it already (after a restart)."""
        if seq <= self.through:
            return None
        self.head += 1
        self.through = seq
        if self.head % MARK_EVERY == 0:
            self.marks.append((self.head, seq))
        self.recent.append(seq)
        return self.head

    def trim_recent(self, oldest_cached: int) -> None:
        """Forget the global sequences of messages the cache no longer holds."""
        recent, cut = self.recent, self.cut
        if cut >= len(recent) or recent[cut] >= oldest_cached:
            return
        end = bisect.bisect_left(recent, oldest_cached, cut)
        self.recent_base += end - cut
        if end > 4096 and end * 2 > len(recent):
            del recent[:end]
            end = 0
        self.cut = end

    def recent_offset(self) -> int:
        """``recent[cseq + offset]`` is message ``cseq``'s global sequence, for an index
        from :attr:`cut` to ``len(recent) - 1`` (the pump's inlined :meth:`lookup`)."""
        return self.cut - self.recent_base - 1

    def lookup(self, cseq: int) -> int | None:
        """The global sequence of message ``cseq`` when it is recent, else None."""
        index = cseq + self.recent_offset()
        if self.cut <= index < len(self.recent):
            return self.recent[index]
        return None

    def known_at_or_below(self, cseq: int) -> tuple[int, int]:
        """The highest ``(c, seq)`` with ``c <= cseq`` that is known: message ``c`` has
        global ``seq`` (or, for the checkpoint, ``c`` messages end at ``seq``)."""
        cseq = min(cseq, self.head)
        exact = self.lookup(cseq)
        if exact is not None:
            return cseq, exact
        best = self.checkpoint
        i = bisect.bisect_right(self.marks, (cseq, 1 << 64)) - 1
        if i >= 0 and self.marks[i][0] > best[0]:
            best = self.marks[i]
        return best

    def locate(self, cseq: int) -> tuple[int, int]:
        """Where a log read for message ``cseq`` starts: ``(after_seq, skip)``: read the
        channel's events above ``after_seq`` and skip ``skip`` of them."""
        c, seq = self.known_at_or_below(cseq - 1)
        return seq, cseq - 1 - c

    def move_checkpoint(self, acked: int) -> bool:
        """Move the checkpoint up to the best known position at or below ``acked`` (every
        subscriber has ACKed up to there); True when it moved."""
        c, seq = self.known_at_or_below(acked)
        if c <= self.checkpoint[0]:
            return False
        self.checkpoint = (c, seq)
        cut = bisect.bisect_right(self.marks, (c, 1 << 64))
        del self.marks[:cut]
        return True


class ChannelIndex:
    """Every channel, matched against topics."""

    def __init__(self) -> None:
        self.channels: dict[str, Channel] = {}
        self._uids = 0
        self._routes: dict[str, tuple[bytes, tuple[Channel, ...]]] = {}

    def __len__(self) -> int:
        return len(self.channels)

    def get(self, name: str) -> Channel | None:
        return self.channels.get(name)

    def add(self, name: str, checkpoint: tuple[int, int]) -> Channel:
        self._uids += 1
        channel = Channel(name, checkpoint, uid=self._uids)
        self.channels[name] = channel
        self._routes.clear()
        return channel

    def remove(self, name: str) -> None:
        self.channels.pop(name, None)
        self._routes.clear()

    def route(self, topic: str) -> tuple[bytes, tuple[Channel, ...]]:
        """``topic`` encoded and the channels it matches, remembered for the next event
        of the same topic (at most :data:`ROUTES` topics, forgotten when a channel comes
        or goes)."""
        routes = self._routes
        got = routes.get(topic)
        if got is None:
            if len(routes) >= ROUTES:
                routes.clear()
            got = routes[topic] = (topic.encode("utf-8"), tuple(self.matching(topic)))
        return got

    def matching(self, topic: str) -> list[Channel]:
        """The channels whose prefix ``topic`` has (none for the door's own state)."""
        channels = self.channels
        if topic.startswith(STATE_TOPIC):
            return []
        if len(channels) <= _SCAN_CHANNELS:
            return [c for c in channels.values() if topic.startswith(c.name)]
        out = []
        for end in range(len(topic) + 1):
            channel = channels.get(topic[:end])
            if channel is not None:
                out.append(channel)
        return out

    def lowest_checkpoint(self) -> int | None:
        """The global sequence retention must keep everything above (None: no channel)."""
        if not self.channels:
            return None
        return min(c.checkpoint[1] for c in list(self.channels.values()))


__all__ = ["MARK_EVERY", "Channel", "ChannelIndex"]
