"""Peer liveness of the broker's core: who expires when, and when to send heartbeats.

Both run on the monotonic clock alone: a peer silent for ``heartbeat_interval x
heartbeat_misses`` seconds is gone (the spec's "disconnected", zguide's mdbroker), and
the broker's heartbeats go out every ``heartbeat_interval`` seconds, whatever the wall
clock does.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Mapping

from zbus.broker.core.interface import CoreConfig
from zbus.broker.core.routing import SchedulerPeer, WorkerState

__all__ = ["Liveness", "Peer"]

Peer = WorkerState | SchedulerPeer


class Liveness:
    """Expiry of workers and eventmq schedulers, and the heartbeat schedule.

    Args:
        config: the heartbeat interval and misses.
        workers: the live workers by identity (the router's table, read, not changed).
        peers: the live schedulers by identity (likewise).
        now: monotonic time of the start.

    Attributes:
        interval: seconds between the broker's heartbeats.
        expiry: seconds of silence after which a peer is gone.
        next_heartbeat: when (monotonic) the next heartbeats are due.
    """

    def __init__(
        self,
        config: CoreConfig,
        workers: Mapping[bytes, WorkerState],
        peers: Mapping[bytes, SchedulerPeer],
        now: float,
    ) -> None:
        self.interval = config.heartbeat_interval
        self.expiry = config.heartbeat_interval * config.heartbeat_misses
        self.next_heartbeat = now + config.heartbeat_interval
        self._workers = workers
        self._peers = peers
        self._seq = itertools.count()
        self._expiries: list[tuple[float, int, Peer]] = []

    def start(self, now: float) -> None:
        """A first peer arrives: heartbeats start ``interval`` after it (call before
        adding it)."""
        if not self._workers and not self._peers:
            self.next_heartbeat = now + self.interval

    def heartbeat_due(self, now: float) -> bool:
        """Whether heartbeats are due at ``now``; if so, the next ones are scheduled."""
        if now < self.next_heartbeat:
            return False
        self.next_heartbeat = now + self.interval
        return True

    def watch(self, peer: Peer, now: float) -> None:
        """Follow a new peer, heard from at ``now``."""
        heapq.heappush(self._expiries, (now + self.expiry, next(self._seq), peer))

    def _current(self, peer: Peer) -> bool:
        if isinstance(peer, WorkerState):
            return self._workers.get(peer.identity) is peer
        return self._peers.get(peer.identity) is peer

    def next_expiry(self) -> float | None:
        """The earliest peer expiry; stale entries are dropped, renewed ones moved.

        One entry per live peer, re-queued only when reached, so a peer that talks all
        the time costs a heap operation per expiry period, not per message.
        """
        heap = self._expiries
        while heap:
            deadline, _, peer = heap[0]
            if not self._current(peer):
                heapq.heappop(heap)
            elif peer.last_seen + self.expiry > deadline:
                heapq.heapreplace(heap, (peer.last_seen + self.expiry, next(self._seq), peer))
            else:
                return deadline
        return None

    def expired(self, now: float) -> list[Peer]:
        """The peers silent for too long at ``now``, no longer followed; the caller
        drops them."""
        gone: list[Peer] = []
        while (deadline := self.next_expiry()) is not None and deadline <= now:
            gone.append(heapq.heappop(self._expiries)[2])
        return gone
