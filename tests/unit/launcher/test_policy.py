"""The local cluster's restart policy, told the time: back-off, reset, giving up."""

from __future__ import annotations

import pytest

from zbus.launcher.policy import GiveUp, Phase, Restart, RestartPolicy, Supervision


def _running(policy: RestartPolicy | None = None, now: float = 0.0) -> Supervision:
    sup = Supervision(policy or RestartPolicy())
    sup.started(now)
    sup.became_ready(now + 1)
    return sup


def _crash(sup: Supervision, now: float) -> Restart:
    """The process exits at ``now``; it is started again when due and gets ready."""
    decision = sup.exited(now)
    assert isinstance(decision, Restart)
    assert not sup.is_due(decision.at - 0.001) and sup.is_due(decision.at)
    sup.started(decision.at)
    sup.became_ready(decision.at + 0.5)
    return decision


def test_the_default_policy_is_the_documented_one() -> None:
    policy = RestartPolicy()
    assert (policy.backoff, policy.backoff_max) == (1.0, 30.0)
    assert (policy.healthy_after, policy.start_attempts) == (60.0, 5)


def test_crashes_back_off_doubling_up_to_the_cap() -> None:
    sup = _running()
    now, delays = 10.0, []
    for _ in range(8):
        decision = _crash(sup, now)
        delays.append(decision.delay)
        assert not decision.failed_start and decision.failed_starts == 0
        now = decision.at + 5  # ready for a few seconds only: not healthy yet
    assert delays == [1, 2, 4, 8, 16, 30, 30, 30]
    assert sup.restarts == 8 and sup.phase is Phase.READY


def test_a_minute_of_health_resets_the_back_off() -> None:
    sup = _running()
    first = _crash(sup, 10.0)
    second = _crash(sup, first.at + 2)
    assert (first.delay, second.delay) == (1, 2)
    # Ready at second.at + 0.5; 59 s later it is not healthy yet, 60 s later it is.
    assert not sup.healthy(second.at + 0.5 + 59.9)
    assert sup.healthy(second.at + 0.5 + 60)
    third = _crash(sup, second.at + 0.5 + 60)
    assert third.delay == 1


def test_five_failed_starts_in_a_row_give_up() -> None:
    sup = Supervision(RestartPolicy())
    now = 0.0
    delays = []
    for attempt in range(1, 5):
        sup.started(now)
        decision = sup.exited(now + 0.2)  # before it was ready
        assert isinstance(decision, Restart) and decision.failed_start
        assert decision.failed_starts == attempt
        delays.append(decision.delay)
        now = decision.at
    assert delays == [1, 2, 4, 8]
    sup.started(now)
    assert sup.exited(now + 0.2) == GiveUp(5)
    assert sup.phase is Phase.GIVEN_UP and sup.due is None and not sup.is_due(now + 1e6)
    assert sup.restarts == 4  # five starts: the first and four restarts
    sup.stopped()
    assert sup.phase is Phase.GIVEN_UP  # stopping the cluster does not hide it


def test_becoming_ready_ends_the_failed_starts_in_a_row() -> None:
    sup = Supervision(RestartPolicy(start_attempts=3))
    sup.started(0)
    assert isinstance(sup.exited(1), Restart)
    sup.started(2)
    assert isinstance(sup.exited(3), Restart)
    sup.started(5)
    sup.became_ready(6)
    assert sup.failed_starts == 0
    crash = sup.exited(7)  # a crash after running is not a failed start
    assert isinstance(crash, Restart) and not crash.failed_start
    sup.started(crash.at)
    again = sup.exited(crash.at + 1)  # then two failed starts: not yet three in a row
    assert isinstance(again, Restart) and again.failed_starts == 1


def test_crashes_after_running_are_never_given_up() -> None:
    sup = _running(RestartPolicy(start_attempts=1))
    now = 5.0
    for _ in range(20):
        now = _crash(sup, now).at + 1
    assert sup.phase is Phase.READY and sup.restarts == 20


def test_a_stopped_service_is_not_due() -> None:
    sup = _running()
    decision = sup.exited(3)
    assert isinstance(decision, Restart)
    sup.stopped()
    assert sup.phase is Phase.STOPPED and not sup.is_due(decision.at + 100)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"backoff": 0}, "backoff must be"),
        ({"backoff": 2, "backoff_max": 1}, "backoff_max"),
        ({"healthy_after": -1}, "healthy_after"),
        ({"start_attempts": 0}, "start_attempts"),
    ],
)
def test_a_bad_policy_is_refused(kwargs: dict[str, float], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        RestartPolicy(**kwargs)  # type: ignore[arg-type]
