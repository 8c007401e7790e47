"""The PPPP payload of a zbus event, a SYNC item and a SYNC end (ADR 0006)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from zbus.common.protocols import pppp
from zbus.common.protocols.errors import FrameCountError, FrameValueError, ProtocolError
from zbus.common.protocols.pppp_event import (
    EventPayload,
    SyncEnd,
    decode_payload,
    encode_event,
    encode_sync_end,
)

EVENT = EventPayload(
    topic="/orders/eu",
    uuid="0b6a3c1e-8f3e-4b6a-9d55-2f1c7e9a0d11",
    timestamp="2026-11-24T10:00:00.000000+00:00",
    producer="shop-1",
    data=b"\x81\xa1k\x01",
    bus_sequence=77,
)


def test_an_event_travels_as_six_payload_frames() -> None:
    frames = pppp.encode(encode_event("/orders/", 5, EVENT))
    assert frames == [
        b"/orders/",
        (5).to_bytes(8, "big"),
        b"/orders/eu",
        EVENT.uuid.encode(),
        EVENT.timestamp.encode(),
        b"shop-1",
        EVENT.data,
        (77).to_bytes(8, "big"),
    ]
    publish = pppp.decode_from_publisher(frames)
    assert isinstance(publish, pppp.Publish)
    assert decode_payload(publish) == EVENT


def test_a_sync_end_is_sequence_0_with_one_16_byte_frame() -> None:
    frames = pppp.encode(encode_sync_end("", SyncEnd(head=9, items=3)))
    assert frames == [b"", bytes(8), (9).to_bytes(8, "big") + (3).to_bytes(8, "big")]
    publish = pppp.decode_from_publisher(frames)
    assert isinstance(publish, pppp.Publish)
    assert decode_payload(publish) == SyncEnd(9, 3)


def test_a_sync_item_is_an_event_with_sequence_0() -> None:
    publish = pppp.decode_from_publisher(pppp.encode(encode_event("/o", 0, EVENT)))
    assert isinstance(publish, pppp.Publish)
    assert publish.sequence == 0
    assert decode_payload(publish) == EVENT


@pytest.mark.parametrize(
    ("payload", "error", "names"),
    [
        ((b"x",) * 5, FrameCountError, "6 payload frames"),
        ((b"\x00" * 15,), FrameValueError, "SYNC end of 16 bytes"),
        ((b"\xff", b"u" * 36, b"t", b"p", b"", bytes(8)), FrameValueError, "frame 2"),
        ((b"t", b"u" * 35, b"t", b"p", b"", bytes(8)), FrameValueError, "36-character"),
        ((b"t", b"u" * 36, b"t", b"p", b"", bytes(7)), FrameValueError, "frame 7"),
    ],
)
def test_a_bad_payload_says_which_frame(
    payload: tuple[bytes, ...], error: type[ProtocolError], names: str
) -> None:
    with pytest.raises(error, match=names):
        decode_payload(pppp.Publish("c", 0, payload))


def test_an_event_payload_with_one_frame_and_a_sequence_is_not_a_sync_end() -> None:
    with pytest.raises(FrameCountError):
        decode_payload(pppp.Publish("c", 4, (bytes(16),)))


@given(st.lists(st.binary(max_size=40), max_size=8), st.integers(0, 2**64 - 1))
def test_any_payload_parses_and_encodes_back_or_raises_a_protocol_error(
    payload: list[bytes], sequence: int
) -> None:
    publish = pppp.Publish("c", sequence, tuple(payload))
    try:
        decoded = decode_payload(publish)
    except ProtocolError:
        return
    if isinstance(decoded, SyncEnd):
        assert encode_sync_end("c", decoded) == publish
    else:
        assert encode_event("c", sequence, decoded) == publish
