"""zbus's extensions to the Event BUS Protocol (ADR 0002), sans-I/O.

Spec clients never see these: on the spec's sockets every extension command's first
frame starts with a NUL byte, which no event topic may, and the batched stream has a
port of its own. Payloads are msgpack; an event travels as the array
``[topic, producer, timestamp, uuid, data]`` (``[seq, ...]`` in front where the server
has assigned it).

- COLLECTOR, client -> server: ``[b"\\0ZB-PUB", flags, msgpack [event, ...]]``; flags
  bit 0 asks for a confirm. Server -> client: ``[b"\\0ZB-CONFIRM", msgpack [[uuid, seq], ...]]``
  once the batch is in the log, or ``[b"\\0ZB-ERROR", reason]`` when it was refused
  (a reason that starts ``unavailable:`` may succeed on another replica or later).
- SNAPSHOT, client -> server: ``[b"\\0ZB-SNAPSHOT", msgpack {subtrees, since, after,
  mode, limit}]``; server -> client: ``[b"\\0ZB-PAGE", msgpack {events, next, sequence}]``
  or ``[b"\\0ZB-ERROR", reason]``.

Ranges (:mod:`eventbus_limits`): the collector's decoders hold every event of a ZB-PUB
to the event ranges; a ZB-SNAPSHOT has at most ``MAX_SUBTREES`` subtrees of at most
``MAX_TOPIC_BYTES`` bytes, ``since`` in 0..2**64-1, ``limit`` in 1..``MAX_LIMIT``, and in
mode "log" an ``after`` of 1 to 20 ASCII digits below 2**64 (a sequence).
- STREAM (PUB): ``[b"B", msgpack [first_seq, [event, ...]]]`` with contiguous sequences
  from ``first_seq``, and ``[b"H", 8-byte sequence]`` heartbeats.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal, TypeAlias

import msgpack

from zbus.common.protocols.errors import (
    FrameCountError,
    FrameValueError,
    ProtocolError,
    UnknownCommandError,
    check_uint64,
    uint64,
)
from zbus.common.protocols.eventbus_limits import (
    DEFAULT_MAX_DATA_BYTES,
    EventFieldError,
    out_of_range,
    subtrees_out_of_range,
    utf8_len,
)

PROTOCOL = "eventbus-ext"

PUB_BATCH = b"\0ZB-PUB"
CONFIRM = b"\0ZB-CONFIRM"
ERROR = b"\0ZB-ERROR"
SNAPSHOT = b"\0ZB-SNAPSHOT"
PAGE = b"\0ZB-PAGE"
STREAM_BATCH = b"B"
STREAM_HEARTBEAT = b"H"

MAX_LIMIT = 10_000
#: How a ZB-ERROR reason starts when the events may be stored elsewhere or later: a
#: replica that is not the leader, or a leader whose in-sync replicas did not confirm
#: them. A client sends the same events (same uuids) to the next endpoint.
UNAVAILABLE = "unavailable"
_UUID_TABLE = str.maketrans("123456789abcdefABCDEF", "0" * 21)
_UUID_SHAPE = "00000000-0000-0000-0000-000000000000"


@dataclass(frozen=True, slots=True)
class EventData:
    """An event as a producer sends it (the server assigns the sequence)."""

    topic: str
    producer: str
    timestamp: str
    uuid: str
    data: bytes


@dataclass(frozen=True, slots=True)
class SequencedEvent:
    """An event with the sequence the bus gave it."""

    sequence: int
    topic: str
    producer: str
    timestamp: str
    uuid: str
    data: bytes


@dataclass(frozen=True, slots=True)
class PubBatch:
    events: tuple[EventData, ...]
    confirm: bool = False


@dataclass(frozen=True, slots=True)
class Confirm:
    """Sequence of each event of a batch, in batch order (a duplicate gets its old one)."""

    sequences: tuple[tuple[str, int], ...]


@dataclass(frozen=True, slots=True)
class Error:
    reason: str


SnapshotMode: TypeAlias = Literal["latest", "log"]


@dataclass(frozen=True, slots=True)
class SnapshotQuery:
    """One page of a snapshot: latest value per topic, or (mode "log") every logged event."""

    subtrees: tuple[str, ...] = ()
    since: int = 0
    after: str | None = None
    mode: SnapshotMode = "latest"
    limit: int = 1000


@dataclass(frozen=True, slots=True)
class SnapshotPage:
    events: tuple[SequencedEvent, ...]
    next: str | None
    sequence: int


@dataclass(frozen=True, slots=True)
class StreamBatch:
    first_sequence: int
    events: tuple[EventData, ...]


@dataclass(frozen=True, slots=True)
class StreamHeartbeat:
    sequence: int


ExtCommand: TypeAlias = (
    PubBatch | Confirm | Error | SnapshotQuery | SnapshotPage | StreamBatch | StreamHeartbeat
)

_packb = msgpack.Packer(use_bin_type=True).pack


def _event_row(e: EventData) -> list[Any]:
    return [e.topic, e.producer, e.timestamp, e.uuid, e.data]


def encode(cmd: ExtCommand) -> list[bytes]:
    """The frames of an extension command."""
    if isinstance(cmd, StreamBatch):
        check_uint64(PROTOCOL, "STREAM", "first sequence", cmd.first_sequence)
        return [STREAM_BATCH, _packb([cmd.first_sequence, [_event_row(e) for e in cmd.events]])]
    if isinstance(cmd, StreamHeartbeat):
        check_uint64(PROTOCOL, "HEARTBEAT", "sequence", cmd.sequence)
        return [STREAM_HEARTBEAT, cmd.sequence.to_bytes(8, "big")]
    if isinstance(cmd, PubBatch):
        return [
            PUB_BATCH,
            b"\x01" if cmd.confirm else b"\x00",
            _packb([_event_row(e) for e in cmd.events]),
        ]
    if isinstance(cmd, Confirm):
        return [CONFIRM, _packb([list(p) for p in cmd.sequences])]
    if isinstance(cmd, Error):
        return [ERROR, cmd.reason.encode()]
    if isinstance(cmd, SnapshotQuery):
        query = {
            "subtrees": list(cmd.subtrees),
            "since": cmd.since,
            "after": cmd.after,
            "mode": cmd.mode,
            "limit": cmd.limit,
        }
        return [SNAPSHOT, _packb(query)]
    rows = [[e.sequence, e.topic, e.producer, e.timestamp, e.uuid, e.data] for e in cmd.events]
    return [PAGE, _packb({"events": rows, "next": cmd.next, "sequence": cmd.sequence})]


def is_extension(first_frame: bytes) -> bool:
    """True when a message on a spec socket is a zbus extension command."""
    return first_frame[:1] == b"\0"


# --- decoding ---------------------------------------------------------------------------


def _unpack(frames: Sequence[bytes], index: int, command: str, what: str) -> Any:
    try:
        return msgpack.unpackb(frames[index], raw=False, strict_map_key=True)
    except (ValueError, TypeError, msgpack.UnpackException):
        raise FrameValueError(
            PROTOCOL, f"{what} as msgpack", command=command, frame=index, got=frames[index]
        ) from None


def _bad(command: str, frame: int, expected: str, got: object = None) -> FrameValueError:
    try:
        return FrameValueError(PROTOCOL, expected, command=command, frame=frame, got=got)
    except RecursionError:
        # msgpack nests arrays and maps up to ~1000 deep, past what repr() can show.
        got = "<value nested too deeply to show>"
        return FrameValueError(PROTOCOL, expected, command=command, frame=frame, got=got)


def _event(row: Any, command: str, frame: int, n: int) -> EventData:
    _validate(row, command, frame, n)
    return EventData(*row)


def _field(command: str, frame: int, field: str, expected: str, got: object) -> EventFieldError:
    """:func:`_bad` for an event field: the error names the field."""
    try:
        return EventFieldError(PROTOCOL, field, expected, command=command, frame=frame, got=got)
    except RecursionError:
        got = "<value nested too deeply to show>"
        return EventFieldError(PROTOCOL, field, expected, command=command, frame=frame, got=got)


def _validate(row: Any, command: str, frame: int, n: int) -> None:
    """Raise FrameValueError unless ``row`` is ``[topic, producer, timestamp, uuid, data]``."""
    if not isinstance(row, list) or len(row) != 5:
        raise _bad(command, frame, f"event {n} as [topic, producer, timestamp, uuid, data]", row)
    topic, producer, timestamp, uuid, data = row
    if not (isinstance(topic, str) and topic and not topic.startswith("\0")):
        raise _field(
            command, frame, "topic", f"event {n} topic: non-empty text not starting with NUL", topic
        )
    if not isinstance(producer, str):
        raise _field(command, frame, "producer", f"event {n} producer as text", producer)
    if not isinstance(data, bytes):
        raise _field(command, frame, "data", f"event {n} data as binary", data)
    if not isinstance(uuid, str) or uuid.translate(_UUID_TABLE) != _UUID_SHAPE:
        raise _field(command, frame, "uuid", f"event {n} uuid in the 36-character form", uuid)
    try:
        datetime.fromisoformat(timestamp)
    except (TypeError, ValueError):
        raise _field(
            command, frame, "timestamp", f"event {n} timestamp in ISO-8601", timestamp
        ) from None


def _check_ranges(rows: list[list[Any]], command: str, frame: int, max_data: int) -> None:
    """Raise EventFieldError for the first validated row with a field outside its range."""
    for n, (topic, producer, timestamp, _, data) in enumerate(rows):
        wrong = out_of_range(utf8_len(topic), utf8_len(producer), timestamp, len(data), max_data)
        if wrong is not None:
            field, expected = wrong
            got = {"topic": topic, "producer": producer, "timestamp": timestamp}.get(field)
            if got is None or len(got) > 64:
                got = f"{utf8_len(got) if isinstance(got, str) else len(data)} bytes"
            raise _field(command, frame, field, f"event {n} {field}: {expected}", got)


def _check_rows(value: Any, command: str, frame: int) -> list[list[Any]]:
    """Validate an array of event rows in place of building EventData objects."""
    if not isinstance(value, list):
        raise _bad(command, frame, "an array of events", value)
    for n, row in enumerate(value):
        _validate(row, command, frame, n)
    return value


def _pub_envelope(frames: Sequence[bytes]) -> bool:
    """A ZB-PUB's three frames checked (once per batch); whether it asks for a confirm."""
    if not frames or frames[0] != PUB_BATCH:
        raise UnknownCommandError(
            PROTOCOL, "ZB-PUB", frame=0, got=frames[0] if frames else "no frames"
        )
    if len(frames) != 3:
        raise FrameCountError(PROTOCOL, "3 frames", command="ZB-PUB", got=f"{len(frames)} frames")
    if frames[1] not in (b"\x00", b"\x01"):
        raise _bad("ZB-PUB", 1, "flags as one byte 0x00 or 0x01", frames[1])
    return frames[1] == b"\x01"


def decode_collector_rows(
    frames: Sequence[bytes], *, max_data: int = DEFAULT_MAX_DATA_BYTES
) -> tuple[bool, list[list[Any]]]:
    """ZB-PUB as ``(confirm, rows)``, each row ``[topic, producer, timestamp, uuid, data]``.

    The same checks as :func:`decode_collector`, for the bus's hot path, which stores
    rows and has no use for an object per event.
    """
    confirm = _pub_envelope(frames)
    rows = _check_rows(_unpack(frames, 2, "ZB-PUB", "events"), "ZB-PUB", 2)
    _check_ranges(rows, "ZB-PUB", 2, max_data)
    return confirm, rows


def _events(value: Any, command: str, frame: int) -> tuple[EventData, ...]:
    if not isinstance(value, list):
        raise _bad(command, frame, "an array of events", value)
    return tuple(_event(row, command, frame, n) for n, row in enumerate(value))


def _uint(value: Any, command: str, frame: int, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 1 << 64:
        raise _bad(command, frame, f"{what} as an unsigned 64-bit integer", value)
    return value


def decode_collector(
    frames: Sequence[bytes], *, max_data: int = DEFAULT_MAX_DATA_BYTES
) -> PubBatch:
    """An extension command a client sent to the COLLECTOR, every event in its ranges.

    Raises:
        EventFieldError: an event field malformed or outside its range (``field`` names it).
        ProtocolError: anything else that is not a ZB-PUB.
    """
    confirm = _pub_envelope(frames)
    events = _events(_unpack(frames, 2, "ZB-PUB", "events"), "ZB-PUB", 2)
    _check_ranges([_event_row(e) for e in events], "ZB-PUB", 2, max_data)
    return PubBatch(events, confirm=confirm)


def decode_collector_reply(frames: Sequence[bytes]) -> Confirm | Error:
    """What the COLLECTOR answers a ZB-PUB with."""
    rows = _answer(frames, CONFIRM, "ZB-CONFIRM", "confirmations")
    if isinstance(rows, Error):
        return rows
    if not isinstance(rows, list):
        raise _bad("ZB-CONFIRM", 1, "an array of [uuid, seq]", rows)
    pairs = []
    for row in rows:
        if not (isinstance(row, list) and len(row) == 2 and isinstance(row[0], str)):
            raise _bad("ZB-CONFIRM", 1, "[uuid, seq] pairs", row)
        pairs.append((row[0], _uint(row[1], "ZB-CONFIRM", 1, "sequence")))
    return Confirm(tuple(pairs))


def _answer(frames: Sequence[bytes], expected: bytes, command: str, what: str) -> Any:
    """The one msgpack body of a ``command`` answer, or the :class:`Error` sent instead."""
    if frames and frames[0] == ERROR:
        return _error(frames)
    if not frames or frames[0] != expected:
        raise UnknownCommandError(
            PROTOCOL, f"{command} or ZB-ERROR", frame=0, got=frames[0] if frames else "none"
        )
    if len(frames) != 2:
        raise FrameCountError(PROTOCOL, "2 frames", command=command, got=len(frames))
    return _unpack(frames, 1, command, what)


def _error(frames: Sequence[bytes]) -> Error:
    if len(frames) != 2:
        raise FrameCountError(PROTOCOL, "2 frames", command="ZB-ERROR", got=len(frames))
    try:
        return Error(frames[1].decode())
    except UnicodeDecodeError:
        raise _bad("ZB-ERROR", 1, "reason as UTF-8 text", frames[1]) from None


def decode_snapshot_request(frames: Sequence[bytes]) -> SnapshotQuery:
    """An extension command a client sent to the SNAPSHOT socket."""
    if not frames or frames[0] != SNAPSHOT:
        raise UnknownCommandError(
            PROTOCOL, "ZB-SNAPSHOT", frame=0, got=frames[0] if frames else "no frames"
        )
    if len(frames) != 2:
        raise FrameCountError(PROTOCOL, "2 frames", command="ZB-SNAPSHOT", got=len(frames))
    q = _unpack(frames, 1, "ZB-SNAPSHOT", "query")
    cmd = "ZB-SNAPSHOT"
    if not isinstance(q, dict) or set(q) - {"subtrees", "since", "after", "mode", "limit"}:
        raise _bad(cmd, 1, "a map of subtrees, since, after, mode, limit", q)
    subtrees = q.get("subtrees", [])
    if not isinstance(subtrees, list) or not all(isinstance(s, str) for s in subtrees):
        raise _bad(cmd, 1, "subtrees as an array of text", subtrees)
    wrong = subtrees_out_of_range(subtrees)
    if wrong is not None:
        raise _bad(cmd, 1, f"subtrees: {wrong}", f"{len(subtrees)} subtrees")
    after = q.get("after")
    if after is not None and not isinstance(after, str):
        raise _bad(cmd, 1, "after as text or nil", after)
    mode = q.get("mode", "latest")
    if mode not in ("latest", "log"):
        raise _bad(cmd, 1, "mode 'latest' or 'log'", mode)
    if mode == "log" and after is not None:
        _sequence_cursor(after)
    limit = _uint(q.get("limit", 1000), cmd, 1, "limit")
    if not 1 <= limit <= MAX_LIMIT:
        raise _bad(cmd, 1, f"limit in 1..{MAX_LIMIT}", limit)
    since = _uint(q.get("since", 0), cmd, 1, "since")
    return SnapshotQuery(tuple(subtrees), since, after, mode, limit)


def _sequence_cursor(after: str) -> int:
    """A log cursor: a sequence as 1 to 20 ASCII digits below 2**64 (``str.isdigit``
    alone would let through '²', which ``int`` refuses, and digits past any sequence)."""
    if after.isascii() and after.isdigit() and len(after) <= 20:
        value = int(after)
        if value < 1 << 64:
            return value
    raise _bad(
        "ZB-SNAPSHOT", 1, "after in mode 'log' as a sequence: ASCII digits below 2**64", after
    )


def log_cursor(query: SnapshotQuery) -> int:
    """Where a mode "log" query starts: after its cursor when it has one, else ``since``."""
    return query.since if query.after is None else _sequence_cursor(query.after)


def decode_snapshot_reply(frames: Sequence[bytes]) -> SnapshotPage | Error:
    """What the SNAPSHOT socket answers a ZB-SNAPSHOT with."""
    page = _answer(frames, PAGE, "ZB-PAGE", "page")
    if isinstance(page, Error):
        return page
    if not isinstance(page, dict) or not isinstance(page.get("events"), list):
        raise _bad("ZB-PAGE", 1, "a map with events, next, sequence", page)
    nxt = page.get("next")
    if nxt is not None and not isinstance(nxt, str):
        raise _bad("ZB-PAGE", 1, "next as text or nil", nxt)
    sequence = _uint(page.get("sequence"), "ZB-PAGE", 1, "sequence")
    events = []
    for n, row in enumerate(page["events"]):
        if not isinstance(row, list) or len(row) != 6:
            raise _bad("ZB-PAGE", 1, f"event {n} as [seq, topic, producer, ts, uuid, data]", row)
        e = _event(row[1:], "ZB-PAGE", 1, n)
        seq = _uint(row[0], "ZB-PAGE", 1, "event sequence")
        events.append(SequencedEvent(seq, e.topic, e.producer, e.timestamp, e.uuid, e.data))
    return SnapshotPage(tuple(events), nxt, sequence)


_PAGE_ROW_TYPES = [int, str, str, str, str, bytes]


def _sequenced_builder() -> Any:
    """Build SequencedEvent by writing its slots: a frozen dataclass's __init__ costs more
    than the rest of decoding a page row (the same trick as the spec codec's events)."""
    set_sequence, set_topic, set_producer, set_timestamp, set_uuid, set_data = (
        getattr(SequencedEvent, f).__set__ for f in SequencedEvent.__slots__
    )
    new = object.__new__

    def build(row: list[Any]) -> SequencedEvent:
        # Unpacked, not zipped with the setters: a row of another length is a ValueError
        # all the same, at a third of the cost.
        sequence, topic, producer, timestamp, uuid, data = row
        event = new(SequencedEvent)
        set_sequence(event, sequence)
        set_topic(event, topic)
        set_producer(event, producer)
        set_timestamp(event, timestamp)
        set_uuid(event, uuid)
        set_data(event, data)
        return event

    return build


_new_sequenced = _sequenced_builder()


def encode_page(rows: Sequence[Sequence[Any]], nxt: str | None, sequence: int) -> list[bytes]:
    """ZB-PAGE straight from ``[seq, topic, producer, ts, uuid, data]`` rows (the server's
    hot path for big snapshots: no object per event)."""
    return [PAGE, _packb({"events": rows, "next": nxt, "sequence": sequence})]


def decode_snapshot_reply_fast(frames: Sequence[bytes]) -> SnapshotPage | Error:
    """:func:`decode_snapshot_reply` with type checks only (no timestamp or uuid parsing),
    for zbus's own client reading pages the bus built from events it validated."""
    if len(frames) == 2 and frames[0] == PAGE:
        try:
            page = msgpack.unpackb(frames[1], raw=False)
        except (ValueError, TypeError, msgpack.UnpackException):
            raise _bad("ZB-PAGE", 1, "a page as msgpack", frames[1]) from None
        if type(page) is dict:
            rows, nxt, sequence = page.get("events"), page.get("next"), page.get("sequence")
            if (
                type(rows) is list
                and (nxt is None or type(nxt) is str)
                and type(sequence) is int
                and 0 <= sequence < 1 << 64
                and all(
                    type(r) is list and list(map(type, r)) == _PAGE_ROW_TYPES and r[0] >= 0
                    for r in rows
                )
            ):
                return SnapshotPage(tuple(map(_new_sequenced, rows)), nxt, sequence)
    return decode_snapshot_reply(frames)  # the careful path, which says what is wrong


def decode_stream(frames: Sequence[bytes]) -> StreamBatch | StreamHeartbeat:
    """A message from the STREAM socket."""
    if not frames:
        raise FrameCountError(PROTOCOL, "at least 1 frame", command=None, got="no frames")
    if frames[0] == STREAM_HEARTBEAT:
        if len(frames) != 2:
            raise FrameCountError(PROTOCOL, "2 frames", command="H", got=len(frames))
        return StreamHeartbeat(uint64(PROTOCOL, "H", frames, 1, "sequence"))
    if frames[0] != STREAM_BATCH:
        raise UnknownCommandError(PROTOCOL, "B or H", frame=0, got=frames[0])
    if len(frames) != 2:
        raise FrameCountError(PROTOCOL, "2 frames", command="B", got=len(frames))
    body = _unpack(frames, 1, "B", "batch")
    if not isinstance(body, list) or len(body) != 2:
        raise _bad("B", 1, "[first_seq, events]", body)
    first = _uint(body[0], "B", 1, "first sequence")
    return StreamBatch(first, _events(body[1], "B", 1))


def decode_stream_fast(frames: Sequence[bytes]) -> tuple[int, list[list[Any]]] | int:
    """The stream without per-event checks, for the server's own client on the hot path.

    Returns ``(first_seq, rows)`` for a batch or the sequence of a heartbeat. The server
    validated every event before it was sequenced; a frame that is not what the server
    sends still raises ``ProtocolError``.
    """
    if len(frames) == 2 and frames[0] == STREAM_BATCH:
        try:
            first, rows = msgpack.unpackb(frames[1], raw=False, use_list=True)
        except (ValueError, TypeError, msgpack.UnpackException):
            raise _bad("B", 1, "[first_seq, events] as msgpack", frames[1]) from None
        if type(first) is int and 0 <= first < 1 << 64 and isinstance(rows, list):
            return first, rows
        raise _bad("B", 1, "[first_seq, events]", frames[1])
    cmd = decode_stream(frames)
    if isinstance(cmd, StreamHeartbeat):
        return cmd.sequence
    return cmd.first_sequence, [_event_row(e) for e in cmd.events]


__all__ = [
    "Confirm",
    "Error",
    "EventData",
    "ExtCommand",
    "ProtocolError",
    "PubBatch",
    "SequencedEvent",
    "SnapshotPage",
    "SnapshotQuery",
    "StreamBatch",
    "StreamHeartbeat",
    "decode_collector",
    "decode_collector_reply",
    "decode_collector_rows",
    "decode_snapshot_reply",
    "decode_snapshot_reply_fast",
    "decode_snapshot_request",
    "decode_stream",
    "decode_stream_fast",
    "encode",
    "encode_page",
    "is_extension",
    "log_cursor",
]
