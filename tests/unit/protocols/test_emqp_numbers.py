"""eMQP numbers: every integer the codec reads is in the range the protocol carries, and
anything beyond it (huge, negative, thousands of digits) is a ProtocolError, never a value
nor another exception. The service's own policy ranges are the broker core's
(tests/unit/broker/test_ranges.py)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import FUZZ_EXAMPLES
from zbus.common.protocols.emqp import (
    EVENTMQ,
    MAX_QUEUE_WEIGHT,
    MIN_QUEUE_WEIGHT,
    SPEC,
    Dialect,
    EventmqCall,
    Inform,
    Schedule,
    Unschedule,
    build_call_body,
    decode,
    encode,
)
from zbus.common.protocols.errors import NumberRangeError, ProtocolError
from zbus.common.rejects import reject_reason

H = [b"", b"eMQP/1.0"]
BODY = build_call_body(EventmqCall(callable="f", path="m"))
DIALECTS = (SPEC, EVENTMQ, Dialect(eventmq_commands=True))
EXTREMES = [
    0,
    1,
    -1,
    2**31,
    2**53 + 1,
    2**63 - 1,
    2**63,
    -(2**63),
    -(2**63) - 1,
    2**64 - 1,
    2**64,
    10**20,
    99999999999999999999,
    10**400,
    -(10**400),
]
# Integers of every size, with the interesting edges drawn often.
huge = st.one_of(st.sampled_from(EXTREMES), st.integers(), st.integers(-(10**30), 10**30))
# Number texts: decimal (any length, up to past Python's 4,300-digit int() limit),
# signed, scientific, non-finite, padded with zeros.
number_text = st.one_of(
    huge.map(str),
    st.integers(1, 6000).map(lambda n: "9" * n),
    st.integers(1, 40).map(lambda n: "0" * n + "1"),
    st.sampled_from(["1e400", "-1e400", "inf", "nan", "1.5", "-0", "+1", " 1", "1_000", "٣"]),
)


def _inform(queues_text: str) -> list[bytes]:
    return [*H, b"INFORM", b"inf", queues_text.encode(), b"worker"]


def _schedule(command: bytes, interval_text: str, cron: bytes = b"") -> list[bytes]:
    return [*H, command, b"s", b"default", b"", interval_text.encode(), BODY, cron]


def _decode_checked(frames: list[bytes]) -> None:
    """A command whose numbers are in the codec's ranges, or a ProtocolError."""
    for dialect in DIALECTS:
        try:
            cmd = decode(frames, dialect)
        except ProtocolError:
            continue
        if isinstance(cmd, Inform):
            assert all(MIN_QUEUE_WEIGHT <= w <= MAX_QUEUE_WEIGHT for _, w in cmd.queues)
            if not dialect.json_queues:
                continue  # the spec's CSV form cannot carry weights: nothing to write back
        if isinstance(cmd, Schedule | Unschedule):
            assert -1 <= cmd.interval < 2**64
        assert decode(encode(cmd, dialect), dialect) == cmd


@settings(max_examples=FUZZ_EXAMPLES // 10)
@given(weights=st.lists(huge, min_size=1, max_size=4))
def test_inform_weights_beyond_64_bits_are_a_protocol_error(weights: list[int]) -> None:
    frames = _inform(json.dumps([[w, f"q{i}"] for i, w in enumerate(weights)]))
    _decode_checked(frames)
    if any(not MIN_QUEUE_WEIGHT <= w <= MAX_QUEUE_WEIGHT for w in weights):
        with pytest.raises(NumberRangeError, match="INFORM frame 4: expected queue weights"):
            decode(frames, EVENTMQ)


@settings(max_examples=FUZZ_EXAMPLES // 10)
@given(text=number_text, command=st.sampled_from([b"SCHEDULE", b"UNSCHEDULE"]))
def test_schedule_intervals_of_any_size_decode_or_raise_protocol_error(
    text: str, command: bytes
) -> None:
    _decode_checked(_schedule(command, text))
    _decode_checked(_schedule(command, text, b"* * * * *"))


@settings(max_examples=FUZZ_EXAMPLES // 10)
@given(text=number_text, name=st.sampled_from(["retry-count", "timeout", "delay", "run_count"]))
def test_number_headers_and_heartbeat_times_are_text_to_the_codec(text: str, name: str) -> None:
    # Headers carry the service's numbers as text; the broker core reads and bounds them.
    value = text.replace(",", "")
    if value:
        item = f"{name}:{value}".encode()
        _decode_checked([*H, b"REQUEST", b"j", b"default", item, BODY])
        _decode_checked([*H, b"SCHEDULE", b"s", b"default", item, b"60", BODY, b""])
    _decode_checked([*H, b"HEARTBEAT", b"h", text.encode()])


@pytest.mark.parametrize(
    ("text", "out_of_range"),
    [
        ("18446744073709551615", False),
        ("18446744073709551616", True),
        ("99999999999999999999", True),
        ("9" * 5000, True),  # beyond int()'s digit limit: still a ProtocolError
        ("000000000000000000001", True),  # more than 20 digits
        ("-5", False),
        ("1e3", False),
    ],
)
def test_schedule_interval_errors_say_what_is_wrong(text: str, out_of_range: bool) -> None:
    frames = _schedule(b"SCHEDULE", text)
    if text == "18446744073709551615":
        cmd = decode(frames, EVENTMQ)
        assert isinstance(cmd, Schedule) and cmd.interval == 2**64 - 1
        return
    with pytest.raises(ProtocolError) as caught:
        decode(frames, EVENTMQ)
    assert isinstance(caught.value, NumberRangeError) is out_of_range
    assert "SCHEDULE frame 6" in str(caught.value)
    if out_of_range:
        assert reject_reason(caught.value) == "out_of_range"


def test_encode_refuses_weights_beyond_64_bits() -> None:
    for weight in (2**63, -(2**63) - 1):
        with pytest.raises(NumberRangeError):
            encode(Inform("i", (("q", weight),)), EVENTMQ)
    edges = Inform("i", (("q", MAX_QUEUE_WEIGHT), ("r", MIN_QUEUE_WEIGHT)))
    assert decode(encode(edges, EVENTMQ), EVENTMQ) == edges


def test_large_header_frames_are_not_cached() -> None:
    from zbus.common.protocols import emqp_eventmq

    big = b"x:" + b"y" * 100_000
    frames = [*H, b"REQUEST", b"j", b"default", big, b"body"]
    for i in range(3):
        decode([*frames[:5], big + str(i).encode(), b"body"], SPEC)
    assert all(len(raw) <= 256 for raw in emqp_eventmq.HEADERS_BY_FRAME)
