"""DBP codec, the UDP heartbeat datagram: golden datagrams, the size limit, malformed and
garbage datagrams.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import FUZZ_EXAMPLES
from tests.support.dbp import ASCII, FLOAT32, T32, T_ASCII, T_F32, T
from tests.unit.protocols.strategies import dbp_shaped_frames, frame_lists
from zbus.common.protocols.dbp import (
    HERMES,
    MAX_DATAGRAM,
    Awk,
    Disconnect,
    Heartbeat,
    decode_datagram,
    encode_datagram,
)
from zbus.common.protocols.errors import (
    FrameCountError,
    FrameValueError,
    ProtocolError,
    UnknownCommandError,
)


def _datagram(frames: list[bytes]) -> bytes:
    return b"".join(len(f).to_bytes(2, "big") + f for f in frames)


@settings(max_examples=FUZZ_EXAMPLES)
@given(st.binary(max_size=MAX_DATAGRAM + 8))
def test_garbage_datagrams(data: bytes) -> None:
    try:
        cmd = decode_datagram(data)
    except ProtocolError:
        return
    assert decode_datagram(encode_datagram(cmd)) == cmd


@settings(max_examples=FUZZ_EXAMPLES // 4)
@given(frame_lists | dbp_shaped_frames)
def test_garbage_framed_datagrams(frames: list[bytes]) -> None:
    # Well-framed datagrams of random frames get past the framing to the command checks.
    try:
        cmd = decode_datagram(_datagram(frames))
    except ProtocolError:
        return
    assert type(cmd) in (Heartbeat, Disconnect)
    assert decode_datagram(encode_datagram(cmd)) == cmd


# --------------------------------------------------------------------------- UDP datagrams

HEARTBEAT_DATAGRAM = b"\x00\x00" + b"\x00\x02<3" + b"\x00\x0d1763800000.25" + b"\x00\x06broker"


def test_golden_heartbeat_datagram() -> None:
    cmd = Heartbeat("broker", T)
    assert encode_datagram(cmd) == HEARTBEAT_DATAGRAM
    assert decode_datagram(HEARTBEAT_DATAGRAM) == Heartbeat("broker", T, ASCII)


def test_golden_disconnect_datagrams() -> None:
    spec = b"\x00\x00" + b"\x00\x03</3" + b"\x00\x0d1763800000.25"
    assert encode_datagram(Disconnect(T)) == spec
    assert decode_datagram(spec) == Disconnect(T, ASCII)
    hermes = b"\x00\x00" + b"\x00\x03</3" + b"\x00\x04" + T_F32 + b"\x00\x00"
    assert encode_datagram(Disconnect(T), HERMES) == hermes
    assert decode_datagram(hermes, HERMES) == Disconnect(T32, FLOAT32)


def test_datagram_size_limit() -> None:
    # 2 + 4 + 15 + 2 = 23 bytes of framing and time, so a 1,377-byte name just fits.
    assert len(encode_datagram(Heartbeat("x" * 1377, T))) == MAX_DATAGRAM
    with pytest.raises(FrameValueError, match=r"^dbp/udp HEARTBEAT: expected a datagram of at"):
        encode_datagram(Heartbeat("x" * 1378, T))
    too_big = _datagram([b"", b"<3", T_ASCII, b"x" * 1378])
    with pytest.raises(FrameValueError, match=r"^dbp/udp <unknown command>: expected a datagram"):
        decode_datagram(too_big)


@pytest.mark.parametrize(
    ("data", "error", "match"),
    [
        (b"", FrameCountError, r"^dbp <unknown command>: expected at least 3 frames"),
        (b"\x00", FrameValueError, r"^dbp/udp <unknown command> frame 0: expected a 2-byte"),
        (HEARTBEAT_DATAGRAM + b"\x00", FrameValueError, r"frame 4: expected a 2-byte frame"),
        (HEARTBEAT_DATAGRAM[:-1], FrameValueError, r"frame 3: expected 6 bytes of frame data"),
        (
            _datagram([b"", b"u_U", T_ASCII, b"broker"]),
            UnknownCommandError,
            r"^dbp/udp REQUEST frame 1: expected HEARTBEAT or DISCONNECT",
        ),
        (
            _datagram([b"", b"<3", b"later", b"broker"]),
            FrameValueError,
            r"^dbp HEARTBEAT frame 2: expected time",
        ),
        # No empty frame 0: two frames.
        (b"\x00\x02<3\x00\x0d1763800000.25", FrameCountError, r"at least 3 frames"),
    ],
)
def test_malformed_datagrams(data: bytes, error: type[ProtocolError], match: str) -> None:
    with pytest.raises(error, match=match):
        decode_datagram(data)


def test_only_heartbeat_and_disconnect_are_datagrams() -> None:
    with pytest.raises(TypeError):
        encode_datagram(Awk(T))  # type: ignore[arg-type]
