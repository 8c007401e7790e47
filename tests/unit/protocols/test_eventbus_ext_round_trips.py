"""zbus's Event BUS extensions (ADR 0002): round trips, the fast stream and page
decoders, golden frames, and encode guards.
"""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.support.eventbus_ext import (
    DECODER_OF,
    ROW,
    TS,
    U64_MAX,
    UUID,
    UUID2,
    Decoder,
    commands,
    packb,
)
from zbus.common.protocols import eventbus_ext as ext
from zbus.common.protocols.errors import FrameValueError, ProtocolError
from zbus.common.protocols.eventbus_ext import (
    CONFIRM,
    ERROR,
    PAGE,
    PUB_BATCH,
    SNAPSHOT,
    STREAM_BATCH,
    STREAM_HEARTBEAT,
    Confirm,
    Error,
    EventData,
    ExtCommand,
    PubBatch,
    SequencedEvent,
    SnapshotPage,
    SnapshotQuery,
    StreamBatch,
    StreamHeartbeat,
    decode_collector,
    decode_collector_reply,
    decode_snapshot_reply,
    decode_snapshot_request,
    decode_stream,
    decode_stream_fast,
    encode,
    is_extension,
)

stream_commands = commands(StreamBatch) | commands(StreamHeartbeat)


# --------------------------------------------------------------------------- round trips


@pytest.mark.parametrize(
    ("kind", "decoder"), DECODER_OF, ids=[f"{k.__name__}-{d.__name__}" for k, d in DECODER_OF]
)
@given(data=st.data())
def test_round_trip(kind: type, decoder: Decoder, data: st.DataObject) -> None:
    cmd = data.draw(commands(kind))
    frames = encode(cmd)
    assert all(type(frame) is bytes for frame in frames)
    decoded = decoder(frames)
    assert decoded == cmd
    assert type(decoded) is kind
    # Re-encoding what was decoded gives the same frames back.
    assert encode(decoded) == frames


def test_round_trip_with_a_uuid4_and_a_default_query() -> None:
    event = EventData("/a/b", "producer", TS, str(uuid.uuid4()), b"\x90")
    assert decode_collector(encode(PubBatch((event,), confirm=True))) == PubBatch((event,), True)
    assert decode_snapshot_request(encode(SnapshotQuery())) == SnapshotQuery()


def test_a_query_map_may_leave_out_every_key() -> None:
    assert decode_snapshot_request([SNAPSHOT, packb({})]) == SnapshotQuery()
    assert decode_snapshot_request([SNAPSHOT, packb({"mode": "log"})]) == SnapshotQuery(mode="log")


def test_extension_commands_on_spec_sockets_start_with_nul() -> None:
    for command in (PUB_BATCH, CONFIRM, ERROR, SNAPSHOT, PAGE):
        assert is_extension(command)
    for first in (b"/topic", b"SYNCSTART", b"HUGZ", b"", STREAM_BATCH, STREAM_HEARTBEAT):
        assert not is_extension(first)


# --------------------------------------------------------------------------- fast stream


@given(stream_commands)
def test_decode_stream_fast_agrees_with_decode_stream(cmd: StreamBatch | StreamHeartbeat) -> None:
    frames = encode(cmd)
    fast = decode_stream_fast(frames)
    slow = decode_stream(frames)
    assert slow == cmd
    if isinstance(cmd, StreamHeartbeat):
        assert fast == cmd.sequence
    else:
        assert isinstance(fast, tuple)
        first, rows = fast
        assert first == cmd.first_sequence
        assert rows == [[e.topic, e.producer, e.timestamp, e.uuid, e.data] for e in cmd.events]
        assert StreamBatch(first, tuple(EventData(*row) for row in rows)) == cmd


def test_decode_stream_fast_on_golden_frames() -> None:
    assert decode_stream_fast([b"H", b"\x00\x00\x00\x00\x00\x00\x30\x39"]) == 12345
    assert decode_stream_fast([b"B", packb([7, [ROW]])]) == (7, [ROW])


# --------------------------------------------------------------------------- golden frames

GOLDEN: list[tuple[list[bytes], ExtCommand, Decoder]] = [
    (
        [
            b"\0ZB-PUB",
            b"\x01",
            b"\x91"  # array of 1 event
            + b"\x95"  # array of 5 fields
            + b"\xa2/t"
            + b"\xa1p"
            + b"\xb8"  # str of 24 bytes
            + TS.encode()
            + b"\xd9\x24"  # str8 of 36 bytes
            + UUID.encode()
            + b"\xc4\x02\x01\x02",  # bin8 of 2 bytes
        ],
        PubBatch((EventData("/t", "p", TS, UUID, b"\x01\x02"),), confirm=True),
        decode_collector,
    ),
    ([b"\0ZB-PUB", b"\x00", b"\x90"], PubBatch(()), decode_collector),
    (
        [
            b"\0ZB-CONFIRM",
            b"\x92"
            + (b"\x92\xd9\x24" + UUID.encode() + b"\x01")
            + (b"\x92\xd9\x24" + UUID2.encode() + b"\xcd\x01\x2c"),  # uint16 300
        ],
        Confirm(((UUID, 1), (UUID2, 300))),
        decode_collector_reply,
    ),
    ([b"\0ZB-ERROR", b"log full"], Error("log full"), decode_collector_reply),
    ([b"\0ZB-ERROR", "réfusé".encode()], Error("réfusé"), decode_snapshot_reply),
    (
        [
            b"\0ZB-SNAPSHOT",
            packb({"subtrees": ["/a/"], "since": 5, "after": None, "mode": "log", "limit": 100}),
        ],
        SnapshotQuery(("/a/",), 5, None, "log", 100),
        decode_snapshot_request,
    ),
    (
        [
            b"\0ZB-PAGE",
            packb({"events": [[3, "/t", "p", TS, UUID, b""]], "next": "c1", "sequence": 9}),
        ],
        SnapshotPage((SequencedEvent(3, "/t", "p", TS, UUID, b""),), "c1", 9),
        decode_snapshot_reply,
    ),
    ([b"H", b"\x00\x00\x00\x00\x00\x00\x30\x39"], StreamHeartbeat(12345), decode_stream),
    (
        [b"H", b"\x01\x02\x03\x04\x05\x06\x07\x08"],
        StreamHeartbeat(0x0102030405060708),
        decode_stream,
    ),
    ([b"H", b"\xff" * 8], StreamHeartbeat(U64_MAX), decode_stream),
    (
        [b"B", packb([7, [["/t", "p", TS, UUID, b"\x01"]]])],
        StreamBatch(7, (EventData("/t", "p", TS, UUID, b"\x01"),)),
        decode_stream,
    ),
    # [2**64-1, []]: array of 2, uint64, empty array.
    ([b"B", b"\x92\xcf" + b"\xff" * 8 + b"\x90"], StreamBatch(U64_MAX, ()), decode_stream),
]


@pytest.mark.parametrize(("frames", "cmd", "decoder"), GOLDEN)
def test_golden_frames(frames: list[bytes], cmd: ExtCommand, decoder: Decoder) -> None:
    assert decoder(frames) == cmd
    assert encode(cmd) == frames


def test_golden_batch_payload_layout() -> None:
    frames = encode(StreamBatch(7, (EventData("/t", "p", TS, UUID, b"\x01"),)))
    # array of 2, first_seq 7 as a positive fixint, array of 1 event of 5 fields.
    assert frames[1].startswith(b"\x92\x07\x91\x95\xa2/t\xa1p")
    assert frames[1].endswith(b"\xc4\x01\x01")


# --------------------------------------------------------------------------- encode guards


@pytest.mark.parametrize("sequence", [-1, 2**64])
def test_encode_rejects_stream_sequences_outside_64_bits(sequence: int) -> None:
    with pytest.raises(FrameValueError, match=r"^eventbus-ext STREAM: expected first sequence"):
        encode(StreamBatch(sequence, ()))
    with pytest.raises(FrameValueError, match=r"^eventbus-ext HEARTBEAT: expected sequence"):
        encode(StreamHeartbeat(sequence))


def test_fast_page_decoder_agrees_with_the_careful_one() -> None:
    u = "3f2b6f3e-8a0b-4c8e-9b6e-3c2f1d0a9b8c"
    rows = [[n, f"/t/{n}", "p", "2026-11-22T08:35:32.862Z", u, b"d"] for n in range(1, 4)]
    frames = ext.encode_page(rows, "/t/3", 9)
    assert ext.decode_snapshot_reply_fast(frames) == ext.decode_snapshot_reply(frames)
    bad = ext.encode_page([[1, "/t", "p", "ts", "u", "not bytes"]], None, 1)
    with pytest.raises(ProtocolError, match="ZB-PAGE frame 1"):
        ext.decode_snapshot_reply_fast(bad)
    assert ext.decode_snapshot_reply_fast(ext.encode(ext.Error("no"))) == ext.Error("no")
