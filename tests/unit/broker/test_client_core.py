"""The broker clients' sans-I/O core: what each call answers, with the time passed in."""

from __future__ import annotations

import json

import pytest

from zbus.broker.client import DIALECT, BrokerUnavailable, JobFailed
from zbus.broker.client.tracker import AckWait, JobTracker
from zbus.common.protocols import emqp


def ack(job_id: str) -> list[bytes]:
    return emqp.encode(emqp.Ack("ack-" + job_id, job_id), DIALECT)


def refusal(job_id: str) -> list[bytes]:
    body = json.dumps({"error": {"type": "QueueFullError", "message": "full"}, "state": "rejected"})
    return emqp.encode(emqp.Reply("r-" + job_id, body.encode(), job_id), DIALECT)


def test_options_are_checked_in_order() -> None:
    with pytest.raises(ValueError, match="ack_timeout"):
        JobTracker(0, ack_timeout=0)
    with pytest.raises(ValueError, match="max_results"):
        JobTracker(0, ack_timeout=1)


def test_a_submit_answers_its_id_or_raises_the_refusal() -> None:
    tracker = JobTracker(10, 2.0)
    job_id, _ = tracker.request("default", "add", {"args": [1]})
    assert tracker.feed(ack(job_id)) == job_id
    assert tracker.answer(job_id) == job_id

    tracker.request("default", "add", {"job_id": "bad"})
    tracker.feed(refusal("bad"))
    with pytest.raises(JobFailed, match="rejected"):
        tracker.answer("bad")
    assert tracker.take_result("bad") is None  # raised once, not kept


def test_an_unanswered_submit_is_forgotten() -> None:
    tracker = JobTracker(10, 2.0)
    tracker.request("default", "add", {"job_id": "j"})
    error = tracker.unavailable("j")
    assert (error.job_ids, tracker.unacked) == (["j"], {})


def test_the_window_and_a_stalled_batch() -> None:
    tracker = JobTracker(10, 2.0)
    tracker.request("default", "add", {"job_id": "a"})
    assert not tracker.window_full(2)
    tracker.request("default", "add", {"job_id": "b"})
    assert tracker.window_full(2)
    assert tracker.stalled().job_ids == ["a", "b"]
    with pytest.raises(ValueError, match="window"):
        tracker.window_full(0)


def test_a_result_deadline_and_its_timeout() -> None:
    tracker = JobTracker(10, 2.0)
    assert tracker.result_deadline(100.0, 5) == 105.0
    assert tracker.result_deadline(100.0, None) == float("inf")
    with pytest.raises(ValueError, match="timeout"):
        tracker.result_deadline(100.0, -1)
    assert "job j within 0.5s" in str(tracker.no_result("j", 0.5))


def test_wait_acks_goes_on_while_acks_come_and_gives_up_when_they_stop() -> None:
    tracker = JobTracker(10, 2.0)
    for job_id in ("a", "b", "bad"):
        tracker.request("default", "add", {"job_id": job_id})
    acks = AckWait(tracker, 100.0, None)
    assert acks.deadline == 102.0
    acks.check(101.0)  # nothing came, not yet late
    tracker.feed(ack("a"))
    acks.check(101.5)  # an ACK came: another ack_timeout from now
    assert acks.deadline == 103.5
    tracker.feed(refusal("bad"))
    acks.check(103.5)  # an answer came by the deadline: another round
    assert acks.deadline == 105.5
    with pytest.raises(BrokerUnavailable) as caught:
        acks.check(105.5)
    assert caught.value.job_ids == ["b"]
    assert caught.value.waited == pytest.approx(5.5)
    tracker.feed(ack("b"))
    acks.check(200.0)  # all answered: never late
    assert acks.done
    assert acks.rejected() == ["bad"]


def test_wait_acks_gives_up_at_its_timeout_even_while_acks_come() -> None:
    tracker = JobTracker(10, 2.0)
    for job_id in ("a", "b"):
        tracker.request("default", "add", {"job_id": job_id})
    acks = AckWait(tracker, 100.0, 1.0)
    assert acks.deadline == 101.0
    tracker.feed(ack("a"))
    with pytest.raises(BrokerUnavailable):
        acks.check(101.0)
    with pytest.raises(ValueError, match="timeout"):
        AckWait(tracker, 0.0, -1)
