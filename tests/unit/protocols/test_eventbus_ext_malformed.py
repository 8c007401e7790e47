"""zbus's Event BUS extensions (ADR 0002), malformed input: each error names the command,
the frame and what was expected; event rows are checked field by field in every command
that carries them.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.support.eventbus_ext import DECODERS, ROW, TS, U64_MAX, UUID, Decoder, packb
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
    EventData,
    PubBatch,
    SnapshotPage,
    StreamBatch,
    decode_collector,
    decode_collector_reply,
    decode_snapshot_reply,
    decode_snapshot_request,
    decode_stream,
    decode_stream_fast,
)

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
