"""zbus's Event BUS extensions (ADR 0002), garbage in: random frames, near-valid payloads
and deeply nested msgpack raise ProtocolError or decode to a command that round-trips.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from typing import Any

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import FUZZ_EXAMPLES
from tests.support.eventbus_ext import COMMAND_FRAMES, DECODERS, TS, U64_MAX, UUID, commands, packb
from tests.unit.protocols.strategies import frame_lists
from zbus.common.protocols.errors import FrameValueError, ProtocolError
from zbus.common.protocols.eventbus_ext import (
    MAX_LIMIT,
    PUB_BATCH,
    Confirm,
    Error,
    PubBatch,
    SnapshotPage,
    SnapshotQuery,
    StreamBatch,
    StreamHeartbeat,
    decode_collector,
    decode_stream,
    decode_stream_fast,
    encode,
)

# Random msgpack objects, biased towards the names and values the decoders look for so
# that garbage often gets past the first checks.
map_keys = st.one_of(
    st.sampled_from(["subtrees", "since", "after", "mode", "limit", "events", "next", "sequence"]),
    st.text(max_size=8),
    st.binary(max_size=8),
)
leaves = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**63), U64_MAX),
    st.floats(),
    st.text(max_size=20),
    st.binary(max_size=20),
    st.sampled_from(
        [TS, UUID, "/t", "\0t", "", "latest", "log", 0, 1, -1, MAX_LIMIT, MAX_LIMIT + 1]
    ),
    st.builds(msgpack.ExtType, st.integers(0, 127), st.binary(max_size=16)),
    st.builds(msgpack.Timestamp, st.integers(-(2**63), 2**63 - 1), st.integers(0, 10**9 - 1)),
)
msgpack_objects = st.recursive(
    leaves,
    lambda children: (
        st.lists(children, max_size=7) | st.dictionaries(map_keys, children, max_size=5)
    ),
    max_leaves=12,
)
msgpack_frames = msgpack_objects.map(packb)
# Timestamp extensions (type -1) of a length or with nanoseconds msgpack refuses to read.
BAD_TIMESTAMP_EXTS = [
    b"\xd4\xff\x00",
    b"\x92\x01\xd4\xff\x00",
    b"\xc7\x0c\xff" + b"\xff" * 12,
    b"\x92\x01\x91\x95\xa2/t\xa1p\xc7\x0c\xff" + b"\xff" * 12,
]


@st.composite
def command_frame_lists(draw: st.DrawFn) -> list[bytes]:
    """A command frame followed by random frames, most of them msgpack."""
    head = draw(st.sampled_from(COMMAND_FRAMES))
    other = st.one_of(
        msgpack_frames,
        st.sampled_from([b"\x00", b"\x01", b"\x00" * 8, b"", *BAD_TIMESTAMP_EXTS]),
        st.binary(max_size=20),
    )
    return [head, *draw(st.lists(other, max_size=3))]


# --------------------------------------------------------------------------- garbage in


def check_garbage(frames: list[bytes]) -> None:
    """Every decoder either raises ProtocolError or returns a command that round-trips."""
    for decoder in DECODERS:
        try:
            cmd = decoder(frames)
        except ProtocolError as exc:
            assert re.match(r"eventbus-ext \S", str(exc))
            continue
        assert decoder(encode(cmd)) == cmd
    try:
        fast = decode_stream_fast(frames)
    except ProtocolError:
        fast = None
    try:
        slow = decode_stream(frames)
    except ProtocolError:
        return
    # Whatever the checked decoder accepts, the fast one reads the same way.
    assert fast == decode_stream_fast(encode(slow))


@settings(max_examples=FUZZ_EXAMPLES)
@given(frame_lists | command_frame_lists())
def test_garbage_frames(frames: list[bytes]) -> None:
    check_garbage(frames)


def node_paths(obj: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """The path of every node of a decoded msgpack tree, the root first."""
    paths = [prefix]
    if isinstance(obj, list):
        for i, child in enumerate(obj):
            paths += node_paths(child, (*prefix, i))
    elif isinstance(obj, dict):
        for key, child in obj.items():
            paths += node_paths(child, (*prefix, key))
    return paths


def mutated(obj: Any, path: tuple[Any, ...], how: str, value: Any) -> Any:
    """A copy of ``obj`` with the node at ``path`` replaced, removed, or given a sibling."""
    if len(path) == 1 and isinstance(obj, list | dict):
        key = path[0]
        if isinstance(obj, list):
            copy: Any = list(obj)
            if how == "remove":
                del copy[key]
            elif how == "insert":
                copy.insert(key, value)
            else:
                copy[key] = value
            return copy
        copy = dict(obj)
        if how == "remove":
            del copy[key]
        elif how == "insert":
            copy["extra"] = value
        else:
            copy[key] = value
        return copy
    if not path:
        return value
    head, *rest = path
    copy = list(obj) if isinstance(obj, list) else dict(obj)
    copy[head] = mutated(obj[head], tuple(rest), how, value)
    return copy


@st.composite
def near_valid(draw: st.DrawFn) -> list[bytes]:
    """A valid command whose msgpack payload has one node replaced, removed or added."""
    kind = draw(
        st.sampled_from(
            [PubBatch, Confirm, Error, SnapshotQuery, SnapshotPage, StreamBatch, StreamHeartbeat]
        )
    )
    frames = encode(draw(commands(kind)))
    if kind in (Error, StreamHeartbeat):
        frames[-1] = draw(st.binary(max_size=12))
        return frames
    tree = msgpack.unpackb(frames[-1], raw=False)
    path = draw(st.sampled_from(node_paths(tree)))
    how = draw(st.sampled_from(["replace", "remove", "insert"]))
    frames[-1] = packb(mutated(tree, path, how, draw(msgpack_objects)))
    return frames


@settings(max_examples=max(FUZZ_EXAMPLES // 10, 100))
@given(near_valid())
def test_near_valid_payloads(frames: list[bytes]) -> None:
    check_garbage(frames)


# Where a value sits in each payload, as the msgpack bytes in front of it.
NESTING_SITES = [
    b"",
    b"\x91",  # [X]: an event row
    b"\x92\x01",  # [1, X]: a batch's events
    b"\x91\x92\xa1u",  # [["u", X]]: a confirmation
    b"\x81\xa6events",  # {"events": X}
    b"\x82\xa6events\x90\xa8sequence",  # {"events": [], "sequence": X}
    b"\x81\xa4mode",  # {"mode": X}
    b"\x81\xa5limit",  # {"limit": X}
    b"\x81\xa8subtrees",  # {"subtrees": X}
    b"\x81\xa5extra",  # {"extra": X}
]


def nested_frame_lists(depth: int) -> list[list[bytes]]:
    """Every command frame with a payload holding ``depth`` arrays one inside the other."""
    payloads = [site + b"\x91" * depth + b"\xc0" for site in NESTING_SITES]
    return [
        frames
        for payload in payloads
        for frames in (
            [PUB_BATCH, b"\x00", payload],
            *([command, payload] for command in COMMAND_FRAMES),
        )
    ]


def call_at_depth(depth: int, fn: Callable[[], object]) -> None:
    """Call ``fn`` with ``depth`` more frames on the stack, as in a deep caller."""
    if depth:
        call_at_depth(depth - 1, fn)
    else:
        fn()


@pytest.mark.parametrize("depth", [100, 500, 900, 990, 1000, 1010, 1024, 1025, 2000])
def test_deeply_nested_msgpack_raises_protocol_error(depth: int) -> None:
    for frames in nested_frame_lists(depth):
        check_garbage(frames)


@pytest.mark.parametrize("stack", [200, 600])
def test_deeply_nested_msgpack_from_a_deep_call_stack(stack: int) -> None:
    for frames in nested_frame_lists(1000 - stack):
        call_at_depth(stack, functools.partial(check_garbage, frames))


def test_a_value_too_deep_to_show_is_named_as_such() -> None:
    frames = [PUB_BATCH, b"\x00", b"\x91" * 1000 + b"\xc0"]
    expected = r"^eventbus-ext ZB-PUB frame 2: expected event 0 as \[.*\], got '<value nested too"
    with pytest.raises(FrameValueError, match=expected):
        call_at_depth(100, lambda: decode_collector(frames))
