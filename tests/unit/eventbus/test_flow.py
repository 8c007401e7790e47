"""The bus's byte bounds per socket direction: refused by setting when a queue cannot
hold two messages, and shown by name in the admin API."""

from __future__ import annotations

from zbus.eventbus.core.flow import MIN_MESSAGE_BYTES, PeerBounds, QueueBound, hwm_for

MiB = 1024 * 1024


def bounds(**peer_bytes: int) -> PeerBounds:
    args = {
        "stream_peer_bytes": 64 * MiB,
        "publisher_peer_bytes": 64 * MiB,
        "snapshot_peer_bytes": 64 * MiB,
        "collector_peer_bytes": 64 * MiB,
    }
    args.update(peer_bytes)
    return PeerBounds.from_settings(
        max_event_bytes=MiB, max_message_bytes=2 * MiB, max_batch_events=1000, **args
    )


def test_a_queue_and_the_message_in_flight_stay_within_the_bytes() -> None:
    assert hwm_for(10 * MiB, MiB) == 9
    assert hwm_for(MiB, MiB) == 0  # not even two: refused
    assert QueueBound(hwm=9, message_bytes=MiB).bound == 10 * MiB


def test_the_admin_table_names_every_socket_direction() -> None:
    table = bounds().table()
    assert list(table) == [
        "stream",
        "publisher",
        "snapshot_replies",
        "snapshot_requests",
        "collector_requests",
        "collector_replies",
    ]
    stream = table["stream"]
    assert stream["message_bytes"] == max(MIN_MESSAGE_BYTES, bounds().record_bytes)
    assert stream["bound"] == (stream["hwm"] + 1) * stream["message_bytes"]


def test_numbers_that_cannot_hold_two_messages_are_refused_by_setting() -> None:
    assert bounds().problems() == []
    problems = bounds(collector_peer_bytes=3 * MiB, publisher_peer_bytes=MiB).problems()
    assert len(problems) == 2
    assert problems[0].startswith("publisher_peer_bytes must be at least")
    assert problems[1].startswith("collector_peer_bytes must be at least 4194304 bytes")
