"""The PPPP door's per-subscriber deadlines, sans-I/O: a heap, so that a tick looks only
at the subscribers whose heartbeat, first-idle resend, silence or grace is due, not at
every subscriber (ADR 0006, "The conversation").

Each subscriber has one deadline that counts (:meth:`Deadlines.at`). Moving it earlier
pushes a new heap entry; the older entry stays in the heap, stale, and is skipped when it
comes up (its time is not the subscriber's any more). Moving it later needs nothing: when
the earlier entry comes up the core computes the subscriber's real deadline and sets it.
The heap is rebuilt when stale entries outnumber the live ones, so it stays within a few
entries per subscriber.
"""

from __future__ import annotations

import heapq

COMPACT_SLACK = 1024  # stale entries always tolerated before a rebuild


class Deadlines:
    """Subscribers' next deadlines, earliest first."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, bytes]] = []
        self._at: dict[bytes, float] = {}

    def __len__(self) -> int:
        return len(self._at)

    def at(self, identity: bytes) -> float | None:
        return self._at.get(identity)

    def set(self, identity: bytes, when: float | None) -> None:
        """``identity``'s deadline is ``when`` (None: it has none)."""
        if when is None:
            self._at.pop(identity, None)
            return
        if self._at.get(identity) == when:
            return
        self._at[identity] = when
        heapq.heappush(self._heap, (when, identity))
        if len(self._heap) > 2 * len(self._at) + COMPACT_SLACK:
            self._heap = [(w, i) for i, w in self._at.items()]
            heapq.heapify(self._heap)

    def earlier(self, identity: bytes, when: float | None) -> None:
        """``identity`` is due at ``when`` or before its deadline, whichever is first."""
        if when is None:
            return
        held = self._at.get(identity)
        if held is None or when < held:
            self.set(identity, when)

    def due(self, now: float) -> list[bytes]:
        """The subscribers due by ``now``, each once; their deadlines are cleared (the
        core sets the next one)."""
        heap, at, out = self._heap, self._at, []
        while heap and heap[0][0] <= now:
            when, identity = heapq.heappop(heap)
            if at.get(identity) == when:
                del at[identity]
                out.append(identity)
        return out

    def next(self) -> float | None:
        """The earliest deadline (None: none)."""
        heap, at = self._heap, self._at
        while heap and at.get(heap[0][1]) != heap[0][0]:
            heapq.heappop(heap)
        return heap[0][0] if heap else None


__all__ = ["Deadlines"]
