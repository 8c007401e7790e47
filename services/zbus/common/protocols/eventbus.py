"""Event BUS Protocol codec (seed 000, micro-toolkit RFC), sans-I/O.

The bus has three sockets and each carries its own commands (RFC "Ports and
Connections"):

- SNAPSHOT (ROUTER): the client sends SYNCSTART, the server answers with SYNC... SYNCEND.
- PUBLISHER (PUB): the server sends BROADCAST, and zbus's idle heartbeat HUGZ.
- COLLECTOR (ROUTER): the client sends PUB.

BROADCAST and PUB have the same six-frame layout, so there is no single ``decode``:
the socket a message came from picks the decoder (``decode_snapshot_request``,
``decode_snapshot_reply``, ``decode_publisher``, ``decode_collector``). One ``encode``
serves every command. The frames are those after the ROUTER identity, which the
transport owns.

Decisions where the RFC is silent or loose (also in docs/protocols/eventbus.md):

- Sequences are unsigned 64-bit, 8 bytes in network order (RFC frame tables). With
  ``Dialect.ascii_sequences`` every sequence is ASCII decimal text instead, as the
  Node.js reference peer sends and parses them.
- SYNCSTART is exactly three frames: the RFC's prose says "two frames" but its table and
  the Node.js peer have three.
- A subtree list is split on both ';' (RFC) and ',' (Node.js peer) when decoding, and
  joined with the dialect's separator when encoding. An empty frame means all topics
  (``()``); an empty item inside a non-empty list is rejected, because as a prefix it
  would silently widen the request to every topic. Subtrees are plain topic prefixes:
  the RFC's '/a/b/' shape is not enforced (the Node.js peer matches plain prefixes, and
  topics from the mc0 front door need not start with '/').
- The PUB sequence means nothing to the server, which assigns its own (RFC "Client-to-
  Server Updates" leaves it open). ``None`` stands for "unassigned": the Node.js peer
  writes it as the text ``null``; in 8-byte mode it is eight zero bytes, so encoding
  ``Pub(sequence=0)`` in that mode is refused (it would decode as ``None``).
- HUGZ, ``[b"HUGZ", sequence]``, is zbus's heartbeat on the PUB socket (RFC
  "Reliability" asks for server heartbeats but defines none). Two frames tell it from a
  six-frame BROADCAST; its sequence is the bus's current one, in the dialect's encoding.
- Text frames (topic, producer, timestamp, uuid, subtrees) are strict UTF-8 and are kept
  exactly as sent, so re-encoding gives the same bytes. The timestamp must parse with
  ``datetime.fromisoformat`` (ISO-8601, including a trailing 'Z'). The uuid must be the
  canonical 36-character hex-and-hyphens form, either case, any version: the RFC says v4,
  but the version nibble carries no meaning for the bus and rejecting v1/v7 ids would
  only break producers.
- ``encode`` trusts the text fields of an event (the hot path builds them from
  ``datetime`` and ``uuid`` objects) and checks only what the wire cannot carry: text
  that is not UTF-8-encodable and sequences outside 0..2**64-1, raised as
  ``FrameValueError``. It does check subtree lists, which are not on the hot path.
- A PUB topic may not start with a NUL byte: zbus's extension commands on the same
  sockets do (ADR 0002).
- ``decode_collector`` (the bus's side) also holds every field of a PUB to its range:
  topic, producer id, timestamp, uuid and data size (:mod:`eventbus_limits`); a field
  outside it raises ``EventFieldError`` naming the field. Subtree lists have at most
  ``MAX_SUBTREES`` items.
- Event data is opaque bytes here; ``unpack_data`` unpacks it as msgpack on request.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields
from datetime import datetime
from typing import Any, NoReturn, TypeAlias, TypeVar

from zbus.common.protocols.errors import (
    FrameCountError,
    FrameValueError,
    ProtocolError,
    UnknownCommandError,
    ascii_uint,
    text,
    uint64,
)
from zbus.common.protocols.eventbus_data import unpack_data
from zbus.common.protocols.eventbus_limits import (
    DEFAULT_MAX_DATA_BYTES,
    MAX_PRODUCER_BYTES,
    MAX_TIMESTAMP_BYTES,
    MAX_TOPIC_BYTES,
    EventFieldError,
    subtrees_out_of_range,
    timestamp_in_range,
)

PROTOCOL = "eventbus"


@dataclass(frozen=True, slots=True)
class Dialect:
    """How a peer writes numbers and subtree lists.

    Attributes:
        ascii_sequences: every sequence is ASCII decimal text, and a PUB sequence may be
            the text ``null`` (``None``); otherwise 8 bytes in network order.
        subtree_separator: joins subtree lists when encoding (';' or ','). Decoding
            accepts both either way.
    """

    ascii_sequences: bool = False
    subtree_separator: str = ";"

    def __post_init__(self) -> None:
        if self.subtree_separator not in _SEPARATORS:
            raise ValueError(
                f"subtree_separator must be ';' or ',', not {self.subtree_separator!r}"
            )


_SEPARATORS = (";", ",")

SPEC = Dialect()
"""The RFC: 8-byte sequences, ';' between subtrees."""

NODE_REFERENCE = Dialect(ascii_sequences=True, subtree_separator=",")
"""micro-toolkit/event-bus-zeromq (Node.js): decimal text sequences, ',' between subtrees."""


# --- commands -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _SubtreesAt:
    """Subtrees and a sequence: what SYNCSTART asks for and what SYNCEND answers."""

    subtrees: tuple[str, ...]
    sequence: int


@dataclass(frozen=True, slots=True)
class SyncStart(_SubtreesAt):
    """Client -> SNAPSHOT: send me every event after ``sequence`` under ``subtrees``.

    ``subtrees == ()`` asks for all topics.
    """


@dataclass(frozen=True, slots=True)
class SyncEnd(_SubtreesAt):
    """SNAPSHOT -> client: the snapshot is complete up to ``sequence``."""


@dataclass(frozen=True, slots=True)
class _SequencedEvent:
    """An event with the sequence the server assigned: a SYNC item or a broadcast."""

    topic: str
    sequence: int
    producer: str
    timestamp: str
    uuid: str
    data: bytes


@dataclass(frozen=True, slots=True)
class Sync(_SequencedEvent):
    """SNAPSHOT -> client: one stored event of the snapshot."""


@dataclass(frozen=True, slots=True)
class Broadcast(_SequencedEvent):
    """PUBLISHER -> subscribers: a new event, with the sequence the server assigned."""


@dataclass(frozen=True, slots=True)
class Pub:
    """Client -> COLLECTOR: publish an event. ``sequence=None`` means unassigned."""

    topic: str
    sequence: int | None
    producer: str
    timestamp: str
    uuid: str
    data: bytes


@dataclass(frozen=True, slots=True)
class Heartbeat:
    """PUBLISHER -> subscribers when idle: ``[b"HUGZ", current sequence]``."""

    sequence: int


SnapshotRequest: TypeAlias = SyncStart
SnapshotReply: TypeAlias = Sync | SyncEnd
PublisherMessage: TypeAlias = Broadcast | Heartbeat
CollectorMessage: TypeAlias = Pub
EventBusCommand: TypeAlias = SyncStart | Sync | SyncEnd | Broadcast | Pub | Heartbeat

_E = TypeVar("_E", Sync, Broadcast, Pub)  # the three six-field event commands


# --- wire constants -------------------------------------------------------------------

_SYNCSTART = b"SYNCSTART"
_SYNC = b"SYNC"
_SYNCEND = b"SYNCEND"
_HUGZ = b"HUGZ"
_NULL = b"null"
_ZERO = bytes(8)
_U64_MAX = (1 << 64) - 1
_U64 = struct.Struct(">Q")
_pack_u64 = _U64.pack
_from_bytes = int.from_bytes
_fromisoformat = datetime.fromisoformat
# Mapping every hex digit to '0' turns a canonical uuid into this shape (any other byte
# stays itself), so one translate and one compare check it: a quarter of a regex match.
_UUID_TABLE = bytes.maketrans(b"123456789abcdefABCDEF", b"0" * 21)
_UUID_SHAPE = b"00000000-0000-0000-0000-000000000000"
_split_subtrees = re.compile("[;,]").split
# zbus's own commands on the spec's sockets start with a NUL byte (ADR 0002), so a PUB
# topic may not, and no spec command can be taken for one of them.
_NUL_TOPIC = "a non-empty topic not starting with a NUL byte (reserved for zbus extensions)"


# --- encoding -------------------------------------------------------------------------


def encode(cmd: EventBusCommand, dialect: Dialect = SPEC) -> list[bytes]:
    """The frames of ``cmd`` as ``dialect`` writes them.

    Raises:
        FrameValueError: a sequence outside 0..2**64-1, text that is not encodable as
            UTF-8, a PUB sequence of 0 in 8-byte mode, or an invalid subtree list.
    """
    ascii_seq = dialect.ascii_sequences
    try:
        # Ordered by traffic: BROADCAST and PUB are the hot path.
        if isinstance(cmd, Broadcast):
            return _event_frames(cmd, _sequence_frame(cmd.sequence, ascii_seq))
        if isinstance(cmd, Pub):
            if not cmd.topic or cmd.topic[:1] == "\0":
                raise EventFieldError(PROTOCOL, "topic", _NUL_TOPIC, command="PUB", got=cmd.topic)
            seq = cmd.sequence
            if seq is None:
                seq_frame = _NULL if ascii_seq else _ZERO
            elif seq == 0 and not ascii_seq:
                # Eight zero bytes decode as None, so 0 would not come back as 0.
                raise FrameValueError(
                    PROTOCOL, "a PUB sequence above 0, or None for unassigned", command="PUB", got=0
                )
            else:
                seq_frame = _sequence_frame(seq, ascii_seq)
            return _event_frames(cmd, seq_frame)
        if isinstance(cmd, Heartbeat):
            return [_HUGZ, _sequence_frame(cmd.sequence, ascii_seq)]
        if isinstance(cmd, Sync):
            return [_SYNC, *_event_frames(cmd, _sequence_frame(cmd.sequence, ascii_seq))]
        if isinstance(cmd, SyncStart):
            name, head = "SYNCSTART", _SYNCSTART
        elif isinstance(cmd, SyncEnd):
            name, head = "SYNCEND", _SYNCEND
        else:
            raise TypeError(f"not an Event BUS command: {cmd!r}")
        return [
            head,
            _subtrees_frame(cmd.subtrees, dialect.subtree_separator, name),
            _sequence_frame(cmd.sequence, ascii_seq),
        ]
    except (OverflowError, struct.error, UnicodeEncodeError) as exc:
        raise FrameValueError(
            PROTOCOL,
            "text encodable as UTF-8 and sequences in 0..2**64-1",
            command=_COMMAND_NAMES.get(type(cmd)),
            got=str(exc),
        ) from None


def _event_frames(cmd: Broadcast | Pub | Sync, sequence: bytes) -> list[bytes]:
    """The six frames of an event: topic, sequence, producer, timestamp, uuid, data."""
    return [
        cmd.topic.encode(),
        sequence,
        cmd.producer.encode(),
        cmd.timestamp.encode(),
        cmd.uuid.encode(),
        cmd.data,
    ]


_COMMAND_NAMES: dict[type, str] = {
    SyncStart: "SYNCSTART",
    Sync: "SYNC",
    SyncEnd: "SYNCEND",
    Broadcast: "BROADCAST",
    Pub: "PUB",
    Heartbeat: "HUGZ",
}


def _sequence_frame(value: int, ascii_seq: bool) -> bytes:
    if ascii_seq:
        if 0 <= value <= _U64_MAX:
            return b"%d" % value
        raise OverflowError(f"sequence {value} outside 0..2**64-1")
    return _pack_u64(value)  # struct.error outside 0..2**64-1


def _subtrees_frame(subtrees: tuple[str, ...], separator: str, command: str) -> bytes:
    for subtree in subtrees:
        # Such an item would not survive the split on ';' and ',' (or would widen the
        # request to everything); refuse it rather than send something else.
        if not subtree or ";" in subtree or "," in subtree:
            raise FrameValueError(
                PROTOCOL,
                "non-empty subtrees without ';' or ','",
                command=command,
                got=subtree,
            )
    return separator.join(subtrees).encode()


# --- decoding -------------------------------------------------------------------------


def decode_snapshot_request(frames: Sequence[bytes], dialect: Dialect = SPEC) -> SyncStart:
    """Decode what a client sent to the SNAPSHOT socket: SYNCSTART."""
    if not frames or frames[0] != _SYNCSTART:
        _unknown(frames, "SYNCSTART")
    _count(frames, 3, "SYNCSTART")
    return SyncStart(
        _subtrees(frames, 1, "SYNCSTART"),
        _sequence(frames, 2, "SYNCSTART", dialect.ascii_sequences),
    )


def decode_snapshot_reply(frames: Sequence[bytes], dialect: Dialect = SPEC) -> Sync | SyncEnd:
    """Decode what the SNAPSHOT socket sent a client: SYNC or SYNCEND."""
    head = frames[0] if frames else None
    if head == _SYNC:
        _count(frames, 7, "SYNC")
        sequence = _sequence(frames, 2, "SYNC", dialect.ascii_sequences)
        return _event(_new_sync, "SYNC", frames, 1, sequence)
    if head == _SYNCEND:
        _count(frames, 3, "SYNCEND")
        return SyncEnd(
            _subtrees(frames, 1, "SYNCEND"),
            _sequence(frames, 2, "SYNCEND", dialect.ascii_sequences),
        )
    _unknown(frames, "SYNC or SYNCEND")


def decode_publisher(frames: Sequence[bytes], dialect: Dialect = SPEC) -> Broadcast | Heartbeat:
    """Decode what the PUBLISHER socket sent: BROADCAST (6 frames) or HUGZ (2 frames)."""
    n = len(frames)
    if n == 6:
        sequence = _sequence(frames, 1, "BROADCAST", dialect.ascii_sequences)
        return _event(_new_broadcast, "BROADCAST", frames, 0, sequence)
    if n == 2:
        if frames[0] != _HUGZ:
            raise UnknownCommandError(
                PROTOCOL, "HUGZ (2 frames) or a 6-frame BROADCAST", frame=0, got=frames[0]
            )
        return Heartbeat(_sequence(frames, 1, "HUGZ", dialect.ascii_sequences))
    raise FrameCountError(PROTOCOL, "6 frames (BROADCAST) or 2 frames (HUGZ)", got=f"{n} frames")


def decode_collector(
    frames: Sequence[bytes], dialect: Dialect = SPEC, *, max_data: int = DEFAULT_MAX_DATA_BYTES
) -> Pub:
    """Decode what a client sent to the COLLECTOR socket: PUB, every field in its range.

    Raises:
        EventFieldError: a field that is malformed or outside its range (the error's
            ``field`` names it); data longer than ``max_data`` bytes, say.
        ProtocolError: anything else that is not a PUB.
    """
    _count(frames, 6, "PUB")
    topic = frames[0]
    if topic[:1] == b"\0" or not topic:
        raise EventFieldError(PROTOCOL, "topic", _NUL_TOPIC, command="PUB", frame=0, got=topic)
    # Sizes first, on the raw frames: an oversized frame is refused before it is decoded.
    for index, field, limit in _PUB_LIMITS:
        if len(frames[index]) > limit:
            _too_long(frames, index, field, limit)
    if len(frames[5]) > max_data:
        _too_long(frames, 5, "data", max_data)
    ascii_seq = dialect.ascii_sequences
    sequence: int | None
    if frames[1] == (_NULL if ascii_seq else _ZERO):
        sequence = None  # unassigned: the server numbers the event
    else:
        sequence = _sequence(frames, 1, "PUB", ascii_seq)
    pub = _event(_new_pub, "PUB", frames, 0, sequence)
    if not timestamp_in_range(pub.timestamp):
        raise EventFieldError(
            PROTOCOL,
            "timestamp",
            "a timestamp within years 1..9999 in UTC",
            command="PUB",
            frame=3,
            got=frames[3],
        )
    return pub


_PUB_LIMITS = (
    (0, "topic", MAX_TOPIC_BYTES),
    (2, "producer", MAX_PRODUCER_BYTES),
    (3, "timestamp", MAX_TIMESTAMP_BYTES),
)


def _too_long(frames: Sequence[bytes], index: int, field: str, limit: int) -> NoReturn:
    raise EventFieldError(
        PROTOCOL,
        field,
        f"{field} of at most {limit} bytes",
        command="PUB",
        frame=index,
        got=f"{len(frames[index])} bytes",
    )


def _sequence(frames: Sequence[bytes], index: int, command: str, ascii_seq: bool) -> int:
    raw = frames[index]
    if ascii_seq:
        # bytes.isdigit() is ASCII-only and keeps int() from taking '+', '_' or spaces.
        if raw.isdigit() and len(raw) <= 20:
            value = int(raw)
            if value <= _U64_MAX:
                return value
    elif len(raw) == 8:
        return _from_bytes(raw, "big")
    # The helpers repeat the check and raise the FrameValueError that says what was wrong.
    return (ascii_uint if ascii_seq else uint64)(PROTOCOL, command, frames, index, "sequence")


def _count(frames: Sequence[bytes], n: int, command: str) -> None:
    if len(frames) != n:
        raise FrameCountError(PROTOCOL, f"{n} frames", command=command, got=f"{len(frames)} frames")


def _unknown(frames: Sequence[bytes], expected: str) -> NoReturn:
    if not frames:
        raise FrameCountError(PROTOCOL, f"a {expected} command", got="0 frames")
    raise UnknownCommandError(PROTOCOL, expected, frame=0, got=frames[0])


def _event(
    build: Callable[[str, Any, str, str, str, bytes], _E],
    command: str,
    frames: Sequence[bytes],
    first: int,
    sequence: int | None,
) -> _E:
    """The event whose six frames start at ``first``; its sequence is already parsed."""
    topic, _, producer, timestamp, uuid, data = frames[first:] if first else frames
    # Fast path first; when a frame is bad, _explain checks them in order to say which.
    # ValueError covers UnicodeDecodeError and fromisoformat's complaints.
    try:
        timestamp_text = timestamp.decode()
        _fromisoformat(timestamp_text)
        if uuid.translate(_UUID_TABLE) != _UUID_SHAPE:
            raise ValueError(uuid)
        return build(
            topic.decode(), sequence, producer.decode(), timestamp_text, uuid.decode(), data
        )
    except ValueError:
        _explain(frames, first, command)


def _explain(frames: Sequence[bytes], first: int, command: str) -> NoReturn:
    """Raise the EventFieldError naming the first bad text frame of an event."""
    for offset, field in ((0, "topic"), (2, "producer"), (3, "timestamp")):
        index = first + offset
        try:
            frames[index].decode()
        except UnicodeDecodeError:
            raise EventFieldError(
                PROTOCOL,
                field,
                f"{field} as UTF-8 text",
                command=command,
                frame=index,
                got=frames[index],
            ) from None
    index = first + 3
    try:
        _fromisoformat(frames[index].decode())
    except ValueError:
        raise EventFieldError(
            PROTOCOL,
            "timestamp",
            "an ISO-8601 timestamp",
            command=command,
            frame=index,
            got=frames[index],
        ) from None
    index = first + 4
    raise EventFieldError(
        PROTOCOL,
        "uuid",
        "a uuid of 36 characters, 8-4-4-4-12 hex digits",
        command=command,
        frame=index,
        got=frames[index],
    )


def _subtrees(frames: Sequence[bytes], index: int, command: str) -> tuple[str, ...]:
    spec = text(PROTOCOL, command, frames, index, "subtrees")
    if not spec:
        return ()  # RFC: "The subtree specification MAY be empty": every topic.
    subtrees = tuple(_split_subtrees(spec))
    if "" in subtrees:
        raise FrameValueError(
            PROTOCOL,
            "non-empty subtrees separated by ';' or ','",
            command=command,
            frame=index,
            got=frames[index],
        )
    wrong = subtrees_out_of_range(subtrees)
    if wrong is not None:
        raise FrameValueError(PROTOCOL, wrong, command=command, frame=index, got=frames[index])
    return subtrees


def _event_builder(cls: type[_E]) -> Callable[[str, Any, str, str, str, bytes], _E]:
    """A positional constructor for ``cls`` that writes its slots directly.

    A frozen dataclass's ``__init__`` sets each field through ``object.__setattr__`` to get
    past its own guard, which makes it the most expensive step of decoding an event (about
    twice what this costs). The slot descriptors write the same slots, and no field has a
    default or a ``__post_init__`` to run, so the result is the same object.
    """
    set_topic, set_sequence, set_producer, set_timestamp, set_uuid, set_data = (
        getattr(cls, field.name).__set__ for field in fields(cls)
    )
    new = object.__new__

    def build(  # the dataclass's own positional signature
        topic: str, sequence: Any, producer: str, timestamp: str, uuid: str, data: bytes
    ) -> _E:
        event = new(cls)
        set_topic(event, topic)
        set_sequence(event, sequence)
        set_producer(event, producer)
        set_timestamp(event, timestamp)
        set_uuid(event, uuid)
        set_data(event, data)
        return event

    return build


_new_sync = _event_builder(Sync)
_new_broadcast = _event_builder(Broadcast)
_new_pub = _event_builder(Pub)


__all__ = [
    "NODE_REFERENCE",
    "PROTOCOL",
    "SPEC",
    "Broadcast",
    "CollectorMessage",
    "Dialect",
    "EventBusCommand",
    "EventFieldError",
    "Heartbeat",
    "ProtocolError",
    "Pub",
    "PublisherMessage",
    "SnapshotReply",
    "SnapshotRequest",
    "Sync",
    "SyncEnd",
    "SyncStart",
    "decode_collector",
    "decode_publisher",
    "decode_snapshot_reply",
    "decode_snapshot_request",
    "encode",
    "unpack_data",
]
