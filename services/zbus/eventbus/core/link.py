"""A door's link to the bus's log, its bookkeeping without sockets (sans-I/O).

A door that publishes into the log sends its events to the pipeline's collector as
``ZB-PUB`` batches with a confirm, as any zbus publisher does; a door that follows the
log reads the pipeline's stream. The shell, :class:`zbus.eventbus.doors.link.LogLink`,
owns both sockets; what here decides, it asks:

- :func:`chunks`: which events go in one batch, within the collector's event count
  (``max_batch_events``) and message size (``max_message_bytes``, less a margin for the
  batch's own framing);
- :class:`Confirms`: the batches in flight, each answered once: by ``ZB-CONFIRM`` with
  the sequence of each of its uuids (found again by any of them), by ``ZB-ERROR`` (the
  collector answers those in the order of the batches: the oldest), or by its deadline,
  after which it is given up and its late answer ignored. At most ``max_batches`` are in
  flight;
- :class:`StreamFollower`: the stream sequence expected next, so that a batch that
  starts above it reports the events missed (the stream's SUB drops when its queue is
  full), or a heartbeat says the log is past it.

Times are monotonic seconds, passed in.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from zbus.common.protocols.eventbus_limits import RECORD_OVERHEAD

__all__ = [
    "BATCH_MARGIN",
    "Confirms",
    "Outgoing",
    "StreamFollower",
    "chunks",
]

#: Bytes of a ``ZB-PUB`` message that are not its events' fields (kept free of events).
BATCH_MARGIN = 1024


@dataclass(frozen=True, slots=True)
class Outgoing:
    """An event a door hands to the log: the link adds its time and uuid. A door that
    needs to know whose event it was when the answer comes extends it."""

    topic: str
    producer: str
    data: bytes


T = TypeVar("T", bound=Outgoing)


def chunks(items: Sequence[T], max_events: int, max_message_bytes: int) -> Iterator[Sequence[T]]:
    """``items`` cut, in order, into batches of at most ``max_events`` events and
    ``max_message_bytes`` (each event counted with its fields at their largest); an event
    larger than that alone is a batch of its own."""
    if len(items) == 1:  # one event is one batch, whatever its size
        yield items
        return
    max_bytes = max_message_bytes - BATCH_MARGIN
    # The common case, a few events: one pass of sums, no copy when they fit.
    if (
        len(items) <= max_events
        and sum(len(item.data) for item in items) + RECORD_OVERHEAD * len(items) <= max_bytes
    ):
        if items:
            yield items
        return
    chunk: list[T] = []
    size = 0
    for item in items:
        cost = len(item.data) + RECORD_OVERHEAD
        if chunk and (len(chunk) >= max_events or size + cost > max_bytes):
            yield chunk
            chunk, size = [], 0
        chunk.append(item)
        size += cost
    if chunk:
        yield chunk


@dataclass(slots=True)
class _Batch(Generic[T]):
    deadline: float
    items: Sequence[T]


class Confirms(Generic[T]):
    """The batches in flight to the collector, oldest first, found again by any uuid."""

    def __init__(self, *, max_batches: int, timeout: float) -> None:
        self.max_batches = max_batches
        self.timeout = timeout
        self._batches: dict[str, _Batch[T]] = {}  # first uuid -> batch, in sending order

    def __len__(self) -> int:
        return len(self._batches)

    @property
    def full(self) -> bool:
        """No more batches may be sent until one is answered."""
        return len(self._batches) >= self.max_batches

    def sent(self, uuids: Sequence[str], items: Sequence[T], now: float) -> None:
        """A batch was sent: ``uuids[i]`` is the uuid of ``items[i]``'s event."""
        self._batches[uuids[0]] = _Batch(now + self.timeout, items)

    def confirmed(self, pairs: Sequence[Sequence[object]]) -> Sequence[T]:
        """The items of the batch a ``ZB-CONFIRM`` answers ([[uuid, seq], ...]); none
        when it answers no batch in flight (one given up on, or another door's)."""
        for pair in pairs:
            batch = self._batches.pop(str(pair[0]), None)
            if batch is not None:
                return batch.items
        return ()

    def refused(self) -> Sequence[T]:
        """The items of the oldest batch, which a ``ZB-ERROR`` answers."""
        if not self._batches:
            return ()
        first = next(iter(self._batches))
        return self._batches.pop(first).items

    def expired(self, now: float) -> list[T]:
        """The items of every batch unanswered past its deadline (given up)."""
        out: list[T] = []
        while self._batches:
            first, batch = next(iter(self._batches.items()))
            if batch.deadline > now:
                break
            del self._batches[first]
            out += batch.items
        return out

    def next_deadline(self) -> float | None:
        """When the oldest batch in flight is given up; None when none is."""
        if not self._batches:
            return None
        return next(iter(self._batches.values())).deadline


class StreamFollower:
    """The stream sequence a door expects next, and the events it missed."""

    def __init__(self) -> None:
        #: The sequence of the next event; None before the first batch (or after
        #: :meth:`reset`), when nothing can be missed.
        self.expect: int | None = None
        self.missed = 0  # events missed, in every gap together

    def batch(self, first: int, count: int) -> int:
        """A batch of ``count`` events from sequence ``first`` arrived: the events missed
        just before it (0 when none)."""
        expect = self.expect
        self.expect = first + count
        if expect is not None and first > expect:
            self.missed += first - expect
            return first - expect
        return 0

    def heartbeat(self, next_seq: int) -> int:
        """The stream says the next event is ``next_seq``: the events missed before it (0
        when none). Before the first batch nothing can be missed, and nothing is after
        it: a heartbeat only tells of events that did not come."""
        expect = self.expect
        if expect is not None and next_seq > expect:
            self.expect = next_seq
            self.missed += next_seq - expect
            return next_seq - expect
        return 0

    def reset(self) -> None:
        """The door stopped following (batches go unread): the next batch starts over."""
        self.expect = None
