"""PUTs on their way into the bus's log, until the collector answers, sans-I/O.

The mc0 door hands the events of its PUTs to the bus's collector as ``ZB-PUB`` batches
with a confirm, as any zbus publisher does, so that a PUT with an ID gets its OK once
the event is stored. Every batch gets exactly one answer: ``ZB-CONFIRM`` with the
sequence of each of its uuids, or ``ZB-ERROR`` (the door checks every field the
collector checks, so that only a failed commit is refused, and the collector answers
those in the order of the batches). A batch the collector has not answered within
``timeout`` seconds is given up (its PUTs get ERROR) and its late answer ignored.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from zbus.eventbus.core.mc0 import Publish


@dataclass(slots=True)
class _Batch:
    deadline: float
    publishes: list[Publish]


class PutTracker:
    """The door's batches in flight, oldest first, found again by their first uuid."""

    def __init__(self, *, max_batches: int, timeout: float) -> None:
        self.max_batches = max_batches
        self.timeout = timeout
        self._batches: dict[str, _Batch] = {}  # first uuid -> batch, in sending order

    def __len__(self) -> int:
        return len(self._batches)

    @property
    def full(self) -> bool:
        """No more batches may be sent until one is answered."""
        return len(self._batches) >= self.max_batches

    def add(self, uuids: Sequence[str], publishes: list[Publish], now: float) -> None:
        """A batch was sent: ``uuids[i]`` is the uuid of ``publishes[i]``'s event."""
        self._batches[uuids[0]] = _Batch(now + self.timeout, publishes)

    def confirmed(self, pairs: Sequence[Sequence[object]]) -> list[Publish]:
        """The PUTs of the batch a ``ZB-CONFIRM`` answers ([[uuid, seq], ...]); [] when it
        answers no batch in flight (one given up on, or none of the door's)."""
        for pair in pairs:
            batch = self._batches.pop(str(pair[0]), None)
            if batch is not None:
                return batch.publishes
        return []

    def refused(self) -> list[Publish]:
        """The PUTs of the oldest batch, which a ``ZB-ERROR`` answers."""
        if not self._batches:
            return []
        first = next(iter(self._batches))
        return self._batches.pop(first).publishes

    def expired(self, now: float) -> list[Publish]:
        """The PUTs of every batch unanswered past its deadline (given up)."""
        out: list[Publish] = []
        while self._batches:
            first, batch = next(iter(self._batches.items()))
            if batch.deadline > now:
                break
            del self._batches[first]
            out += batch.publishes
        return out

    def next_deadline(self) -> float | None:
        if not self._batches:
            return None
        return next(iter(self._batches.values())).deadline


__all__ = ["PutTracker"]
