"""How an mc0 PUT's headers travel in the event's data: exact round trips, and data from
other doors passing through untouched."""

from __future__ import annotations

import msgpack
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import FUZZ_EXAMPLES
from zbus.common.protocols.mc0 import Headers
from zbus.common.protocols.mc0_envelope import PREFIX, unwrap, wrap

x_headers = st.dictionaries(st.text(max_size=20).map(lambda k: "X-" + k), st.text(max_size=20))
bodies = st.binary(max_size=64) | st.binary(max_size=16).map(lambda b: PREFIX + b)


def test_a_put_without_headers_is_stored_as_its_body() -> None:
    assert wrap((), b"mcollective payload") == b"mcollective payload"


def test_a_put_with_headers_is_a_msgpack_map_naming_them() -> None:
    data = wrap((("X-REPLY-TO", "mcollective reply n1 42"),), b"\x00body")
    assert msgpack.unpackb(data, raw=False) == {
        "mc0-headers": {"X-REPLY-TO": "mcollective reply n1 42"},
        "mc0-body": b"\x00body",
    }
    assert unwrap(data) == ((("X-REPLY-TO", "mcollective reply n1 42"),), b"\x00body")


def test_a_body_that_looks_like_an_envelope_is_wrapped_so_it_comes_back_as_it_was() -> None:
    lookalike = wrap((("X-A", "1"),), b"inner")
    data = wrap((), lookalike)
    assert data != lookalike
    assert unwrap(data) == ((), lookalike)


def test_events_from_other_doors_are_bodies_without_headers() -> None:
    packed = msgpack.packb({"celsius": 21.5})
    assert unwrap(packed) == ((), packed)
    assert unwrap(b"") == ((), b"")


def test_malformed_envelopes_are_bodies_without_headers() -> None:
    for value in (
        {"mc0-headers": {"Y-NOT-X": "v"}, "mc0-body": b"b"},  # a reserved header
        {"mc0-headers": {"X-A": 1}, "mc0-body": b"b"},  # a value that is not text
        {"mc0-headers": {}, "mc0-body": "text, not binary"},
        {"mc0-headers": [], "mc0-body": b"b"},
    ):
        data = msgpack.packb(value, use_bin_type=True)
        assert data.startswith(PREFIX)
        assert unwrap(data) == ((), data)
    truncated = wrap((("X-A", "1"),), b"body")[:-2]
    assert unwrap(truncated) == ((), truncated)
    assert unwrap(wrap((("X-A", "1"),), b"b") + b"trailing")[0] == ()


@settings(max_examples=max(FUZZ_EXAMPLES // 10, 100))
@given(x_headers, bodies)
def test_round_trip(headers: dict[str, str], body: bytes) -> None:
    pairs: Headers = tuple(headers.items())
    assert unwrap(wrap(pairs, body)) == (pairs, body)


@settings(max_examples=max(FUZZ_EXAMPLES // 10, 100))
@given(st.binary(max_size=80) | st.binary(max_size=40).map(lambda b: PREFIX + b))
def test_unwrap_never_raises(data: bytes) -> None:
    headers, body = unwrap(data)
    assert isinstance(body, bytes)
    assert all(key.startswith("X-") and isinstance(value, str) for key, value in headers)
    assert (headers, body) == ((), data) or data.startswith(PREFIX)
