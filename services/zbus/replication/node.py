"""One replica's part in its group: the thread that talks to etcd, and what it shares
with the thread that owns the log.

The coordination thread holds the lease, campaigns when no one leads, renews while this
replica leads, and writes the in-sync set the log's thread asks for. Every etcd call may
block up to its timeout, so none is made on the log's thread; the two share one
:class:`ReplicaState` under a lock, which the log's thread reads at each turn of its loop.

Campaign rules, beside etcd's (:mod:`zbus.replication.etcd`): a replica campaigns only
when it is *eligible*. A replica is eligible once its data directory holds a log that has
been complete: it was the group's first leader, or it once held the whole of a leader's
log. A replica whose disk was wiped is not, though etcd may still list it in sync: it
follows until it has caught up (the file ``replica-eligible`` marks it).
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
from dataclasses import dataclass, field
from pathlib import Path

from zbus.common.clock import Clock
from zbus.common.rejects import LogLimiter
from zbus.common.threads import EssentialThread
from zbus.replication.core import Lease
from zbus.replication.etcd import CoordinationError, Coordinator, LeaderInfo

log = logging.getLogger(__name__)

ELIGIBLE_MARK = "replica-eligible"


@dataclass(slots=True)
class RoleView:
    """What the admin API and the metrics show of a replica."""

    role: str = "candidate"
    epoch: int = 0
    leader: str | None = None
    log_end: int = 0
    hwm: int = 0
    in_sync: tuple[str, ...] = ()
    lag: dict[str, int] = field(default_factory=dict)
    last_error: str | None = None


class ReplicaState:
    """Shared by the coordination thread and the log's thread, under one lock."""

    def __init__(self, name: str, data_dir: Path, lease: Lease) -> None:
        self.name = name
        self.lock = threading.Lock()
        self.lease = lease
        self.leading: LeaderInfo | None = None  # set while this replica holds the key
        self.leader: LeaderInfo | None = None  # who leads, as last read
        self.previous_leader: str | None = None
        self.in_sync: frozenset[str] = frozenset()
        self.isr_request: frozenset[str] | None = None
        self.isr_answer: tuple[frozenset[str] | None] | None = None
        self.step_down = False  # the log's thread asks to give up the key
        self.coordination_ok = True
        self.view = RoleView()
        self._mark = data_dir / ELIGIBLE_MARK
        self.eligible = self._mark.exists()

    def mark_eligible(self) -> None:
        if not self.eligible:
            with contextlib.suppress(OSError):
                self._mark.write_text("this replica's log was once complete\n")
            self.eligible = True


class CoordinationThread(EssentialThread):
    """Keeps this replica's standing in etcd: campaign, renew, in-sync writes."""

    def __init__(
        self,
        state: ReplicaState,
        coordinator: Coordinator,
        address: dict[str, str],
        clock: Clock,
        *,
        lease_ttl: float,
    ) -> None:
        super().__init__(f"replica-{state.name}")
        self.state = state
        self.coordinator = coordinator
        self.address = json.dumps(address, sort_keys=True)
        self.clock = clock
        self.renew_every = lease_ttl / 4
        self.tick = min(0.1, lease_ttl / 10)
        self._limiter = LogLimiter()
        self._next_read = 0.0
        self.errors = 0

    def work(self) -> None:
        next_renew = 0.0
        while not self._halt.wait(self.tick):
            try:
                next_renew = self._turn(next_renew)
                self.state.coordination_ok = True
            except CoordinationError as exc:
                self.errors += 1
                self.state.coordination_ok = False
                with self.state.lock:
                    self.state.view.last_error = str(exc)
                if self._limiter.allow(self.clock.monotonic()):
                    log.warning("etcd unavailable", extra={"error": str(exc)})
        with self.state.lock:
            leading = self.state.leading
        if leading is not None:
            with contextlib.suppress(CoordinationError):
                self.coordinator.resign(leading.epoch)
        self.coordinator.close()

    def _turn(self, next_renew: float) -> float:
        s, c = self.state, self.coordinator
        now = self.clock.monotonic()
        with s.lock:
            leading, step_down, request = s.leading, s.step_down, s.isr_request
        if leading is not None:
            if step_down:
                self._lose(leading)
                c.resign(leading.epoch)
                return 0.0
            if now >= next_renew:
                sent = self.clock.monotonic()
                if c.keepalive():
                    with s.lock:
                        s.lease.renewed(sent)
                    next_renew = sent + self.renew_every
                else:
                    log.warning("leadership lease lost", extra={"epoch": leading.epoch})
                    self._lose(leading)
                    return 0.0
            if request is not None:
                stored = c.set_in_sync(request, leading.epoch)
                with s.lock:
                    s.isr_request = None
                    s.isr_answer = (None if stored is None else frozenset(stored.members),)
                    if stored is not None:
                        s.in_sync = frozenset(stored.members)
                if stored is None:
                    self._lose(leading)
            return next_renew
        current = c.leader()
        if current is None:
            read = c.in_sync()
            # A new group (no in-sync set yet) is started by whoever comes first.
            if (s.eligible and s.name in read.members) or read.revision == 0:
                sent = self.clock.monotonic()
                # The lease counts from now: one kept from an earlier try is renewed
                # (or a new one granted), so that etcd's TTL runs from after ``sent``.
                if not c.keepalive():
                    c.grant()
                won = c.campaign(self.address, read)
                if won is not None:
                    with s.lock:
                        s.lease.renewed(sent)
                        s.previous_leader = s.leader.name if s.leader is not None else None
                        s.leading = s.leader = won
                        s.in_sync = frozenset(read.members) or frozenset({s.name})
                        s.isr_request = s.isr_answer = None
                        s.step_down = False
                    log.info("elected leader", extra={"epoch": won.epoch})
                    return sent + self.renew_every
            current = c.leader()
        changed = current is not None and current != s.leader
        # A follower shows the in-sync set too: read again when the leader changes, and
        # about once a second.
        refresh = changed or now >= self._next_read
        now_in_sync = c.in_sync() if refresh else None
        if refresh:
            self._next_read = now + 1.0
        with s.lock:
            if current is not None and changed:
                if s.leader is not None and s.leader.name != current.name:
                    s.previous_leader = s.leader.name
                s.leader = current
            if now_in_sync is not None:
                s.in_sync = frozenset(now_in_sync.members)
        return next_renew

    def _lose(self, leading: LeaderInfo) -> None:
        with self.state.lock:
            if self.state.leading == leading:
                self.state.leading = None
                self.state.step_down = False
                self.state.lease.sent = None
