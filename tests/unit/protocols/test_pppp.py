"""PPPP codec: round trips, golden frames, garbage in."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import FUZZ_EXAMPLES
from tests.unit.protocols.strategies import frame_lists
from zbus.common.protocols import pppp
from zbus.common.protocols.errors import (
    FrameCountError,
    FrameValueError,
    ProtocolError,
    UnknownCommandError,
)
from zbus.common.protocols.pppp import (
    AckNack,
    Custom,
    Heartbeat,
    Publish,
    Subscribe,
    decode_from_publisher,
    decode_from_subscriber,
    encode,
)

U64_MAX = (1 << 64) - 1


def u64(value: int) -> bytes:
    return value.to_bytes(8, "big")


# --------------------------------------------------------------------------- strategies

channels = st.text(max_size=24).filter(lambda c: c[:1] not in ("\x01", "\x02", "\x03", "\x04"))
sequences = st.integers(min_value=0, max_value=U64_MAX)
payloads = st.lists(st.binary(max_size=32), max_size=5).map(tuple)


@st.composite
def acknacks(draw: st.DrawFn) -> AckNack:
    highest = draw(sequences)
    missing: list[tuple[int, int]] = []
    if highest > 0:
        below = st.integers(min_value=0, max_value=highest - 1)
        for _ in range(draw(st.integers(min_value=0, max_value=4))):
            a, b = draw(below), draw(below)
            missing.append((min(a, b), max(a, b)))
    return AckNack(draw(channels), highest, tuple(missing))


subscriber_commands = st.one_of(
    st.builds(Subscribe, channels),
    acknacks(),
    st.just(Heartbeat()),
    st.builds(Custom, payloads),
)
publisher_commands = st.one_of(
    st.builds(Publish, channels, sequences, payloads),
    st.just(Heartbeat()),
)


# --------------------------------------------------------------------------- round trips


@given(subscriber_commands)
def test_subscriber_commands_round_trip(cmd: pppp.SubscriberCommand) -> None:
    frames = encode(cmd)
    assert all(type(f) is bytes for f in frames)
    assert decode_from_subscriber(frames) == cmd
    assert encode(decode_from_subscriber(frames)) == frames


@given(publisher_commands)
def test_publisher_commands_round_trip(cmd: pppp.PublisherCommand) -> None:
    frames = encode(cmd)
    assert all(type(f) is bytes for f in frames)
    assert decode_from_publisher(frames) == cmd
    assert encode(decode_from_publisher(frames)) == frames


# --------------------------------------------------------------------------- golden frames

GOLDEN_SUBSCRIBER: list[tuple[pppp.SubscriberCommand, list[bytes]]] = [
    (Subscribe("chan"), [b"\x01chan"]),
    (Subscribe(""), [b"\x01"]),
    (Subscribe("/état"), [b"\x01/\xc3\xa9tat"]),
    (AckNack("chan", 10), [b"\x02chan", u64(10)]),
    (
        AckNack("chan", 10, ((3, 4), (7, 7))),
        [b"\x02chan", u64(10), u64(3) + u64(4), u64(7) + u64(7)],
    ),
    (Heartbeat(), [b"\x03"]),
    (Custom(()), [b"\x04"]),
    (Custom((b"resend", b"\x00\x01")), [b"\x04", b"resend", b"\x00\x01"]),
]

GOLDEN_PUBLISHER: list[tuple[pppp.PublisherCommand, list[bytes]]] = [
    (Publish("chan", 5, (b"a",)), [b"chan", b"\x00\x00\x00\x00\x00\x00\x00\x05", b"a"]),
    (Publish("chan", U64_MAX, ()), [b"chan", b"\xff" * 8]),
    (Publish("", 0, (b"x", b"")), [b"", b"\x00" * 8, b"x", b""]),
    (Heartbeat(), [b"\x03"]),
]


@pytest.mark.parametrize(("cmd", "frames"), GOLDEN_SUBSCRIBER)
def test_golden_subscriber_frames(cmd: pppp.SubscriberCommand, frames: list[bytes]) -> None:
    assert encode(cmd) == frames
    assert decode_from_subscriber(frames) == cmd


@pytest.mark.parametrize(("cmd", "frames"), GOLDEN_PUBLISHER)
def test_golden_publisher_frames(cmd: pppp.PublisherCommand, frames: list[bytes]) -> None:
    assert encode(cmd) == frames
    assert decode_from_publisher(frames) == cmd


# --------------------------------------------------------------------------- garbage in


def _garbage(decoder: Callable[[Sequence[bytes]], object], frames: list[bytes]) -> None:
    try:
        cmd = decoder(frames)
    except ProtocolError:
        return
    # Every frame list PPPP accepts is canonical: it encodes back to the same frames.
    assert encode(cmd) == frames  # type: ignore[arg-type]


@settings(max_examples=FUZZ_EXAMPLES)
@given(frame_lists)
def test_garbage_from_subscriber(frames: list[bytes]) -> None:
    _garbage(decode_from_subscriber, frames)


@settings(max_examples=FUZZ_EXAMPLES)
@given(frame_lists)
def test_garbage_from_publisher(frames: list[bytes]) -> None:
    _garbage(decode_from_publisher, frames)


@pytest.mark.parametrize(
    ("frames", "error", "match"),
    [
        ([], FrameCountError, r"^pppp <unknown command>: expected at least 1 frame"),
        ([b""], UnknownCommandError, r"^pppp <unknown command> frame 0: expected a subscriber"),
        ([b"chan", u64(1)], UnknownCommandError, r"frame 0: expected a subscriber command"),
        ([b"\x05"], UnknownCommandError, r"frame 0: expected a subscriber command"),
        ([b"\x01chan", b"x"], FrameCountError, r"^pppp SUBSCRIBE: expected 1 frames"),
        ([b"\x01\xffchan"], FrameValueError, r"^pppp SUBSCRIBE frame 0: expected channel"),
        ([b"\x01\x03chan"], FrameValueError, r"^pppp SUBSCRIBE frame 0: expected a channel"),
        ([b"\x02chan"], FrameCountError, r"^pppp ACK/NACK: expected at least 2 frames"),
        ([b"\x02chan", b"\x01"], FrameValueError, r"^pppp ACK/NACK frame 1: expected highest"),
        (
            [b"\x02chan", u64(10), u64(3)],
            FrameValueError,
            r"^pppp ACK/NACK frame 2: expected a NACK range as 16 bytes",
        ),
        (
            [b"\x02chan", u64(10), u64(1) + u64(2), u64(5) + u64(4)],
            FrameValueError,
            r"^pppp ACK/NACK frame 3: expected a NACK range with first <= last",
        ),
        (
            [b"\x02chan", u64(10), u64(4) + u64(10)],
            FrameValueError,
            r"^pppp ACK/NACK frame 2: expected a NACK range .* < highest \(10\)",
        ),
        ([b"\x03", b""], FrameCountError, r"^pppp HEARTBEAT: expected 1 frames"),
        ([b"\x03x"], FrameValueError, r"^pppp HEARTBEAT frame 0: expected the single byte 0x03"),
        ([b"\x04x"], FrameValueError, r"^pppp CUSTOM frame 0: expected the single byte 0x04"),
    ],
)
def test_malformed_from_subscriber(
    frames: list[bytes], error: type[ProtocolError], match: str
) -> None:
    with pytest.raises(error, match=match):
        decode_from_subscriber(frames)


@pytest.mark.parametrize(
    ("frames", "error", "match"),
    [
        ([], FrameCountError, r"^pppp <unknown command>: expected at least 1 frame"),
        ([b"\x01chan"], UnknownCommandError, r"frame 0: expected PUBLISH .* or HEARTBEAT"),
        ([b"\x02chan", u64(1)], UnknownCommandError, r"a publisher sends no other command"),
        ([b"\x04", b"x"], UnknownCommandError, r"a publisher sends no other command"),
        ([b"chan"], FrameCountError, r"^pppp PUBLISH: expected at least 2 frames, got '1 frames'"),
        ([b"chan", b"\x01" * 7], FrameValueError, r"^pppp PUBLISH frame 1: expected sequence"),
        ([b"chan", b"1"], FrameValueError, r"^pppp PUBLISH frame 1: expected sequence"),
        ([b"\xc3(", u64(1)], FrameValueError, r"^pppp PUBLISH frame 0: expected channel"),
        ([b"\x03", b"x"], FrameCountError, r"^pppp HEARTBEAT: expected 1 frames"),
    ],
)
def test_malformed_from_publisher(
    frames: list[bytes], error: type[ProtocolError], match: str
) -> None:
    with pytest.raises(error, match=match):
        decode_from_publisher(frames)


def test_commands_from_the_wrong_side_are_rejected() -> None:
    publish = encode(Publish("chan", 1, (b"x",)))
    with pytest.raises(UnknownCommandError):
        decode_from_subscriber(publish)
    for cmd in (Subscribe("chan"), AckNack("chan", 1), Custom((b"x",))):
        with pytest.raises(UnknownCommandError):
            decode_from_publisher(encode(cmd))


@pytest.mark.parametrize(
    ("cmd", "match"),
    [
        (Publish("\x01chan", 1, ()), r"^pppp PUBLISH: expected a channel that does not begin"),
        (Publish("\x04", 1, ()), r"^pppp PUBLISH: expected a channel that does not begin"),
        (Subscribe("\x02x"), r"^pppp SUBSCRIBE: expected a channel that does not begin"),
        (Publish("chan", -1, ()), r"^pppp PUBLISH: expected sequence in 0\.\.2\*\*64-1"),
        (Publish("chan", 1 << 64, ()), r"^pppp PUBLISH: expected sequence in 0\.\.2\*\*64-1"),
        (Publish("\ud800", 1, ()), r"^pppp PUBLISH: expected a channel encodable as UTF-8"),
        (AckNack("chan", 1 << 64), r"^pppp ACK/NACK: expected highest sequence in"),
        (AckNack("chan", 10, ((5, 4),)), r"^pppp ACK/NACK: expected a NACK range"),
        (AckNack("chan", 10, ((5, 10),)), r"^pppp ACK/NACK: expected a NACK range"),
        (AckNack("chan", 10, ((-1, 2),)), r"^pppp ACK/NACK: expected a NACK range"),
    ],
)
def test_encode_rejects_what_the_wire_cannot_carry(cmd: pppp.PPPPCommand, match: str) -> None:
    with pytest.raises(FrameValueError, match=match):
        encode(cmd)


def test_sequences_are_8_byte_big_endian() -> None:
    frames = encode(Publish("c", 0x0102030405060708, ()))
    assert frames[1] == bytes([1, 2, 3, 4, 5, 6, 7, 8])
    assert decode_from_publisher([b"c", bytes([1, 2, 3, 4, 5, 6, 7, 8])]) == Publish(
        "c", 0x0102030405060708, ()
    )
