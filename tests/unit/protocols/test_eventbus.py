"""Event BUS codec: round trips, golden frames (RFC and the Node.js peer), garbage in."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable, Sequence
from datetime import UTC
from pathlib import Path
from typing import NamedTuple

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.strategies import SearchStrategy

from tests.conftest import FUZZ_EXAMPLES
from tests.unit.protocols.strategies import frame_lists
from zbus.common.protocols.errors import (
    FrameCountError,
    FrameValueError,
    ProtocolError,
    UnknownCommandError,
)
from zbus.common.protocols.eventbus import (
    NODE_REFERENCE,
    SPEC,
    Broadcast,
    Dialect,
    EventBusCommand,
    EventFieldError,
    Heartbeat,
    Pub,
    Sync,
    SyncEnd,
    SyncStart,
    decode_collector,
    decode_publisher,
    decode_snapshot_reply,
    decode_snapshot_request,
    encode,
    unpack_data,
)

U64_MAX = 2**64 - 1
UUID = "5f0c3b1e-9a7d-4c2e-8b61-0d4e2f9a7c13"
TS = "2026-11-22T08:35:32.862Z"
# msgpack of {"hello": "world"} (fixmap, fixstr) as the Node peer's msgpack-c 1.1 writes it.
NODE_DATA = b"\x81\xa5hello\xa5world"
SEQ_1 = b"\x00\x00\x00\x00\x00\x00\x00\x01"
SEQ_0 = b"\x00\x00\x00\x00\x00\x00\x00\x00"

DIALECTS = {"spec": SPEC, "node": NODE_REFERENCE}
Decoder = Callable[[Sequence[bytes], Dialect], EventBusCommand]
DECODERS: list[Decoder] = [
    decode_snapshot_request,
    decode_snapshot_reply,
    decode_publisher,
    decode_collector,
]
# The decoder of the socket each command arrives on.
DECODER_OF: dict[type, Decoder] = {
    SyncStart: decode_snapshot_request,
    Sync: decode_snapshot_reply,
    SyncEnd: decode_snapshot_reply,
    Broadcast: decode_publisher,
    Heartbeat: decode_publisher,
    Pub: decode_collector,
}


def decode_as(cmd_type: type, frames: Sequence[bytes], dialect: Dialect) -> EventBusCommand:
    return DECODER_OF[cmd_type](frames, dialect)


# --------------------------------------------------------------------------- strategies

sequences = st.integers(0, U64_MAX)
texts = st.text(max_size=40)
subtrees = st.lists(
    st.text(min_size=1, max_size=20).filter(lambda s: ";" not in s and "," not in s), max_size=4
).map(tuple)
# Python's isoformat, with and without an offset, and JavaScript's toISOString form.
timestamps = st.one_of(
    st.datetimes().map(lambda d: d.isoformat()),
    st.datetimes(timezones=st.just(UTC)).map(lambda d: d.isoformat()),
    st.datetimes().map(lambda d: d.isoformat(timespec="milliseconds") + "Z"),
)
uuids = st.uuids(version=None).map(str) | st.uuids().map(lambda u: str(u).upper())
data = st.binary(max_size=64)


def pub_sequences(dialect: Dialect) -> SearchStrategy[int | None]:
    # In 8-byte mode, 0 is how None is written, so encode refuses Pub(sequence=0).
    low = 0 if dialect.ascii_sequences else 1
    return st.none() | st.integers(low, U64_MAX)


def commands(kind: type, dialect: Dialect) -> SearchStrategy[EventBusCommand]:
    if kind in (SyncStart, SyncEnd):
        return st.builds(kind, subtrees, sequences)
    if kind is Heartbeat:
        return st.builds(Heartbeat, sequences)
    if kind is Pub:
        # A leading NUL is reserved for zbus's extension commands (ADR 0002), and a topic
        # has at least one byte (the collector's range).
        topics = st.text(min_size=1, max_size=40).filter(lambda topic: topic[0] != "\0")
        return st.builds(Pub, topics, pub_sequences(dialect), texts, timestamps, uuids, data)
    return st.builds(kind, texts, sequences, texts, timestamps, uuids, data)


# --------------------------------------------------------------------------- round trips


@pytest.mark.parametrize("dialect", DIALECTS.values(), ids=DIALECTS.keys())
@pytest.mark.parametrize("kind", list(DECODER_OF), ids=lambda k: k.__name__)
@given(data=st.data())
def test_round_trip(dialect: Dialect, kind: type, data: st.DataObject) -> None:
    cmd = data.draw(commands(kind, dialect))
    frames = encode(cmd, dialect)
    assert all(type(frame) is bytes for frame in frames)
    assert decode_as(kind, frames, dialect) == cmd
    # The frames zbus writes are canonical: decoding and re-encoding gives them back.
    assert encode(decode_as(kind, frames, dialect), dialect) == frames


def test_decoded_events_are_frozen_hashable_and_equal_to_constructed_ones() -> None:
    cmd = Broadcast("/a", 7, "p", TS, UUID, b"\xc0")
    decoded = decode_publisher(encode(cmd))
    assert decoded == cmd
    assert hash(decoded) == hash(cmd)
    assert type(decoded) is Broadcast
    with pytest.raises(AttributeError):
        decoded.topic = "/b"  # type: ignore[misc]


# --------------------------------------------------------------------------- golden frames

# Every frame as the RFC's tables lay it out: 8-byte big-endian sequences, ';' lists.
SPEC_GOLDEN: list[tuple[list[bytes], EventBusCommand]] = [
    (
        [b"SYNCSTART", b"/topic/;/othertopic/", SEQ_0],
        SyncStart(("/topic/", "/othertopic/"), 0),
    ),
    ([b"SYNCSTART", b"", b"\x00\x00\x00\x00\x00\x00\x01\x00"], SyncStart((), 256)),
    (
        [b"SYNC", b"/topic/a", SEQ_1, b"producer-id", TS.encode(), UUID.encode(), b"\xc0"],
        Sync("/topic/a", 1, "producer-id", TS, UUID, b"\xc0"),
    ),
    (
        [b"SYNCEND", b"/topic/", b"\x00\x00\x00\x00\x00\x00\x00\x2a"],
        SyncEnd(("/topic/",), 42),
    ),
    (
        [
            b"/topic/a",
            b"\x01\x02\x03\x04\x05\x06\x07\x08",
            b"p",
            TS.encode(),
            UUID.encode(),
            b"\x90",
        ],
        Broadcast("/topic/a", 0x0102030405060708, "p", TS, UUID, b"\x90"),
    ),
    (
        [b"/topic/a", b"\xff" * 8, b"p", TS.encode(), UUID.encode(), b""],
        Broadcast("/topic/a", U64_MAX, "p", TS, UUID, b""),
    ),
    (
        [b"/topic/a", SEQ_0, b"p", TS.encode(), UUID.encode(), b"\x90"],
        Pub("/topic/a", None, "p", TS, UUID, b"\x90"),
    ),
    (
        [b"/topic/a", b"\x00\x00\x00\x00\x00\x00\x00\x05", b"p", TS.encode(), UUID.encode(), b""],
        Pub("/topic/a", 5, "p", TS, UUID, b""),
    ),
    ([b"HUGZ", b"\x00\x00\x00\x00\x00\x00\x30\x39"], Heartbeat(12345)),
]

# As micro-toolkit/event-bus-zeromq writes them (PEERS.md): decimal text, ',' lists,
# `null` PUB sequences, JavaScript timestamps, uuid4 text, msgpack from msgpack-c 1.1.
NODE_GOLDEN: list[tuple[list[bytes], EventBusCommand]] = [
    (
        [b"SYNCSTART", b"/demo/,/other/", b"0"],
        SyncStart(("/demo/", "/other/"), 0),
    ),
    ([b"SYNCSTART", b"", b"17"], SyncStart((), 17)),
    (
        [b"SYNC", b"/demo/x", b"1", b"producer-id", TS.encode(), UUID.encode(), NODE_DATA],
        Sync("/demo/x", 1, "producer-id", TS, UUID, NODE_DATA),
    ),
    ([b"SYNCEND", b"/demo/,/other/", b"3"], SyncEnd(("/demo/", "/other/"), 3)),
    (
        [b"/demo/x", b"1", b"producer-id", TS.encode(), UUID.encode(), NODE_DATA],
        Broadcast("/demo/x", 1, "producer-id", TS, UUID, NODE_DATA),
    ),
    (
        [b"/demo/x", b"18446744073709551615", b"producer-id", TS.encode(), UUID.encode(), b""],
        Broadcast("/demo/x", U64_MAX, "producer-id", TS, UUID, b""),
    ),
    (
        [b"/demo/x", b"null", b"producer-id", TS.encode(), UUID.encode(), NODE_DATA],
        Pub("/demo/x", None, "producer-id", TS, UUID, NODE_DATA),
    ),
    (
        [b"/demo/x", b"0", b"producer-id", TS.encode(), UUID.encode(), NODE_DATA],
        Pub("/demo/x", 0, "producer-id", TS, UUID, NODE_DATA),
    ),
    ([b"HUGZ", b"12345"], Heartbeat(12345)),
]


@pytest.mark.parametrize(("frames", "cmd"), SPEC_GOLDEN)
def test_golden_spec_frames(frames: list[bytes], cmd: EventBusCommand) -> None:
    assert decode_as(type(cmd), frames, SPEC) == cmd
    assert encode(cmd, SPEC) == frames
    assert encode(cmd) == frames  # SPEC is the default


@pytest.mark.parametrize(("frames", "cmd"), NODE_GOLDEN)
def test_golden_node_frames(frames: list[bytes], cmd: EventBusCommand) -> None:
    assert decode_as(type(cmd), frames, NODE_REFERENCE) == cmd
    assert encode(cmd, NODE_REFERENCE) == frames


def test_node_event_data_unpacks_leniently() -> None:
    assert unpack_data(NODE_DATA, lenient=True) == {"hello": "world"}
    # A str holding bytes that are not UTF-8 only unpacks in lenient mode.
    raw_binary = b"\x81\xa3key\xa3\xff\xfe\xfd"
    assert unpack_data(raw_binary, lenient=True) == {b"key": b"\xff\xfe\xfd"}
    with pytest.raises(FrameValueError, match="msgpack"):
        unpack_data(raw_binary)
    # The Node peer sends an empty frame for an event without data.
    assert unpack_data(b"", lenient=True) is None
    with pytest.raises(FrameValueError):
        unpack_data(b"")


# What msgpack-c 1.1 (the Node.js peer's library) writes for a 40-character string and
# a 3-byte Buffer (str8 and bin8), and for a 300-byte Buffer (bin16).
MSGPACK_C_1_1 = [
    (b"\xd9\x28" + b"x" * 40, "x" * 40),
    (b"\xc4\x03\x00\x01\x02", b"\x00\x01\x02"),
    (b"\xc5\x01\x2c" + bytes(300), bytes(300)),
]


@pytest.mark.parametrize(("data", "value"), MSGPACK_C_1_1)
def test_the_node_peers_msgpack_is_read_strictly(data: bytes, value: object) -> None:
    assert unpack_data(data) == value
    assert unpack_data(data, lenient=True) == value


def test_no_doc_calls_the_node_peers_msgpack_older_than_str8_and_bin() -> None:
    root = Path(__file__).resolve().parents[3]
    files = [*root.glob("docs/**/*.md"), *root.glob("services/zbus/**/*.py"), root / "README.md"]
    stale = re.compile(r"pre-2013|before the 2013|old[- ]spec msgpack", re.IGNORECASE)
    assert [str(f.relative_to(root)) for f in files if stale.search(f.read_text())] == []


def test_unpack_data_reads_current_msgpack() -> None:
    assert unpack_data(b"\x82\xa1a\x01\xa1b\xc4\x02\x00\x01") == {"a": 1, "b": b"\x00\x01"}
    assert unpack_data(b"\xc0") is None


@pytest.mark.parametrize("dialect", DIALECTS.values(), ids=DIALECTS.keys())
def test_subtree_lists_accept_both_separators(dialect: Dialect) -> None:
    seq = b"0" if dialect.ascii_sequences else SEQ_0
    for spec in (b"/a/;/b/,/c", b"/a/,/b/;/c"):
        cmd = decode_snapshot_request([b"SYNCSTART", spec, seq], dialect)
        assert cmd == SyncStart(("/a/", "/b/", "/c"), 0)
    joined = encode(SyncStart(("/a/", "/b/"), 0), dialect)[1]
    assert joined == (b"/a/,/b/" if dialect is NODE_REFERENCE else b"/a/;/b/")


def test_uuids_of_any_version_and_either_case_are_kept_as_sent() -> None:
    for uuid in (
        "5f0c3b1e-9a7d-1c2e-8b61-0d4e2f9a7c13",  # v1
        "5F0C3B1E-9A7D-4C2E-8B61-0D4E2F9A7C13",
        "00000000-0000-0000-0000-000000000000",
    ):
        frames = [b"/t", SEQ_1, b"p", TS.encode(), uuid.encode(), b""]
        assert decode_publisher(frames) == Broadcast("/t", 1, "p", TS, uuid, b"")


def test_heartbeat_and_broadcast_are_told_apart_by_frame_count() -> None:
    # A topic named HUGZ is still a BROADCAST: six frames.
    frames = [b"HUGZ", SEQ_1, b"p", TS.encode(), UUID.encode(), b""]
    assert decode_publisher(frames) == Broadcast("HUGZ", 1, "p", TS, UUID, b"")
    assert decode_publisher([b"HUGZ", SEQ_1]) == Heartbeat(1)


def test_dialect_separator_must_be_one_decoding_understands() -> None:
    with pytest.raises(ValueError, match="subtree_separator"):
        Dialect(subtree_separator="|")


# --------------------------------------------------------------------------- encode guards


@pytest.mark.parametrize("dialect", DIALECTS.values(), ids=DIALECTS.keys())
@pytest.mark.parametrize("sequence", [-1, 2**64])
def test_encode_rejects_sequences_outside_64_bits(dialect: Dialect, sequence: int) -> None:
    for cmd in (
        Broadcast("/t", sequence, "p", TS, UUID, b""),
        Heartbeat(sequence),
        SyncEnd((), sequence),
    ):
        with pytest.raises(FrameValueError, match=r"0\.\.2\*\*64-1"):
            encode(cmd, dialect)


def test_encode_refuses_pub_sequence_zero_in_eight_byte_mode() -> None:
    with pytest.raises(FrameValueError, match="eventbus PUB: expected a PUB sequence above 0"):
        encode(Pub("/t", 0, "p", TS, UUID, b""), SPEC)
    assert encode(Pub("/t", 0, "p", TS, UUID, b""), NODE_REFERENCE)[1] == b"0"


@pytest.mark.parametrize("subtree", ["", "/a;b/", "/a,b/"])
def test_encode_rejects_subtrees_that_would_not_come_back(subtree: str) -> None:
    with pytest.raises(FrameValueError, match="SYNCSTART: expected non-empty subtrees"):
        encode(SyncStart(("/ok/", subtree), 0))


@pytest.mark.parametrize("topic", ["\0ZB", ""])
def test_encode_refuses_pub_topics_reserved_for_extensions_or_empty(topic: str) -> None:
    with pytest.raises(EventFieldError, match="PUB: expected a non-empty topic not starting"):
        encode(Pub(topic, None, "p", TS, UUID, b""))
    # Only PUB is checked: the server never broadcasts such a topic.
    assert encode(Broadcast("\0ZB", 1, "p", TS, UUID, b""))[0] == b"\0ZB"


def test_encode_rejects_text_that_is_not_utf8_encodable() -> None:
    with pytest.raises(FrameValueError, match="BROADCAST: expected text encodable as UTF-8"):
        encode(Broadcast("/\udc80", 1, "p", TS, UUID, b""))


# --------------------------------------------------------------------------- malformed input

GOOD = [b"/t", SEQ_1, b"p", TS.encode(), UUID.encode(), b""]


def replaced(frames: list[bytes], index: int, value: bytes) -> list[bytes]:
    return [value if i == index else frame for i, frame in enumerate(frames)]


class Case(NamedTuple):
    decoder: Decoder
    dialect: Dialect
    frames: list[bytes]
    error: type[ProtocolError]
    match: str  # a regular expression the message must match from its start
    frame: int | None  # the frame the error must name


P, S, N = decode_publisher, SPEC, NODE_REFERENCE
C, Q, R = decode_collector, decode_snapshot_request, decode_snapshot_reply
BAD_SEQ = r"frame 1: expected sequence as"
MALFORMED = [
    Case(P, S, GOOD[:5], FrameCountError, r"<unknown command>: expected 6 frames \(BROAD", None),
    Case(
        P, S, [b"PING", SEQ_1], UnknownCommandError, r"<unknown command> frame 0: expected HUGZ", 0
    ),
    Case(P, S, replaced(GOOD, 1, b"1"), FrameValueError, rf"BROADCAST {BAD_SEQ} 8 bytes", 1),
    Case(P, N, GOOD, FrameValueError, rf"BROADCAST {BAD_SEQ} ASCII decimal digits", 1),
    Case(P, N, replaced(GOOD, 1, b"+1"), FrameValueError, rf"BROADCAST {BAD_SEQ} ASCII", 1),
    Case(
        P,
        N,
        replaced(GOOD, 1, b"18446744073709551616"),
        FrameValueError,
        r"BROADCAST frame 1: expected sequence below 2\*\*64",
        1,
    ),
    Case(
        P, S, replaced(GOOD, 0, b"\xff"), FrameValueError, r"BROADCAST frame 0: expected topic", 0
    ),
    Case(P, S, replaced(GOOD, 2, b"\xc3"), FrameValueError, r"BROADCAST frame 2: expected prod", 2),
    Case(
        P,
        S,
        replaced(GOOD, 3, b"yesterday"),
        FrameValueError,
        r"BROADCAST frame 3: expected an ISO-8601 timestamp, got b'yesterday'",
        3,
    ),
    Case(
        P, S, replaced(GOOD, 3, b"\xff"), FrameValueError, r"BROADCAST frame 3: expected times", 3
    ),
    Case(P, S, replaced(GOOD, 4, UUID[:-1].encode()), FrameValueError, r"BROADCAST frame 4: ", 4),
    Case(P, S, replaced(GOOD, 4, UUID.replace("-", "x").encode()), FrameValueError, r".*uuid", 4),
    Case(P, S, replaced(GOOD, 4, f"{{{UUID[1:-1]}}}".encode()), FrameValueError, r".*uuid", 4),
    Case(C, S, [*GOOD, b""], FrameCountError, r"PUB: expected 6 frames, got '7 frames'", None),
    Case(C, N, replaced(GOOD, 1, b"NULL"), FrameValueError, rf"PUB {BAD_SEQ} ASCII", 1),
    Case(C, S, replaced(GOOD, 4, b"not-a-uuid"), FrameValueError, r"PUB frame 4: expected a", 4),
    Case(C, S, replaced(GOOD, 0, b"\0ZB-PUB"), FrameValueError, r"PUB frame 0: expected a non-", 0),
    Case(C, S, replaced(GOOD, 0, b""), FrameValueError, r"PUB frame 0: expected a non-empty", 0),
    Case(Q, S, [], FrameCountError, r"<unknown command>: expected a SYNCSTART command", None),
    Case(Q, S, [b"SYNC", b"", SEQ_0], UnknownCommandError, r".* frame 0: expected SYNCSTART", 0),
    Case(Q, S, [b"SYNCSTART", b""], FrameCountError, r"SYNCSTART: expected 3 frames, got '2", None),
    Case(Q, S, [b"SYNCSTART", b"/a/;;/b/", SEQ_0], FrameValueError, r"SYNCSTART frame 1: exp", 1),
    Case(Q, N, [b"SYNCSTART", b"/a/,", b"0"], FrameValueError, r"SYNCSTART frame 1: exp", 1),
    Case(Q, S, [b"SYNCSTART", b"\xfe", SEQ_0], FrameValueError, r"SYNCSTART frame 1: exp", 1),
    Case(Q, S, [b"SYNCSTART", b"", b"\x00" * 7], FrameValueError, r"SYNCSTART frame 2: ", 2),
    Case(R, S, [b"SYNC", *GOOD[:5]], FrameCountError, r"SYNC: expected 7 frames", None),
    Case(
        R, S, [b"SYNC", *replaced(GOOD, 3, b"")], FrameValueError, r"SYNC frame 4: expected an", 4
    ),
    Case(
        R, S, [b"SYNC", *replaced(GOOD, 4, b"")], FrameValueError, r"SYNC frame 5: expected a uu", 5
    ),
    Case(R, S, [b"SYNCEND", b"", SEQ_0, b""], FrameCountError, r"SYNCEND: expected 3 frames", None),
    Case(R, N, [b"SYNCEND", b"", b""], FrameValueError, r"SYNCEND frame 2: expected sequence", 2),
    Case(R, S, [b"KTHXBAI", b""], UnknownCommandError, r".* frame 0: expected SYNC or SYNCEND", 0),
]


@pytest.mark.parametrize("case", MALFORMED, ids=lambda case: case.match)
def test_malformed_frames_name_the_command_and_frame(case: Case) -> None:
    with pytest.raises(case.error, match=f"eventbus {case.match}") as caught:
        case.decoder(case.frames, case.dialect)
    assert caught.value.frame == case.frame
    assert caught.value.protocol == "eventbus"


def test_eight_byte_frames_are_not_read_as_text_or_the_other_way_round() -> None:
    node_broadcast = NODE_GOLDEN[4][0]
    with pytest.raises(FrameValueError, match="8 bytes"):
        decode_publisher(node_broadcast, SPEC)
    with pytest.raises(FrameValueError, match="ASCII decimal"):
        decode_publisher(SPEC_GOLDEN[4][0], NODE_REFERENCE)


# --------------------------------------------------------------------------- garbage in


@settings(max_examples=FUZZ_EXAMPLES)
@given(frame_lists)
def test_garbage_frames(frames: list[bytes]) -> None:
    for dialect in DIALECTS.values():
        for decoder in DECODERS:
            try:
                cmd = decoder(frames, dialect)
            except ProtocolError:
                continue
            # Whatever parses is a command that survives a round trip.
            assert decoder(encode(cmd, dialect), dialect) == cmd


@st.composite
def near_valid(draw: st.DrawFn, dialect: Dialect) -> tuple[type, list[bytes]]:
    """Valid frames with one frame replaced, removed or added: reaches the deep checks."""
    kind = draw(st.sampled_from(list(DECODER_OF)))
    frames = encode(draw(commands(kind, dialect)), dialect)
    index = draw(st.integers(0, len(frames) - 1))
    junk = draw(st.binary(max_size=40) | st.sampled_from([b"null", b"0", b"", SEQ_1, b"\xff"]))
    how = draw(st.sampled_from(["replace", "remove", "insert"]))
    if how == "replace":
        return kind, replaced(frames, index, junk)
    if how == "remove":
        return kind, frames[:index] + frames[index + 1 :]
    return kind, [*frames[:index], junk, *frames[index:]]


@pytest.mark.parametrize("dialect", DIALECTS.values(), ids=DIALECTS.keys())
@settings(max_examples=max(FUZZ_EXAMPLES // 10, 100))
@given(data=st.data())
def test_near_valid_frames(dialect: Dialect, data: st.DataObject) -> None:
    kind, frames = data.draw(near_valid(dialect))
    try:
        cmd = decode_as(kind, frames, dialect)
    except ProtocolError as exc:
        assert re.match(r"eventbus \S", str(exc))
        return
    assert decode_as(kind, encode(cmd, dialect), dialect) == cmd


@settings(max_examples=max(FUZZ_EXAMPLES // 10, 100))
@given(st.binary(max_size=64))
def test_garbage_event_data(data: bytes) -> None:
    for lenient in (False, True):
        with contextlib.suppress(ProtocolError):
            unpack_data(data, lenient=lenient)


@given(st.text(max_size=40))
def test_any_text_as_timestamp_parses_or_raises_protocol_error(timestamp: str) -> None:
    frames = [b"/t", SEQ_1, b"p", timestamp.encode(), UUID.encode(), b""]
    try:
        cmd = decode_publisher(frames)
    except ProtocolError as exc:
        assert exc.frame == 3
    else:
        assert cmd == Broadcast("/t", 1, "p", timestamp, UUID, b"")
