"""The replication core: what a leader and a follower decide, with the time passed in.

A replica group keeps one log on every replica. etcd decides who leads (a lease-bound
key whose create revision is the epoch) and holds the in-sync set (ISR); this module
decides everything else, with no I/O:

- A follower pulls. Its :class:`Fetch` carries the epoch it follows, the first sequence
  it wants (so it acknowledges everything before it) and the epoch of its last entry.
- The leader answers with :class:`Serve`, :class:`Diverging` or :class:`Refuse`.
  ``Diverging`` tells a follower that entries past a sequence came from an epoch the
  leader's log does not hold (a deposed leader wrote them): it truncates there, as
  Kafka's follower does with its leader-epoch cache (KIP-101, KIP-279).
- The high watermark (HWM) is the smallest log end over the in-sync set, the leader
  included. A write is confirmed once the HWM passes it, and only while at least
  ``min_insync`` replicas are in the set; subscribers see events up to the HWM only.
- The in-sync set changes only through etcd, in a transaction that checks the leader's
  epoch. While a change is in flight the HWM is taken over the larger of the two sets
  (the "maximal ISR" of Kafka's KIP-497), so that no write is confirmed on the strength
  of a set etcd has not stored.
- A leader accepts writes only while its lease, counted from when its last renewal was
  *sent*, has a margin left: it stops before etcd can give the key to another replica.

Sequences are positions: ``log_end`` is the last sequence a log holds (0 when empty).
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

__all__ = [
    "Diverging",
    "EpochHistory",
    "Fetch",
    "FollowerProgress",
    "IsrChange",
    "LeaderCore",
    "Lease",
    "Refuse",
    "ReplicationError",
    "Serve",
    "follower_truncation",
]


class ReplicationError(Exception):
    """A replication rule broken by a peer or by the caller."""


# ------------------------------------------------------------------ epoch history
@dataclass(frozen=True, slots=True)
class EpochHistory:
    """Where each epoch's entries start in a log: ``(epoch, first_seq)``, both ascending.

    The history is stored beside the log and shipped to followers, so that any replica
    that becomes leader can tell a follower where their logs part.
    """

    entries: tuple[tuple[int, int], ...] = ()

    def __post_init__(self) -> None:
        for (e0, s0), (e1, s1) in zip(self.entries, self.entries[1:], strict=False):
            if not (e1 > e0 and s1 >= s0):
                raise ReplicationError(f"epoch history out of order at epoch {e1}")

    @property
    def last_epoch(self) -> int:
        return self.entries[-1][0] if self.entries else 0

    def begin(self, epoch: int, first_seq: int) -> EpochHistory:
        """The history with ``epoch`` starting at ``first_seq`` (a new leader's first write)."""
        if self.entries and epoch <= self.entries[-1][0]:
            if self.entries[-1][0] == epoch:
                return self  # the same leadership again (its lease outlived an etcd restart)
            raise ReplicationError(f"epoch {epoch} is not after {self.entries[-1][0]}")
        # An epoch that wrote nothing is replaced by the next one at the same position.
        kept = tuple(e for e in self.entries if e[1] < first_seq)
        return EpochHistory((*kept, (epoch, first_seq)))

    def epoch_at(self, seq: int) -> int:
        """The epoch that wrote ``seq`` (0 before the first entry)."""
        starts = [s for _, s in self.entries]
        i = bisect.bisect_right(starts, seq) - 1
        return self.entries[i][0] if i >= 0 else 0

    def epoch_not_after(self, epoch: int) -> int:
        """The largest epoch of this history that is ``epoch`` or earlier (0: none)."""
        found = 0
        for e, _ in self.entries:
            if e > epoch:
                break
            found = e
        return found

    def end_of(self, epoch: int, log_end: int) -> int:
        """The last sequence of this log written in ``epoch`` or an earlier one.

        For a follower whose last entry is from ``epoch``, everything past this sequence
        is not in this log as written: it was written by another leader of that epoch's
        era, and must go.
        """
        for e, start in self.entries:
            if e > epoch:
                return start - 1
        return log_end

    def cut(self, log_end: int) -> EpochHistory:
        """The history of this log truncated after ``log_end``."""
        return EpochHistory(tuple(e for e in self.entries if e[1] <= log_end))

    def merged(self, leader: EpochHistory, log_end: int) -> EpochHistory:
        """A follower's history once it holds the leader's entries up to ``log_end``."""
        return leader.cut(log_end) if leader.entries else self


# ------------------------------------------------------------------------ lease
@dataclass(slots=True)
class Lease:
    """A leader's lease as the leader must count it: from when a renewal was sent.

    etcd counts the TTL from when it handled the renewal, which is later; counting from
    the send, less a margin for the two clocks' rates, the leader always stops first.
    """

    ttl: float
    margin: float
    sent: float | None = None  # when the last successful renewal (or grant) was sent

    def __post_init__(self) -> None:
        if not 0 <= self.margin < self.ttl:
            raise ReplicationError("a lease's margin must be in [0, ttl)")

    def renewed(self, sent_at: float) -> None:
        if self.sent is None or sent_at > self.sent:
            self.sent = sent_at

    def expires(self) -> float:
        """When this replica must stop acting as leader (monotonic seconds)."""
        return float("-inf") if self.sent is None else self.sent + self.ttl - self.margin

    def valid(self, now: float) -> bool:
        return now < self.expires()


# ------------------------------------------------------------------ fetch dialog
@dataclass(frozen=True, slots=True)
class Fetch:
    """A follower's pull: it holds everything before ``from_seq``."""

    name: str
    epoch: int
    from_seq: int
    last_epoch: int  # the epoch of the follower's entry at from_seq - 1 (0 when empty)


@dataclass(frozen=True, slots=True)
class Serve:
    """Send the batches from ``from_seq``, the HWM, the leader's log end and history.

    A replica that lost its disk may lead again only once it has held the leader's whole
    log (``log_end``), not merely the HWM, which a newly elected leader may know late.
    """

    from_seq: int
    hwm: int
    log_end: int


@dataclass(frozen=True, slots=True)
class Diverging:
    """The follower's log may part from the leader's.

    ``epoch`` is the largest epoch of the leader's history not after the follower's last
    entry's, and ``end`` the leader's last sequence of that epoch: the follower keeps
    what it wrote in that epoch or before, up to ``end`` (:func:`follower_truncation`).
    """

    epoch: int
    end: int


@dataclass(frozen=True, slots=True)
class Refuse:
    """Not answered: ``reason`` says why (``stale_epoch``, ``unknown_peer``, ...)."""

    reason: str
    detail: str


FetchAnswer = Serve | Diverging | Refuse


@dataclass(frozen=True, slots=True)
class IsrChange:
    """A new in-sync set for the caller to write to etcd under the leader's epoch."""

    members: frozenset[str]


@dataclass(slots=True)
class FollowerProgress:
    """What the leader knows of one follower (Kafka's replica state)."""

    log_end: int = -1  # unknown until its first fetch
    caught_up: float = float("-inf")  # the last time it held everything the leader had
    last_fetch: float = float("-inf")
    leader_end_at_last_fetch: int = 0


@dataclass(slots=True)
class LeaderCore:
    """The leader's side: followers' progress, the in-sync set and the high watermark.

    Args:
        name: this replica.
        epoch: its epoch (the leader key's create revision).
        members: every replica of the group, this one included.
        in_sync: the in-sync set as etcd holds it.
        min_insync: how many must be in sync for a write to be accepted and confirmed.
        max_lag: seconds a follower may go without catching up before it leaves the set.
        log_end: the last sequence of the leader's log.
        hwm: the high watermark the leader held before (never goes back).
        history: the leader's epoch history, its own epoch already begun.
        now: monotonic seconds.
        previous_leader: the leader of the epoch before, if known: it leaves the in-sync
            set on the first tick unless it fetches first.
    """

    name: str
    epoch: int
    members: frozenset[str]
    in_sync: frozenset[str]
    min_insync: int
    max_lag: float
    log_end: int
    hwm: int
    history: EpochHistory
    now: float
    previous_leader: str | None = None
    pending: IsrChange | None = None
    followers: dict[str, FollowerProgress] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.name not in self.members:
            raise ReplicationError(f"{self.name} is not a member of its group")
        if not 1 <= self.min_insync <= len(self.members):
            raise ReplicationError(f"min_insync {self.min_insync} outside [1, {len(self.members)}]")
        for peer in self.members - {self.name}:
            # A new leader gives each follower a full lag interval to show up, but the
            # leader it replaces, whose lease has run out, leaves the set at once.
            since = float("-inf") if peer == self.previous_leader else self.now
            self.followers[peer] = FollowerProgress(caught_up=since)
        self.hwm = min(self.hwm, self.log_end)

    # ----------------------------------------------------------------- writes
    def refusal(self, lease: Lease, now: float) -> str | None:
        """Why a new write is refused now, or None when it is accepted."""
        if not lease.valid(now):
            return "this replica's leadership lease is not renewed"
        if len(self.in_sync) < self.min_insync:
            return (
                f"only {len(self.in_sync)} of {len(self.members)} replicas in sync, "
                f"{self.min_insync} needed"
            )
        return None

    def appended(self, log_end: int) -> None:
        """The leader stored up to ``log_end``."""
        if log_end < self.log_end:
            raise ReplicationError("a leader's log does not shrink")
        self.log_end = log_end
        self._advance()

    def confirmable(self) -> int:
        """The last sequence a confirm may be sent for (0: none)."""
        return self.hwm if len(self.in_sync) >= self.min_insync else 0

    # ---------------------------------------------------------------- fetches
    def on_fetch(self, fetch: Fetch, now: float) -> FetchAnswer:
        """Answer one follower's fetch, and record what it acknowledges."""
        progress = self.followers.get(fetch.name)
        if progress is None:
            return Refuse("unknown_peer", f"{fetch.name!r} is not a member of this group")
        if fetch.epoch != self.epoch:
            reason = "stale_epoch" if fetch.epoch < self.epoch else "newer_epoch"
            return Refuse(reason, f"fetch for epoch {fetch.epoch}, leader's is {self.epoch}")
        held = fetch.from_seq - 1
        if held < 0:
            return Refuse("malformed", f"from_seq {fetch.from_seq} below 1")
        epoch = self.history.epoch_not_after(fetch.last_epoch)
        end = self.history.end_of(epoch, self.log_end)
        if held > end or epoch != fetch.last_epoch:
            return Diverging(epoch, end)
        # A follower that went back (wiped) counts with what it holds now: the HWM
        # never moves back, and the follower leaves the set by its lag.
        progress.log_end = held
        if held >= self.log_end:
            progress.caught_up = now
        elif held >= progress.leader_end_at_last_fetch:
            progress.caught_up = max(progress.caught_up, progress.last_fetch)
        progress.last_fetch = now
        progress.leader_end_at_last_fetch = self.log_end
        self.now = max(self.now, now)
        self._advance()
        return Serve(fetch.from_seq, self.hwm, self.log_end)

    # ----------------------------------------------------------- in-sync set
    def tick(self, now: float) -> IsrChange | None:
        """The in-sync set to propose now, if it should change and none is in flight."""
        self.now = max(self.now, now)
        if self.pending is not None:
            return None
        members = set(self.in_sync)
        for peer, p in self.followers.items():
            lagging = now - p.caught_up > self.max_lag
            if peer in members and lagging:
                members.discard(peer)
            elif peer not in members and not lagging and p.log_end >= self._rejoin_floor():
                members.add(peer)
        members.add(self.name)
        if frozenset(members) == self.in_sync:
            return None
        self.pending = IsrChange(frozenset(members))
        self._advance()
        return self.pending

    def isr_stored(self, members: Iterable[str]) -> None:
        """etcd holds ``members`` as the in-sync set under this leader's epoch."""
        self.in_sync = frozenset(members)
        self.pending = None
        self._advance()

    def isr_failed(self) -> None:
        """The proposed change was not stored (the caller retries on a later tick)."""
        self.pending = None
        self._advance()

    def _rejoin_floor(self) -> int:
        # Back in the set only with everything the set holds, and past the start of
        # this epoch, so its log cannot part from the leader's before the HWM.
        start = self.history.entries[-1][1] - 1 if self.history.entries else 0
        return max(self.hwm, start)

    def _maximal(self) -> frozenset[str]:
        if self.pending is None:
            return self.in_sync
        return self.in_sync | self.pending.members

    def _advance(self) -> None:
        ends = [self.log_end]
        for peer in self._maximal():
            if peer != self.name:
                p = self.followers.get(peer)
                ends.append(p.log_end if p is not None else -1)
        self.hwm = max(self.hwm, min(ends))

    # ------------------------------------------------------------------- view
    def lags(self) -> dict[str, int]:
        """Each follower's lag in events behind the leader's log end."""
        return {
            peer: self.log_end - p.log_end if p.log_end >= 0 else self.log_end
            for peer, p in sorted(self.followers.items())
        }


def follower_truncation(
    log_end: int, history: EpochHistory, answer: Diverging
) -> tuple[int, EpochHistory]:
    """Where a follower truncates on ``Diverging``: its new log end and history.

    It keeps its entries of ``answer.epoch`` and before, up to the leader's end of that
    epoch; what it wrote in a later epoch the leader never had goes (KIP-279).
    """
    to = max(0, min(log_end, answer.end, history.end_of(answer.epoch, log_end)))
    return to, history.cut(to)


def fetch_for(name: str, epoch: int, log_end: int, history: EpochHistory) -> Fetch:
    """The fetch a follower with this log sends to the leader of ``epoch``."""
    return Fetch(name, epoch, log_end + 1, history.epoch_at(log_end) if log_end > 0 else 0)


def follower_hwm(log_end: int, leader_hwm: int) -> int:
    """A follower serves up to what it holds and the leader has confirmed."""
    return min(log_end, leader_hwm)


def validate_members(members: Sequence[str]) -> frozenset[str]:
    """A group's replica names: unique, non-empty, at most 255 characters each."""
    out = frozenset(members)
    if len(out) != len(members) or not members:
        raise ReplicationError("a group's members must be a non-empty list of unique names")
    for m in members:
        if not 0 < len(m) <= 255:
            raise ReplicationError(f"a member's name must be 1-255 characters: {m!r}")
    return out
