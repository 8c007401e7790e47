"""The PPPP door's state in the log (ADR 0010): its encoding, the core's gate, and a
replica's fold of the state events into its file."""

from __future__ import annotations

from pathlib import Path

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import FUZZ_EXAMPLES
from tests.unit.eventbus.pppp_harness import Door
from zbus.common.protocols import pppp
from zbus.eventbus.core.pppp import (
    STATE_PRODUCER,
    STATE_TOPIC,
    StateDelta,
    StateError,
    decode_state,
    encode_state,
)
from zbus.eventbus.core.pppp._channels import ChannelIndex
from zbus.eventbus.doors.pppp.group import GroupState

A = b"sub-a"

names = st.text(min_size=0, max_size=40)
numbers = st.integers(0, 2**64 - 1)
checkpoints = st.dictionaries(names, st.none() | st.tuples(numbers, numbers), max_size=8)
positions = st.dictionaries(
    st.tuples(st.binary(min_size=1, max_size=255), names), st.none() | numbers, max_size=16
)


@settings(max_examples=min(FUZZ_EXAMPLES, 2000), deadline=None)
@given(checkpoints, positions, st.integers(200, 5000))
def test_state_events_carry_every_change_in_order_within_their_size(
    cps: dict[str, tuple[int, int] | None],
    pos: dict[tuple[bytes, str], int | None],
    max_bytes: int,
) -> None:
    events = encode_state(cps, pos, max_bytes)
    folded = StateDelta()
    for data in events:
        assert (
            len(data) <= max_bytes or len(msgpack.unpackb(data)[1] + msgpack.unpackb(data)[2]) == 1
        )
        folded.update(decode_state(data))
    assert folded.checkpoints == cps
    assert folded.positions == pos  # the positions come after the checkpoints


@pytest.mark.parametrize(
    "data",
    [
        b"\xc1",
        msgpack.packb([2, [], []]),
        msgpack.packb([1, [["/a", -1, 0]], []]),
        msgpack.packb([1, [["/a", 0, 1.5]], []]),
        msgpack.packb([1, [["/a", True, 0]], []]),
        msgpack.packb([1, [["x" * 1025, 0, 0]], []]),
        msgpack.packb([1, [], [[b"", "/a", 1]]], use_bin_type=True),
        msgpack.packb([1, [], [[b"i" * 256, "/a", 1]]], use_bin_type=True),
        msgpack.packb([1, [], [["text-identity", "/a", 1]]], use_bin_type=False),
        msgpack.packb([1, [["/a", 1]], []]),
        msgpack.packb([1, {}, []]),
    ],
)
def test_a_state_event_out_of_range_is_refused(data: bytes) -> None:
    with pytest.raises(StateError):
        decode_state(data)


def test_a_channel_dropped_and_made_again_takes_its_old_positions_with_it() -> None:
    delta = StateDelta(positions={(A, "/a/"): 5, (A, "/b/"): 2})
    delta.update(StateDelta(checkpoints={"/a/": None}))
    delta.update(StateDelta(checkpoints={"/a/": (0, 40)}, positions={(b"x", "/a/"): 0}))
    assert delta.checkpoints == {"/a/": (0, 40)}
    assert delta.positions == {(A, "/b/"): 2, (b"x", "/a/"): 0}
    assert delta.dropped == {"/a/"}


def test_no_channel_numbers_the_doors_state_events() -> None:
    index = ChannelIndex()
    index.add("", (0, 0))
    index.add("/zbus/", (0, 0))
    assert index.route(STATE_TOPIC)[1] == ()
    assert len(index.route("/zbus/pppp/custom/x")[1]) == 2


def test_a_replicated_core_sends_nothing_until_the_replicas_hold_where_it_starts() -> None:
    door = Door()
    door.core.replicated = True
    door.publish("/a/1")
    door.core.advance(1)
    door.receive(A, pppp.Subscribe("/a/"))
    door.pump()
    assert door.messages(A) == []
    changes = door.core.take_changes()
    assert changes.checkpoints == {"/a/": (0, 1)} and changes.positions == {(A, "/a/"): 0}
    door.publish("/a/2")
    door.pump()
    assert door.messages(A) == []
    # The channel's checkpoint alone is not enough: the conversation's start is needed.
    assert door.core.settle("/a/", (0, 1))
    door.pump()
    assert door.messages(A) == []
    assert not door.core.settle_position(A, "/a/", 7)  # not where it starts
    assert door.core.settle_position(A, "/a/", 0)
    door.pump()
    # The SYNC, then what came since, numbered from the checkpoint every replica holds.
    assert door.messages(A) == [(0, "/a/1"), (0, "<end 0 1>"), (1, "/a/2")]


def group_state(tmp_path: Path, leading: list[tuple[int, int]]) -> GroupState:
    return GroupState(
        tmp_path / "pppp-group.sqlite",
        fsync=False,
        leading=lambda: leading[0],
        max_event_bytes=1 << 20,
    )


def state_row(checkpoints: dict[str, tuple[int, int] | None]) -> list[object]:
    (data,) = encode_state(checkpoints, {}, 1 << 20)
    return [STATE_TOPIC, STATE_PRODUCER, "2026-01-01T00:00:00.000Z", "u", data]


def other_row() -> list[object]:
    return ["/a/1", "p", "2026-01-01T00:00:00.000Z", "u", b"x"]


def test_a_replica_folds_the_state_events_of_the_stream_into_its_file(tmp_path: Path) -> None:
    leading = [(0, 0)]
    group = group_state(tmp_path, leading)
    group.behind = False  # an empty log: nothing to read first
    group.rows(1, [other_row(), state_row({"/a/": (0, 1)})])
    group.skipped(3, 5)
    group.rows(8, [state_row({"/a/": (3, 6)}), other_row()])
    assert group.applied == 9 and not group.behind
    assert group.write(None) is not None
    assert group.store.channels() == [("/a/", 3, 6)] and group.store.applied() == 9
    # Batches already folded in come again (a resend): nothing changes.
    group.rows(8, [state_row({"/a/": None}), other_row()])
    assert group.write(None) is None
    group.close()
    again = group_state(tmp_path, leading)
    assert again.applied == 9 and again.checkpoints == {"/a/": (3, 6)}
    again.close()


def test_a_gap_or_a_heartbeat_past_the_fold_sends_the_replica_to_the_log(tmp_path: Path) -> None:
    group = group_state(tmp_path, [(0, 0)])
    group.behind = False
    group.rows(1, [other_row()])
    group.rows(3, [state_row({"/a/": (0, 2)})])  # sequence 2 never came
    assert group.behind and group.applied == 1 and not group.pending
    group.behind = False
    group.heard(5)
    assert group.behind
    group.close()


def test_state_from_another_producer_is_ignored_and_counted(tmp_path: Path) -> None:
    group = group_state(tmp_path, [(0, 0)])
    group.behind = False
    forged = state_row({"/a/": (0, 0)})
    forged[1] = "someone"
    group.rows(1, [forged, [STATE_TOPIC, STATE_PRODUCER, "t", "u", b"garbage"]])
    assert group.bad_events == 2 and not group.pending and group.applied == 2
    group.close()


def test_a_door_serves_once_it_has_folded_in_the_log_it_was_elected_with(tmp_path: Path) -> None:
    leading = [(0, 0)]
    group = group_state(tmp_path, leading)
    group.behind = False
    assert group.role_change() is None
    leading[0] = (7, 3)  # elected in epoch 7 with a log ending at 3
    assert group.role_change() is None
    group.rows(1, [other_row(), other_row()])
    assert group.role_change() is None
    group.rows(3, [other_row()])
    assert group.role_change() == "promote" and group.serving == 7
    assert group.role_change() is None
    leading[0] = (9, 12)  # lost and won again between two looks: serve afresh
    assert group.role_change() == "demote" and group.serving == 0
    leading[0] = (0, 0)
    assert group.role_change() is None
    group.close()
