"""A door's link to the log, its bookkeeping: batches cut by count and bytes, each
answered once (by confirm, error or time), a cap on batches in flight, gaps in the
stream. The time is passed in."""

from __future__ import annotations

from dataclasses import dataclass

from zbus.common.protocols.eventbus_limits import RECORD_OVERHEAD
from zbus.eventbus.core.link import BATCH_MARGIN, Confirms, StreamFollower, chunks


@dataclass(frozen=True)
class Item:
    topic: str
    producer: str
    data: bytes


def items(*sizes: int) -> list[Item]:
    return [Item("t", "p", b"x" * size) for size in sizes]


def sizes(batches: list[list[Item]]) -> list[list[int]]:
    return [[len(item.data) for item in batch] for batch in batches]


def test_few_small_events_are_one_batch_and_none_is_no_batch() -> None:
    few = items(1, 2, 3)
    batches = list(chunks(few, 10, 1 << 20))
    assert batches == [few]
    assert list(chunks([], 10, 1 << 20)) == []


def test_batches_are_cut_by_event_count() -> None:
    batches = [list(b) for b in chunks(items(*range(7)), 3, 1 << 20)]
    assert sizes(batches) == [[0, 1, 2], [3, 4, 5], [6]]


def test_batches_are_cut_by_bytes_with_each_events_fields_at_their_largest() -> None:
    cost = 1000 + RECORD_OVERHEAD
    room = 2 * cost + BATCH_MARGIN  # two events fit in a message, not three
    batches = [list(b) for b in chunks(items(1000, 1000, 1000, 1000, 1000), 100, room)]
    assert sizes(batches) == [[1000, 1000], [1000, 1000], [1000]]
    # One byte less: one event a batch.
    batches = [list(b) for b in chunks(items(1000, 1000, 1000), 100, room - 1)]
    assert sizes(batches) == [[1000], [1000], [1000]]


def test_an_event_larger_than_a_message_is_a_batch_of_its_own() -> None:
    batches = [list(b) for b in chunks(items(1, 10_000, 1), 100, 5000)]
    assert sizes(batches) == [[1], [10_000], [1]]


def test_a_confirm_answers_its_batch_found_by_any_uuid() -> None:
    confirms: Confirms[Item] = Confirms(max_batches=2, timeout=5.0)
    first, second = items(1, 2), items(3)
    confirms.sent(["u1", "u2"], first, 0.0)
    confirms.sent(["u3"], second, 0.0)
    assert confirms.confirmed([["u3", 7]]) == second
    assert confirms.confirmed([["u2", 6], ["u1", 5]]) == first
    assert list(confirms.confirmed([["u1", 5]])) == []  # answered already: a late duplicate
    assert len(confirms) == 0


def test_no_more_than_max_batches_are_in_flight() -> None:
    confirms: Confirms[Item] = Confirms(max_batches=2, timeout=5.0)
    confirms.sent(["u1"], items(1), 0.0)
    assert not confirms.full
    confirms.sent(["u2"], items(1), 0.0)
    assert confirms.full
    confirms.confirmed([["u1", 1]])
    assert not confirms.full
    confirms.sent(["u3"], items(1), 0.0)
    assert confirms.full
    confirms.expired(5.0)  # given up: room again
    assert not confirms.full


def test_an_error_answers_the_oldest_batch() -> None:
    confirms: Confirms[Item] = Confirms(max_batches=10, timeout=5.0)
    first, second = items(1), items(2)
    confirms.sent(["u1"], first, 0.0)
    confirms.sent(["u2"], second, 1.0)
    assert confirms.refused() == first
    assert confirms.refused() == second
    assert list(confirms.refused()) == []


def test_batches_unanswered_past_the_timeout_are_given_up_oldest_first() -> None:
    confirms: Confirms[Item] = Confirms(max_batches=10, timeout=5.0)
    first, second = items(1), items(2, 3)
    assert confirms.next_deadline() is None
    confirms.sent(["u1"], first, 0.0)
    confirms.sent(["u2", "u3"], second, 1.0)
    assert confirms.next_deadline() == 5.0
    assert confirms.expired(4.9) == []
    assert confirms.expired(5.0) == first
    assert confirms.next_deadline() == 6.0
    assert confirms.expired(60.0) == second
    assert confirms.next_deadline() is None
    assert list(confirms.confirmed([["u2", 1]])) == []  # its late answer is ignored


def test_a_batch_above_the_expected_sequence_reports_the_events_missed() -> None:
    follower = StreamFollower()
    assert follower.batch(100, 5) == 0  # the first batch: nothing to miss
    assert follower.batch(105, 3) == 0
    assert follower.expect == 108
    assert follower.batch(110, 2) == 2  # 108 and 109 missed
    assert follower.batch(112, 1) == 0
    assert follower.missed == 2


def test_after_a_reset_the_next_batch_starts_over() -> None:
    follower = StreamFollower()
    follower.batch(1, 10)
    follower.reset()
    assert follower.batch(50, 1) == 0
    assert follower.batch(52, 1) == 1
    assert follower.missed == 1


def test_a_heartbeat_past_the_expected_sequence_reports_the_events_missed() -> None:
    follower = StreamFollower()
    assert follower.heartbeat(10) == 0  # before the first batch: nothing to miss
    assert follower.expect is None
    follower.batch(10, 5)
    assert follower.heartbeat(15) == 0  # the log is where the door stands
    assert follower.heartbeat(12) == 0  # an older heartbeat: nothing missed
    assert follower.expect == 15
    assert follower.heartbeat(18) == 3  # 15, 16 and 17 did not come
    assert follower.batch(18, 1) == 0  # counted once
    assert follower.missed == 3
