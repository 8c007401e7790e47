"""The replication dialog's codec: round trips, and garbage that must be refused
with a ProtocolError, never another exception."""

from __future__ import annotations

import contextlib

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import FUZZ_EXAMPLES
from zbus.common.protocols import replication as rp
from zbus.common.protocols.errors import ProtocolError

positions = st.integers(0, rp.MAX_POSITION)
names = st.text(min_size=1, max_size=60)
histories = st.lists(st.tuples(st.integers(1, 1000), st.integers(1, 1000)), max_size=5).map(
    lambda xs: tuple(zip(sorted({e for e, _ in xs}), sorted(s for _, s in xs), strict=False))
)
commands = st.one_of(
    st.builds(
        rp.Fetch,
        names,
        names,
        positions,
        st.integers(1, rp.MAX_POSITION),
        positions,
        st.integers(rp.MIN_FETCH_BYTES, rp.MAX_FETCH_BYTES),
    ),
    st.builds(
        rp.Serve,
        positions,
        st.integers(1, rp.MAX_POSITION),
        positions,
        positions,
        histories,
        st.lists(st.binary(max_size=50), max_size=4).map(tuple),
    ),
    st.builds(rp.Diverging, positions, positions, positions),
    st.builds(rp.Refused, positions, st.text(min_size=1, max_size=20), st.text(max_size=100)),
)


@given(commands)
def test_round_trip(cmd: rp.Command) -> None:
    assert rp.decode(rp.encode(cmd)) == cmd


@settings(max_examples=max(FUZZ_EXAMPLES // 10, 100))
@given(st.lists(st.binary(max_size=40), max_size=4))
def test_garbage_is_a_protocol_error(frames: list[bytes]) -> None:
    with contextlib.suppress(ProtocolError):
        rp.decode(frames)


@settings(max_examples=max(FUZZ_EXAMPLES // 10, 100))
@given(
    st.sampled_from([rp.FETCH, rp.SERVE, rp.DIVERGING, rp.REFUSED]),
    st.lists(
        st.one_of(
            st.integers(-(2**63), 2**64 - 1),
            st.text(max_size=300),
            st.none(),
            st.binary(max_size=5),
            st.lists(st.integers(-5, 5), max_size=3),
        ),
        max_size=7,
    ),
)
def test_fields_out_of_range_are_a_protocol_error(head: bytes, fields: list[object]) -> None:
    with contextlib.suppress(ProtocolError):
        rp.decode([head, msgpack.packb(fields)])


@pytest.mark.parametrize(
    ("frames", "says"),
    [
        ([], "a command frame"),
        ([b"ZR-NOPE", b""], "ZR-FETCH"),
        ([rp.FETCH, msgpack.packb(["g", "a", 1, 0, 0, 4096])], "from_seq an integer in 1"),
        ([rp.FETCH, msgpack.packb(["g", "a", 1, 1, 0, 10])], "max_bytes an integer in 1024"),
        ([rp.FETCH, msgpack.packb(["g", "a", 1, 1, 0, 1 << 30])], "max_bytes at most"),
        ([rp.FETCH, msgpack.packb(["g", "", 1, 1, 0, 4096])], "name a string of 1-255"),
        ([rp.FETCH, msgpack.packb(["g", "a", 2**63, 1, 0, 4096])], "epoch an integer"),
        ([rp.FETCH, msgpack.packb(["g", "a", True, 1, 0, 4096])], "epoch an integer"),
        ([rp.FETCH, b"\xc1"], "a msgpack array"),
        ([rp.SERVE, msgpack.packb([1, 1, 0, 0, [[2, 5], [1, 9]]])], "ascending order"),
        ([rp.SERVE, msgpack.packb([1, 1, 0, 0, [[2, 5]] * 5000])], "at most 4096"),
        ([rp.DIVERGING, msgpack.packb([1, -1, 0])], "at_epoch an integer"),
        ([rp.REFUSED, msgpack.packb([1, "x" * 65, ""])], "reason a string of 1-64"),
    ],
)
def test_malformed_commands_say_what_is_wrong(frames: list[bytes], says: str) -> None:
    with pytest.raises(ProtocolError, match=says):
        rp.decode(frames)
