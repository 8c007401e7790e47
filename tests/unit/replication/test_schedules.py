"""The replication core over random schedules of crashes, partitions, wipes and elections.

Three replicas, an etcd modelled as what zbus asks of it (a lease-bound leader key whose
create revision is the epoch, an in-sync set changed only under the leader's epoch, one
revision counter) and one clock that only moves forward. Hypothesis picks the schedule:
time passing, renewals that etcd handles late, campaigns, writes, fetches (lost when a
replica is cut off), in-sync changes, crashes, restarts and wiped disks. After every step:

- at most one replica holds a valid lease and acts as leader;
- every confirmed entry is, at its sequence, in the log of every replica that could now
  be elected (every member of the in-sync set that etcd holds), and in the leader's;
- no replica serves (its HWM) past what it holds, and HWMs never pass a log end.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from zbus.replication.core import (
    Diverging,
    EpochHistory,
    LeaderCore,
    Lease,
    Refuse,
    Serve,
    fetch_for,
    follower_hwm,
    follower_truncation,
)

NAMES = ("a", "b", "c")
TTL, MARGIN, MAX_LAG = 3.0, 0.5, 2.0


@dataclass
class Replica:
    name: str
    log: list[tuple[int, int]] = field(default_factory=list)  # (epoch, value); seq = i + 1
    history: EpochHistory = field(default_factory=EpochHistory)
    hwm: int = 0
    alive: bool = True
    cut_off: bool = False
    eligible: bool = True  # False after a wipe, until it has caught up once
    core: LeaderCore | None = None
    lease: Lease = field(default_factory=lambda: Lease(TTL, MARGIN))

    @property
    def log_end(self) -> int:
        return len(self.log)


class Etcd:
    def __init__(self) -> None:
        self.revision = 1
        self.leader: tuple[str, int, float] | None = None  # name, epoch, expires
        self.isr: tuple[frozenset[str], int] | None = None  # members, mod revision

    def holder(self, now: float) -> tuple[str, int] | None:
        if self.leader is not None and self.leader[2] <= now:
            self.leader = None  # the lease ran out
        return None if self.leader is None else self.leader[:2]


class Schedules(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.now = 0.0
        self.etcd = Etcd()
        self.replicas = {n: Replica(n) for n in NAMES}
        self.confirmed: dict[int, tuple[int, int]] = {}  # seq -> (epoch, value)
        self.next_value = 0

    # --------------------------------------------------------------- helpers
    def leader_of(self, r: Replica) -> LeaderCore | None:
        if r.core is None or not r.alive:
            return None
        return r.core

    def step_down(self, r: Replica) -> None:
        if r.core is not None:
            r.hwm = r.core.hwm
        r.core = None
        r.lease = Lease(TTL, MARGIN)

    def record_confirms(self, r: Replica) -> None:
        core = r.core
        if core is None or not r.lease.valid(self.now):
            return
        upto = core.confirmable()
        for seq in range(1, upto + 1):
            entry = r.log[seq - 1]
            held = self.confirmed.setdefault(seq, entry)
            assert held == entry, f"seq {seq} confirmed as {held}, now {entry}"

    # ----------------------------------------------------------------- rules
    @rule(dt=st.sampled_from([0.1, 0.4, 1.0, 2.0, 3.5]))
    def time_passes(self, dt: float) -> None:
        self.now += dt
        for r in self.replicas.values():
            if r.core is not None and not r.lease.valid(self.now):
                self.step_down(r)  # the leader stops before etcd can hand the key on

    @rule(name=st.sampled_from(NAMES))
    def campaign(self, name: str) -> None:
        r = self.replicas[name]
        if not r.alive or r.cut_off or r.core is not None or not r.eligible:
            return
        if self.etcd.holder(self.now) is not None:
            return
        isr = self.etcd.isr
        if isr is not None and name not in isr[0]:
            return
        previous = self.last_leader if hasattr(self, "last_leader") else None
        self.etcd.revision += 1
        epoch = self.etcd.revision
        if isr is None:
            self.etcd.isr = (frozenset({name}), epoch)
        self.etcd.leader = (name, epoch, self.now + TTL)
        r.lease = Lease(TTL, MARGIN)
        r.lease.renewed(self.now)
        r.history = r.history.begin(epoch, r.log_end + 1)
        members = self.etcd.isr[0] if self.etcd.isr else frozenset({name})
        r.core = LeaderCore(
            name=name,
            epoch=epoch,
            members=frozenset(NAMES),
            in_sync=members,
            min_insync=2,
            max_lag=MAX_LAG,
            log_end=r.log_end,
            hwm=r.hwm,
            history=r.history,
            now=self.now,
            previous_leader=previous,
        )
        self.last_leader = name

    @rule(name=st.sampled_from(NAMES), delay=st.sampled_from([0.0, 0.2, 1.0]))
    def renew(self, name: str, delay: float) -> None:
        r = self.replicas[name]
        core = self.leader_of(r)
        if core is None or r.cut_off:
            return
        held = self.etcd.holder(self.now + delay)  # etcd handles it `delay` later
        if held != (name, core.epoch):
            self.step_down(r)
            return
        r.lease.renewed(self.now)
        self.etcd.leader = (name, core.epoch, self.now + delay + TTL)

    @rule(name=st.sampled_from(NAMES), n=st.integers(1, 3))
    def write(self, name: str, n: int) -> None:
        r = self.replicas[name]
        core = self.leader_of(r)
        if core is None or core.refusal(r.lease, self.now) is not None:
            return
        for _ in range(n):
            self.next_value += 1
            r.log.append((core.epoch, self.next_value))
        core.appended(r.log_end)
        self.record_confirms(r)

    @rule(name=st.sampled_from(NAMES), limit=st.integers(1, 4))
    def fetch(self, name: str, limit: int) -> None:
        f = self.replicas[name]
        if not f.alive or f.cut_off or f.core is not None:
            return
        held = self.etcd.holder(self.now)
        if held is None or held[0] == name:
            return
        leader = self.replicas[held[0]]
        core = self.leader_of(leader)
        if core is None or leader.cut_off:
            return
        answer = core.on_fetch(fetch_for(name, held[1], f.log_end, f.history), self.now)
        if isinstance(answer, Refuse):
            if answer.reason == "newer_epoch":
                self.step_down(leader)
            return
        if isinstance(answer, Diverging):
            to, f.history = follower_truncation(f.log_end, f.history, answer)
            assert to >= 0
            del f.log[to:]
            f.hwm = min(f.hwm, to)
            return
        assert isinstance(answer, Serve)
        chunk = leader.log[answer.from_seq - 1 : answer.from_seq - 1 + limit]
        f.log.extend(chunk)
        f.history = f.history.merged(leader.history, f.log_end)
        f.hwm = max(f.hwm, follower_hwm(f.log_end, answer.hwm))
        if f.log_end >= answer.log_end:
            f.eligible = True
        self.record_confirms(leader)

    @rule(name=st.sampled_from(NAMES))
    def tick(self, name: str) -> None:
        r = self.replicas[name]
        core = self.leader_of(r)
        if core is None:
            return
        core.tick(self.now)  # a change is proposed; etcd answers in `isr_written`

    @rule(name=st.sampled_from(NAMES), lost=st.booleans())
    def isr_written(self, name: str, lost: bool) -> None:
        r = self.replicas[name]
        core = self.leader_of(r)
        if core is None or core.pending is None:
            return
        if lost:  # the request failed on the way; nothing stored
            core.isr_failed()
            return
        if r.cut_off or self.etcd.holder(self.now) != (name, core.epoch):
            core.isr_failed()
            self.step_down(r)
            return
        members = core.pending.members
        self.etcd.revision += 1
        self.etcd.isr = (members, self.etcd.revision)
        core.isr_stored(members)
        self.record_confirms(r)

    @rule(kind=st.sampled_from(["crash", "restart", "wipe", "cut"]), name=st.sampled_from(NAMES))
    def fault(self, kind: str, name: str) -> None:
        r = self.replicas[name]
        if kind == "crash":
            r.alive = False
            self.step_down(r)
        elif kind == "restart":
            r.alive = True
        elif kind == "wipe":
            r.alive = True
            self.step_down(r)
            r.log, r.history, r.hwm, r.eligible = [], EpochHistory(), 0, False
        elif not any(x.cut_off for x in self.replicas.values()):
            r.cut_off = True  # one replica cut off from the others and from etcd

    @rule()
    def heal(self) -> None:
        for r in self.replicas.values():
            r.cut_off = False

    @rule(limit=st.integers(1, 8), writes=st.integers(0, 3))
    def healthy_round(self, limit: int, writes: int) -> None:
        """What a working group does in a round: every replica campaigns or renews, the
        leader takes writes, every follower fetches, the leader ticks and etcd stores its
        in-sync set."""
        for name in NAMES:
            self.campaign(name)
            self.renew(name, 0.0)
            if writes:
                self.write(name, writes)
        for name in NAMES:
            self.campaign(name)
            self.renew(name, 0.0)
        for name in NAMES:
            self.fetch(name, limit)
        for name in NAMES:
            self.tick(name)
            self.isr_written(name, False)

    # ------------------------------------------------------------ invariants
    @invariant()
    def one_leader_at_a_time(self) -> None:
        acting = [
            r.name
            for r in self.replicas.values()
            if r.alive and r.core is not None and r.lease.valid(self.now)
        ]
        assert len(acting) <= 1, f"several leaders at {self.now}: {acting}"

    @invariant()
    def nothing_confirmed_is_lost(self) -> None:
        isr = self.etcd.isr[0] if self.etcd.isr else frozenset()
        electable = [self.replicas[n] for n in isr if self.replicas[n].eligible]
        holders = electable + [r for r in self.replicas.values() if r.core is not None]
        for r in holders:
            for seq, entry in self.confirmed.items():
                assert seq <= r.log_end and r.log[seq - 1] == entry, (
                    f"{r.name} lacks confirmed seq {seq} {entry}"
                )

    @invariant()
    def hwm_within_log(self) -> None:
        for r in self.replicas.values():
            hwm = r.core.hwm if r.core is not None else r.hwm
            assert hwm <= r.log_end, f"{r.name} serves {hwm} past its end {r.log_end}"


Schedules.TestCase.settings = settings(max_examples=2000, stateful_step_count=80)
test_schedules = Schedules.TestCase
