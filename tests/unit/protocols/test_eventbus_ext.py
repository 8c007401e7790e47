"""zbus's Event BUS extensions (ADR 0002): round trips, golden frames, garbage in."""

from __future__ import annotations

import functools
import re
import uuid
from collections.abc import Callable, Sequence
from datetime import UTC
from typing import Any, NamedTuple

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.strategies import SearchStrategy

from tests.conftest import FUZZ_EXAMPLES
from tests.unit.protocols.strategies import frame_lists
from zbus.common.protocols import eventbus_ext as ext
from zbus.common.protocols.errors import (
    FrameCountError,
    FrameValueError,
    ProtocolError,
    UnknownCommandError,
)
from zbus.common.protocols.eventbus_ext import (
    CONFIRM,
    ERROR,
    MAX_LIMIT,
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

U64_MAX = 2**64 - 1
UUID = "5f0c3b1e-9a7d-4c2e-8b61-0d4e2f9a7c13"
UUID2 = "0d4e2f9a-7c13-4c2e-8b61-5f0c3b1e9a7d"
TS = "2026-11-22T08:35:32.862Z"
ROW: list[Any] = ["/t", "p", TS, UUID, b"\x01"]
COMMAND_FRAMES = [PUB_BATCH, CONFIRM, ERROR, SNAPSHOT, PAGE, STREAM_BATCH, STREAM_HEARTBEAT]

Decoder = Callable[[Sequence[bytes]], ExtCommand]
DECODERS: list[Decoder] = [
    decode_collector,
    decode_collector_reply,
    decode_snapshot_request,
    decode_snapshot_reply,
    decode_stream,
]
# Each command with the decoder of the socket it arrives on (ZB-ERROR on both).
DECODER_OF: list[tuple[type, Decoder]] = [
    (PubBatch, decode_collector),
    (Confirm, decode_collector_reply),
    (Error, decode_collector_reply),
    (SnapshotQuery, decode_snapshot_request),
    (SnapshotPage, decode_snapshot_reply),
    (Error, decode_snapshot_reply),
    (StreamBatch, decode_stream),
    (StreamHeartbeat, decode_stream),
]


def packb(obj: Any) -> bytes:
    data: bytes = msgpack.packb(obj, use_bin_type=True)
    return data


# --------------------------------------------------------------------------- strategies

sequences = st.integers(0, U64_MAX)
texts = st.text(max_size=30)
topics = st.text(min_size=1, max_size=30).filter(lambda t: not t.startswith("\0"))
timestamps = st.one_of(
    st.datetimes().map(lambda d: d.isoformat()),
    st.datetimes(timezones=st.just(UTC)).map(lambda d: d.isoformat()),
    st.datetimes().map(lambda d: d.isoformat(timespec="milliseconds") + "Z"),
)
uuids = st.uuids(version=None).map(str) | st.uuids().map(lambda u: str(u).upper())
payloads = st.binary(max_size=64)
events = st.builds(EventData, topics, texts, timestamps, uuids, payloads)
event_lists = st.lists(events, max_size=5).map(tuple)
sequenced_events = st.builds(SequencedEvent, sequences, topics, texts, timestamps, uuids, payloads)


def commands(kind: type) -> SearchStrategy[ExtCommand]:
    if kind is PubBatch:
        return st.builds(PubBatch, event_lists, st.booleans())
    if kind is Confirm:
        pairs = st.tuples(uuids, sequences)
        return st.builds(Confirm, st.lists(pairs, max_size=5).map(tuple))
    if kind is Error:
        return st.builds(Error, texts)
    if kind is SnapshotQuery:
        subtrees = st.lists(texts, max_size=4).map(tuple)
        limits = st.integers(1, MAX_LIMIT)
        # The cursor of mode "latest" is a topic, that of mode "log" a sequence.
        latest = st.builds(
            SnapshotQuery, subtrees, sequences, st.none() | texts, st.just("latest"), limits
        )
        log = st.builds(
            SnapshotQuery,
            subtrees,
            sequences,
            st.none() | sequences.map(str),
            st.just("log"),
            limits,
        )
        return latest | log
    if kind is SnapshotPage:
        return st.builds(
            SnapshotPage,
            st.lists(sequenced_events, max_size=5).map(tuple),
            st.none() | texts,
            sequences,
        )
    if kind is StreamBatch:
        return st.builds(StreamBatch, sequences, event_lists)
    assert kind is StreamHeartbeat
    return st.builds(StreamHeartbeat, sequences)


stream_commands = commands(StreamBatch) | commands(StreamHeartbeat)

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


# --------------------------------------------------------------------------- malformed input


class Case(NamedTuple):
    decoder: Callable[[Sequence[bytes]], object]
    frames: list[bytes]
    error: type[ProtocolError]
    match: str  # a regular expression the message must match from its start
    frame: int | None  # the frame the error must name


class Carrier(NamedTuple):
    """A command that carries events, and how to wrap event rows in its frames."""

    command: str
    decoder: Decoder
    frame: int
    wrap: Callable[[list[Any]], list[bytes]]
    shape: str  # how the row-shape error names the fields


def pub(rows: list[Any], flags: bytes = b"\x00") -> list[bytes]:
    return [PUB_BATCH, flags, packb(rows)]


def page_of(rows: list[Any]) -> list[bytes]:
    return [PAGE, packb({"events": [[1, *row] for row in rows], "next": None, "sequence": 1})]


def batch(rows: list[Any]) -> list[bytes]:
    return [STREAM_BATCH, packb([1, rows])]


def query(**fields: Any) -> list[bytes]:
    return [SNAPSHOT, packb(fields)]


def page(**fields: Any) -> list[bytes]:
    return [PAGE, packb({"events": [], "next": None, "sequence": 1, **fields})]


def with_field(index: int, value: Any, row: list[Any] = ROW) -> list[Any]:
    return [value if i == index else field for i, field in enumerate(row)]


CARRIERS = [
    Carrier("ZB-PUB", decode_collector, 2, pub, r"\[topic, producer, timestamp, uuid, data\]"),
    Carrier("ZB-PAGE", decode_snapshot_reply, 1, page_of, r"\[seq, topic, producer, ts, uu"),
    Carrier("B", decode_stream, 1, batch, r"\[topic, producer, timestamp, uuid, data\]"),
]
SHAPE = "<shape>"
# Event rows that every carrier must refuse, with what the message must say it expected.
BAD_EVENTS: list[tuple[list[Any], str]] = [
    ([ROW[:4]], rf"event 0 as {SHAPE}"),
    ([[*ROW, b""]], rf"event 0 as {SHAPE}"),
    (["/t"], rf"event 0 as {SHAPE}"),
    ([ROW, ROW[1:]], rf"event 1 as {SHAPE}"),
    (
        [with_field(0, "\0ZB")],
        r"event 0 topic: non-empty text not starting with NUL, got '\\x00ZB'",
    ),
    ([with_field(0, "")], r"event 0 topic: non-empty text not starting with NUL, got ''"),
    ([with_field(0, b"/t")], r"event 0 topic: non-empty text not starting with NUL, got b'/t'"),
    ([with_field(1, 7)], r"event 0 producer as text, got 7"),
    ([with_field(4, "data")], r"event 0 data as binary, got 'data'"),
    ([with_field(3, UUID[:-1])], r"event 0 uuid in the 36-character form, got '5f0c"),
    ([with_field(3, UUID + "0")], r"event 0 uuid in the 36-character form"),
    ([with_field(3, UUID.replace("5", "g"))], r"event 0 uuid in the 36-character form"),
    ([with_field(3, UUID.replace("-", "0"))], r"event 0 uuid in the 36-character form"),
    ([with_field(3, UUID.encode())], r"event 0 uuid in the 36-character form, got b'5f0c"),
    ([ROW, with_field(3, None)], r"event 1 uuid in the 36-character form"),
    ([with_field(2, "yesterday")], r"event 0 timestamp in ISO-8601, got 'yesterday'"),
    ([with_field(2, "2026-13-01T00:00:00")], r"event 0 timestamp in ISO-8601, got '2026-13"),
    ([with_field(2, 1_700_000_000)], r"event 0 timestamp in ISO-8601, got 1700000000"),
    ([with_field(2, TS.encode())], r"event 0 timestamp in ISO-8601, got b'2026"),
]

UINT = "as an unsigned 64-bit integer"
MAP = "a map of subtrees, since, after, mode, limit"


def value_errors(
    decoder: Callable[[Sequence[bytes]], object],
    command: str,
    frame: int,
    cases: list[tuple[list[bytes], str]],
) -> list[Case]:
    """Cases where frame ``frame`` of ``command`` holds the wrong value."""
    where = f"{command} frame {frame}: expected "
    return [Case(decoder, frames, FrameValueError, where + m, frame) for frames, m in cases]


C, CR, Q, R, S, F = (
    decode_collector,
    decode_collector_reply,
    decode_snapshot_request,
    decode_snapshot_reply,
    decode_stream,
    decode_stream_fast,
)
ONE_BYTE = "flags as one byte 0x00 or 0x01, got "
MALFORMED = [
    # ZB-PUB
    *value_errors(
        C,
        "ZB-PUB",
        1,
        [
            (pub([ROW], b"\x02"), ONE_BYTE + r"b'\\x02'"),
            (pub([ROW], b""), ONE_BYTE + r"b''"),
            (pub([ROW], b"\x00\x01"), ONE_BYTE + r"b'\\x00\\x01'"),
            (pub([ROW], b"1"), ONE_BYTE + r"b'1'"),
        ],
    ),
    *value_errors(
        C,
        "ZB-PUB",
        2,
        [
            ([PUB_BATCH, b"\x00", b"\xc1"], r"events as msgpack, got b'\\xc1'"),
            ([PUB_BATCH, b"\x00", b"\x91"], r"events as msgpack"),  # truncated
            ([PUB_BATCH, b"\x00", b"\x90\x90"], r"events as msgpack"),  # trailing bytes
            ([PUB_BATCH, b"\x00", b"\xa1\xff"], r"events as msgpack"),  # text not UTF-8
            ([PUB_BATCH, b"\x00", packb({})], r"an array of events, got {}"),
        ],
    ),
    Case(C, [PUB_BATCH, b"\x01"], FrameCountError, r"ZB-PUB: expected 3 frames, got '2", None),
    Case(C, [*pub([ROW]), b""], FrameCountError, r"ZB-PUB: expected 3 frames, got '4", None),
    Case(
        C, [CONFIRM, b"\x90"], UnknownCommandError, r"<unknown command> frame 0: expected ZB-P", 0
    ),
    Case(
        C, [b"\0ZB-pub", b"\x00", b"\x90"], UnknownCommandError, r".* frame 0: expected ZB-PUB", 0
    ),
    # ZB-CONFIRM, ZB-ERROR
    *value_errors(
        CR,
        "ZB-CONFIRM",
        1,
        [
            ([CONFIRM, b"\xc1"], r"confirmations as msgpack"),
            ([CONFIRM, packb({})], r"an array of \[uuid, seq\], got {}"),
            ([CONFIRM, packb([[UUID]])], r"\[uuid, seq\] pairs"),
            ([CONFIRM, packb([[UUID, 1, 2]])], r"\[uuid, seq\] pairs"),
            ([CONFIRM, packb([[5, 1]])], r"\[uuid, seq\] pairs, got \[5, 1\]"),
            ([CONFIRM, packb([[UUID, True]])], rf"sequence {UINT}, got True"),
            ([CONFIRM, packb([[UUID, -1]])], rf"sequence {UINT}, got -1"),
            ([CONFIRM, packb([[UUID, 1.0]])], rf"sequence {UINT}, got 1.0"),
        ],
    ),
    Case(CR, [CONFIRM], FrameCountError, r"ZB-CONFIRM: expected 2 frames, got 1", None),
    Case(CR, [PAGE, b"\x90"], UnknownCommandError, r".* frame 0: expected ZB-CONFIRM or ZB-E", 0),
    Case(CR, [ERROR], FrameCountError, r"ZB-ERROR: expected 2 frames, got 1", None),
    Case(R, [ERROR, b"a", b"b"], FrameCountError, r"ZB-ERROR: expected 2 frames, got 3", None),
    *value_errors(CR, "ZB-ERROR", 1, [([ERROR, b"\xff"], r"reason as UTF-8 text")]),
    *value_errors(R, "ZB-ERROR", 1, [([ERROR, b"\xc3"], r"reason as UTF-8 text")]),
    # ZB-SNAPSHOT
    *value_errors(
        Q,
        "ZB-SNAPSHOT",
        1,
        [
            (query(limit=0), rf"limit in 1\.\.{MAX_LIMIT}, got 0"),
            (query(limit=MAX_LIMIT + 1), rf"limit in 1\.\.{MAX_LIMIT}, got {MAX_LIMIT + 1}"),
            (query(limit=U64_MAX), rf"limit in 1\.\.{MAX_LIMIT}, got {U64_MAX}"),
            (query(limit=-1), rf"limit {UINT}, got -1"),
            (query(limit=True), rf"limit {UINT}, got True"),
            (query(limit=10.0), rf"limit {UINT}, got 10.0"),
            (query(limit=None), rf"limit {UINT}$"),
            (query(since=-1), rf"since {UINT}, got -1"),
            (query(since=False), rf"since {UINT}, got False"),
            (query(since="0"), rf"since {UINT}, got '0'"),
            (query(mode="all"), r"mode 'latest' or 'log', got 'all'"),
            (query(mode=b"log"), r"mode 'latest' or 'log', got b'log'"),
            (query(mode=None), r"mode 'latest' or 'log'$"),
            (query(subtree=["/a/"]), rf"{MAP}, got {{'subtree'"),
            (query(since=0, cursor="c"), rf"{MAP}, got {{'since': 0, 'cursor'"),
            ([SNAPSHOT, packb({b"since": 0})], rf"{MAP}, got {{b'since'"),
            ([SNAPSHOT, packb([])], rf"{MAP}, got \[\]"),
            ([SNAPSHOT, packb({1: 0})], r"query as msgpack"),  # keys must be text
            ([SNAPSHOT, b"\xc1"], r"query as msgpack"),
            (query(subtrees="/a/"), r"subtrees as an array of text, got '/a/'"),
            (query(subtrees=["/a/", b"/b/"]), r"subtrees as an array of text"),
            (query(after=5), r"after as text or nil, got 5"),
        ],
    ),
    Case(Q, [SNAPSHOT], FrameCountError, r"ZB-SNAPSHOT: expected 2 frames, got 1", None),
    Case(Q, [*query(), b""], FrameCountError, r"ZB-SNAPSHOT: expected 2 frames, got 3", None),
    Case(Q, [b"SYNCSTART", b""], UnknownCommandError, r".* frame 0: expected ZB-SNAPSHOT", 0),
    # ZB-PAGE
    *value_errors(
        R,
        "ZB-PAGE",
        1,
        [
            ([PAGE, b"\xc1"], r"page as msgpack"),
            ([PAGE, packb([])], r"a map with events, next, sequence, got \[\]"),
            ([PAGE, packb({"next": None, "sequence": 1})], r"a map with events, next, seq"),
            (page(events={}), r"a map with events, next, sequence"),
            (page(next=5), r"next as text or nil, got 5"),
            (page(sequence=True), rf"sequence {UINT}, got True"),
            (page(sequence=-1), rf"sequence {UINT}, got -1"),
            (page(sequence=None), rf"sequence {UINT}$"),
            (page(events=[[True, *ROW]]), rf"event sequence {UINT}, got True"),
            (page(events=[[-1, *ROW]]), rf"event sequence {UINT}, got -1"),
        ],
    ),
    Case(R, [PAGE], FrameCountError, r"ZB-PAGE: expected 2 frames, got 1", None),
    Case(R, [CONFIRM, b"\x90"], UnknownCommandError, r".* frame 0: expected ZB-PAGE or ZB-ERR", 0),
    # B, H
    *value_errors(
        S,
        "B",
        1,
        [
            ([b"B", b"\xc1"], r"batch as msgpack"),
            ([b"B", packb([1])], r"\[first_seq, events\], got \[1\]"),
            ([b"B", packb([1, [], []])], r"\[first_seq, events\]"),
            ([b"B", packb([True, []])], rf"first sequence {UINT}, got True"),
            ([b"B", packb([-1, []])], rf"first sequence {UINT}, got -1"),
            ([b"B", packb([1, {}])], r"an array of events, got {}"),
        ],
    ),
    *value_errors(
        S,
        "H",
        1,
        [
            ([b"H", b"\x00" * 7], r"sequence as 8 bytes in network order"),
            ([b"H", b"\x00" * 9], r"sequence as 8 bytes in network order"),
        ],
    ),
    Case(S, [], FrameCountError, r"<unknown command>: expected at least 1 frame", None),
    Case(S, [b"X", b""], UnknownCommandError, r".* frame 0: expected B or H, got b'X'", 0),
    Case(S, [b"HUGZ", b"\x00" * 8], UnknownCommandError, r".* frame 0: expected B or H", 0),
    Case(S, [b"H"], FrameCountError, r"H: expected 2 frames, got 1", None),
    Case(S, [b"H", b"\x00" * 8, b""], FrameCountError, r"H: expected 2 frames, got 3", None),
    Case(S, [b"B"], FrameCountError, r"B: expected 2 frames, got 1", None),
    # The fast path still refuses frames that are no stream message.
    *value_errors(
        F,
        "B",
        1,
        [
            ([b"B", b"\xc1"], r"\[first_seq, events\] as msgpack"),
            ([b"B", packb(5)], r"\[first_seq, events\] as msgpack"),
            ([b"B", packb([1])], r"\[first_seq, events\] as msgpack"),
            ([b"B", packb(["1", []])], r"\[first_seq, events\]"),
            ([b"B", packb([1, {}])], r"\[first_seq, events\]"),
            ([b"B", packb({"a": 1, "b": 2})], r"\[first_seq, events\]"),
        ],
    ),
    *value_errors(F, "H", 1, [([b"H", b"\x00" * 7], r"sequence as 8 bytes")]),
    Case(F, [b"B"], FrameCountError, r"B: expected 2 frames, got 1", None),
    Case(F, [b"X"], UnknownCommandError, r".* frame 0: expected B or H", 0),
    Case(F, [], FrameCountError, r"<unknown command>: expected at least 1 frame", None),
    # Event rows, in each command that carries them.
    *(
        Case(
            c.decoder,
            c.wrap(rows),
            FrameValueError,
            f"{c.command} frame {c.frame}: expected " + expected.replace(SHAPE, c.shape),
            c.frame,
        )
        for c in CARRIERS
        for rows, expected in BAD_EVENTS
    ),
]


@pytest.mark.parametrize("case", MALFORMED, ids=lambda case: case.match)
def test_malformed_frames_name_the_command_and_what_was_expected(case: Case) -> None:
    with pytest.raises(case.error, match=f"^eventbus-ext {case.match}") as caught:
        case.decoder(case.frames)
    assert caught.value.frame == case.frame
    assert caught.value.protocol == "eventbus-ext"


@pytest.mark.parametrize("decoder", [*DECODERS, decode_stream_fast], ids=lambda d: d.__name__)
def test_no_frames_at_all(decoder: Callable[[Sequence[bytes]], object]) -> None:
    with pytest.raises(ProtocolError, match=r"^eventbus-ext .*: expected"):
        decoder([])


@pytest.mark.parametrize("carrier", CARRIERS, ids=lambda c: c.command)
def test_valid_rows_pass_the_event_checks(carrier: Carrier) -> None:
    # The malformed rows above differ from these in one field only.
    rows = [ROW, with_field(3, UUID.upper()), with_field(2, "2026-11-22")]
    decoded = carrier.decoder(carrier.wrap(rows))
    assert isinstance(decoded, PubBatch | SnapshotPage | StreamBatch)
    assert [e.uuid for e in decoded.events] == [UUID, UUID.upper(), UUID]
    assert [e.timestamp for e in decoded.events] == [TS, TS, "2026-11-22"]


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


@given(st.text(max_size=40) | st.text("0123456789-:.T +Z", max_size=32))
def test_any_text_as_timestamp_parses_or_raises_protocol_error(timestamp: str) -> None:
    row = with_field(2, timestamp)
    try:
        cmd = decode_stream(batch([row]))
    except ProtocolError as exc:
        assert "timestamp in ISO-8601" in str(exc)
    else:
        assert cmd == StreamBatch(1, (EventData(*row),))


@given(st.text(max_size=40) | st.text("0123456789abcdefABCDEFg-", min_size=35, max_size=37))
def test_any_text_as_uuid_parses_or_raises_protocol_error(text: str) -> None:
    row = with_field(3, text)
    try:
        cmd = decode_collector(pub([row]))
    except ProtocolError as exc:
        assert "uuid in the 36-character form" in str(exc)
    else:
        assert re.fullmatch(r"[0-9a-fA-F]{8}(-[0-9a-fA-F]{4}){3}-[0-9a-fA-F]{12}", text)
        assert cmd == PubBatch((EventData(*row),))


def test_fast_page_decoder_agrees_with_the_careful_one() -> None:
    u = "3f2b6f3e-8a0b-4c8e-9b6e-3c2f1d0a9b8c"
    rows = [[n, f"/t/{n}", "p", "2026-11-22T08:35:32.862Z", u, b"d"] for n in range(1, 4)]
    frames = ext.encode_page(rows, "/t/3", 9)
    assert ext.decode_snapshot_reply_fast(frames) == ext.decode_snapshot_reply(frames)
    bad = ext.encode_page([[1, "/t", "p", "ts", "u", "not bytes"]], None, 1)
    with pytest.raises(ProtocolError, match="ZB-PAGE frame 1"):
        ext.decode_snapshot_reply_fast(bad)
    assert ext.decode_snapshot_reply_fast(ext.encode(ext.Error("no"))) == ext.Error("no")
