"""PUTs in flight to the bus's log: each batch answered once, by confirm, error or time."""

from __future__ import annotations

from zbus.eventbus.core.mc0 import Publish, Reply
from zbus.eventbus.core.mc0_puts import PutTracker


def puts(*ids: str) -> list[Publish]:
    return [Publish("t", "mc0:x", b"d", Reply(b"a", i, True)) for i in ids]


def test_a_confirm_answers_its_batch_found_by_uuid() -> None:
    tracker = PutTracker(max_batches=2, timeout=5.0)
    first, second = puts("1", "2"), puts("3")
    tracker.add(["u1", "u2"], first, 0.0)
    tracker.add(["u3"], second, 0.0)
    assert tracker.full
    assert tracker.confirmed([["u3", 7]]) == second
    assert tracker.confirmed([["u1", 5], ["u2", 6]]) == first
    assert tracker.confirmed([["u1", 5]]) == []  # answered already: a late duplicate
    assert len(tracker) == 0 and not tracker.full


def test_an_error_answers_the_oldest_batch() -> None:
    tracker = PutTracker(max_batches=10, timeout=5.0)
    first, second = puts("1"), puts("2")
    tracker.add(["u1"], first, 0.0)
    tracker.add(["u2"], second, 1.0)
    assert tracker.refused() == first
    assert tracker.refused() == second
    assert tracker.refused() == []


def test_batches_unanswered_past_the_timeout_are_given_up_oldest_first() -> None:
    tracker = PutTracker(max_batches=10, timeout=5.0)
    first, second = puts("1"), puts("2", "3")
    tracker.add(["u1"], first, 0.0)
    tracker.add(["u2", "u3"], second, 1.0)
    assert tracker.next_deadline() == 5.0
    assert tracker.expired(4.9) == []
    assert tracker.expired(5.0) == first
    assert tracker.next_deadline() == 6.0
    assert tracker.expired(60.0) == second
    assert tracker.next_deadline() is None
    assert tracker.confirmed([["u2", 1]]) == []  # its late answer is ignored
