"""The replication core, one rule at a time: epoch histories, fetch answers, the
in-sync set, the high watermark and the lease (time passed in)."""

from __future__ import annotations

import pytest

from zbus.replication.core import (
    Diverging,
    EpochHistory,
    Fetch,
    IsrChange,
    LeaderCore,
    Lease,
    Refuse,
    ReplicationError,
    Serve,
    fetch_for,
    follower_truncation,
    validate_members,
)

GROUP = frozenset({"a", "b", "c"})


def leader(**kw: object) -> LeaderCore:
    args: dict[str, object] = dict(
        name="a",
        epoch=7,
        members=GROUP,
        in_sync=GROUP,
        min_insync=2,
        max_lag=2.0,
        log_end=10,
        hwm=4,
        history=EpochHistory(((1, 1), (7, 11))),
        now=100.0,
    )
    args.update(kw)
    return LeaderCore(**args)  # type: ignore[arg-type]


def test_history_answers_where_epochs_end() -> None:
    h = EpochHistory(((1, 1), (5, 40), (9, 70)))
    assert h.epoch_at(39) == 1 and h.epoch_at(40) == 5 and h.epoch_at(100) == 9
    assert h.epoch_at(0) == 0
    assert h.end_of(1, 80) == 39 and h.end_of(5, 80) == 69 and h.end_of(9, 80) == 80
    assert h.epoch_not_after(7) == 5 and h.epoch_not_after(0) == 0
    assert h.cut(45).entries == ((1, 1), (5, 40))
    # An epoch that wrote nothing gives way to the next at the same position.
    assert h.begin(10, 70).entries == ((1, 1), (5, 40), (10, 70))
    assert h.begin(9, 80) is h  # the same leadership, resumed
    with pytest.raises(ReplicationError):
        h.begin(8, 80)
    with pytest.raises(ReplicationError):
        EpochHistory(((5, 1), (3, 9)))


def test_follower_with_a_deposed_epoch_truncates_to_where_the_logs_part() -> None:
    # The follower took 40..55 from a leader of epoch 5 that the current leader (epoch 7,
    # elected from a replica that never saw epoch 5) does not know: its 40..49 are epoch 1.
    core = leader(log_end=60, hwm=30, history=EpochHistory(((1, 1), (7, 50))))
    follower = EpochHistory(((1, 1), (5, 40)))
    answer = core.on_fetch(fetch_for("b", 7, 55, follower), 100.0)
    assert answer == Diverging(epoch=1, end=49)
    end, history = follower_truncation(55, follower, answer)
    assert (end, history.entries) == (39, ((1, 1),))
    # From there the logs agree.
    assert isinstance(core.on_fetch(fetch_for("b", 7, end, history), 100.0), Serve)


def test_follower_longer_than_the_leader_in_the_same_epoch_truncates_to_its_end() -> None:
    core = leader(log_end=10)
    answer = core.on_fetch(Fetch("b", 7, 14, 7), 100.0)
    assert answer == Diverging(epoch=7, end=10)
    assert follower_truncation(13, EpochHistory(((1, 1), (7, 11))), answer)[0] == 10


@pytest.mark.parametrize(
    ("fetch", "reason"),
    [
        (Fetch("z", 7, 1, 0), "unknown_peer"),
        (Fetch("b", 6, 1, 0), "stale_epoch"),
        (Fetch("b", 8, 1, 0), "newer_epoch"),
        (Fetch("b", 7, 0, 0), "malformed"),
    ],
)
def test_fetches_that_are_refused(fetch: Fetch, reason: str) -> None:
    answer = leader().on_fetch(fetch, 100.0)
    assert isinstance(answer, Refuse) and answer.reason == reason


def test_hwm_is_the_smallest_end_over_the_set_and_never_goes_back() -> None:
    core = leader(hwm=0)
    assert core.hwm == 0
    core.on_fetch(fetch_for("b", 7, 8, EpochHistory(((1, 1),))), 100.0)
    assert core.hwm == 0  # c has not fetched
    core.on_fetch(fetch_for("c", 7, 6, EpochHistory(((1, 1),))), 100.0)
    assert core.hwm == 6 and core.confirmable() == 6
    core.on_fetch(fetch_for("c", 7, 10, EpochHistory(((1, 1), (7, 11)))), 100.0)
    assert core.hwm == 8
    # b comes back wiped: it holds nothing, but what was confirmed stays confirmed.
    core.on_fetch(fetch_for("b", 7, 0, EpochHistory()), 100.0)
    assert core.hwm == 8


def test_a_lagging_follower_leaves_the_set_and_rejoins_once_caught_up() -> None:
    core = leader(hwm=10)
    for peer in ("b", "c"):
        core.on_fetch(fetch_for(peer, 7, 10, EpochHistory(((1, 1), (7, 11)))), 100.0)
    core.appended(20)
    core.on_fetch(fetch_for("b", 7, 20, EpochHistory(((1, 1), (7, 11)))), 101.0)
    assert core.tick(101.5) is None
    assert core.tick(102.5) == IsrChange(frozenset({"a", "b"}))
    assert core.tick(102.6) is None  # one change in flight at a time
    # While the shrink is in flight the HWM still waits for c.
    assert core.hwm == 10
    core.isr_stored({"a", "b"})
    assert core.hwm == 20
    core.on_fetch(fetch_for("c", 7, 20, EpochHistory(((1, 1), (7, 11)))), 103.0)
    assert core.tick(103.0) == IsrChange(GROUP)
    core.isr_failed()
    assert core.in_sync == frozenset({"a", "b"})


def test_the_previous_leader_leaves_the_set_at_once() -> None:
    core = leader(previous_leader="c")
    assert core.tick(100.0) == IsrChange(frozenset({"a", "b"}))


def test_writes_are_refused_without_a_lease_or_enough_in_sync() -> None:
    lease = Lease(ttl=4.0, margin=1.0)
    core = leader()
    assert core.refusal(lease, 100.0) == "this replica's leadership lease is not renewed"
    lease.renewed(100.0)
    assert core.refusal(lease, 102.9) is None
    assert core.refusal(lease, 103.0) is not None  # ttl less the margin, from the send
    lease.renewed(99.0)  # an older send answered late moves nothing
    assert lease.expires() == 103.0
    lease.renewed(103.0)
    core.isr_stored({"a"})
    assert core.refusal(lease, 104.0) == "only 1 of 3 replicas in sync, 2 needed"
    assert core.confirmable() == 0


def test_arguments_out_of_range_are_refused() -> None:
    with pytest.raises(ReplicationError):
        leader(name="z")
    with pytest.raises(ReplicationError):
        leader(min_insync=4)
    with pytest.raises(ReplicationError):
        Lease(ttl=2.0, margin=2.0)
    with pytest.raises(ReplicationError):
        validate_members(["a", "a"])
    with pytest.raises(ReplicationError):
        validate_members(["a", ""])
    with pytest.raises(ReplicationError):
        leader().appended(9)
    assert validate_members(["a", "b"]) == frozenset({"a", "b"})
