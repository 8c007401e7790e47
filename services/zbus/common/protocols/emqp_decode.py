"""eMQP/1.0 decoding: the dialects and ``decode(frames, dialect) -> command``.

Part of the eMQP codec (:mod:`zbus.common.protocols.emqp` is the facade).
:class:`Dialect` lives here because each dialect carries its table of decoders; the
encoder reads only its options.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from dataclasses import fields as dataclass_fields
from typing import Final, NoReturn, TypeAlias

from zbus.common.protocols.emqp_commands import (
    DEFAULT_QUEUE_WEIGHT,
    MAX_QUEUE_WEIGHT,
    MIN_QUEUE_WEIGHT,
    PROTOCOL,
    VERSION,
    Ack,
    Disconnect,
    EmqpCommand,
    Headers,
    Heartbeat,
    Inform,
    Kbye,
    Queues,
    Ready,
    Reply,
    Request,
    Schedule,
    Unschedule,
)
from zbus.common.protocols.emqp_eventmq import (
    HEADERS_BY_FRAME,
    check_call,
    decode_headers,
)
from zbus.common.protocols.errors import (
    FrameCountError,
    FrameValueError,
    NumberRangeError,
    UnknownCommandError,
    ascii_uint,
    expect_count,
    text,
)

__all__ = ["EVENTMQ", "SPEC", "Dialect", "decode"]

VERSION_FRAME: Final = b"eMQP/1.0"  # the protocol frame of every eMQP/1.0 message
# A version frame other than 1.0 is accepted when it is "eMQP/" and a dotted number, and
# recorded on the command: eventmq never checks the frame, and a future minor version
# should reach the service (which may refuse it) rather than be dropped as noise here.
_VERSION_RE: Final = re.compile(rb"eMQP/([0-9]{1,9}(?:\.[0-9]{1,9}){0,3})")


# --------------------------------------------------------------------------- dialect

_Decoder: TypeAlias = Callable[[Sequence[bytes], "Dialect", str], EmqpCommand]


@dataclass(frozen=True, slots=True)
class Dialect:
    """What a peer speaks beyond the spec tables. Chosen by configuration, never guessed.

    Attributes:
        json_bodies: REQUEST, SCHEDULE and UNSCHEDULE bodies must be eventmq's JSON call
            ``["run", {"callable": ..., "path": ..., ...}]``; checked on decode and on encode
            (a malformed body stops a real eventmq jobmanager's loop).
        json_queues: encode INFORM queues as eventmq's JSON ``[[weight, name], ...]``
            rather than the spec's CSV of names. Decoding accepts both in any dialect.
        eventmq_commands: ACK, KBYE, SCHEDULE and UNSCHEDULE are commands; without it they
            are unknown, as in the spec.
    """

    json_bodies: bool = False
    json_queues: bool = False
    eventmq_commands: bool = False
    _decoders: dict[bytes, _Decoder] = field(init=False, repr=False, compare=False, hash=False)

    def __post_init__(self) -> None:
        table = {
            spec.frame: spec.decoder
            for spec in _COMMANDS.values()
            if self.eventmq_commands or not spec.eventmq_only
        }
        object.__setattr__(self, "_decoders", table)


# --------------------------------------------------------------------------- frame helpers


def _bad_text(
    frames: Sequence[bytes], command: str, fields: tuple[tuple[int, str], ...]
) -> NoReturn:
    """Raise the error for the first of ``fields`` that is not UTF-8."""
    for index, what in fields:
        text(PROTOCOL, command, frames, index, what)
    raise AssertionError("a frame failed to decode but decodes now")  # pragma: no cover


def _empty_id(frames: Sequence[bytes], command: str, index: int, what: str) -> FrameValueError:
    return FrameValueError(
        PROTOCOL, f"{what} as non-empty UTF-8 text", command=command, frame=index, got=frames[index]
    )


def _interval(frames: Sequence[bytes], command: str) -> int:
    # eventmq writes str(interval_secs or -1): "-1" stands for "use the cron expression".
    if frames[6] == b"-1":
        return -1
    return ascii_uint(PROTOCOL, command, frames, 6, "interval in seconds (or -1)")


# --------------------------------------------------------------------------- decoders

# A frozen dataclass's __init__ sets each field through object.__setattr__, which costs
# more than decoding the frames does. On the two hottest paths (REQUEST, REPLY) the
# decoder fills the same slots through their descriptors: the result is an ordinary
# instance, equal to and indistinguishable from one built by the constructor.
_new = object.__new__
# Built from fields() so that a field added to either class without updating its decoder
# below fails on first use: the unpacking there no longer matches.
_SET_REQUEST = tuple(getattr(Request, f.name).__set__ for f in dataclass_fields(Request))
_SET_REPLY = tuple(getattr(Reply, f.name).__set__ for f in dataclass_fields(Reply))


def _decode_request(frames: Sequence[bytes], dialect: Dialect, version: str) -> Request:
    if len(frames) != 7:
        expect_count(PROTOCOL, "REQUEST", frames, 7)
    try:
        msgid = frames[3].decode()
        queue = frames[4].decode()
    except UnicodeDecodeError:
        _bad_text(frames, "REQUEST", ((3, "message id"), (4, "queue name")))
    if not msgid:
        raise _empty_id(frames, "REQUEST", 3, "message id")
    headers = HEADERS_BY_FRAME.get(frames[5])
    if headers is None:
        headers = decode_headers(frames, "REQUEST", 5)
    body = frames[6]
    if dialect.json_bodies:
        check_call(body, "REQUEST", 6)
    set_msgid, set_version, set_queue, set_headers, set_body = _SET_REQUEST
    cmd = _new(Request)
    set_msgid(cmd, msgid)
    set_queue(cmd, queue)
    set_headers(cmd, headers)
    set_body(cmd, body)
    set_version(cmd, version)
    return cmd


def _decode_queues(frames: Sequence[bytes]) -> Queues:
    raw = text(PROTOCOL, "INFORM", frames, 4, "queue names")
    if not raw:
        return ()
    if raw[0] == "[":
        # eventmq's JSON list of [weight, name]. A CSV whose first name began with "["
        # cannot be told apart, so the encoder never writes one (emqp_encode._encode_queues).
        expected = "queues as a JSON list of [weight, name] pairs with non-empty names"
        try:
            data = json.loads(raw)
        except (ValueError, RecursionError):
            data = None
        if not isinstance(data, list):
            raise FrameValueError(PROTOCOL, expected, command="INFORM", frame=4, got=frames[4])
        queues: list[tuple[str, int]] = []
        for item in data:
            if (
                not isinstance(item, list)
                or len(item) != 2
                or type(item[0]) is not int
                or not isinstance(item[1], str)
                or not item[1]
            ):
                raise FrameValueError(PROTOCOL, expected, command="INFORM", frame=4, got=frames[4])
            if not MIN_QUEUE_WEIGHT <= item[0] <= MAX_QUEUE_WEIGHT:
                raise NumberRangeError(
                    PROTOCOL,
                    "queue weights in -2**63..2**63-1",
                    command="INFORM",
                    frame=4,
                    got=frames[4],
                )
            queues.append((item[1], item[0]))
        return tuple(queues)
    names = raw.split(",")
    if not all(names):
        raise FrameValueError(
            PROTOCOL,
            "queue names as comma-separated non-empty names",
            command="INFORM",
            frame=4,
            got=frames[4],
        )
    return tuple((name, DEFAULT_QUEUE_WEIGHT) for name in names)


def _msgid(frames: Sequence[bytes], command: str) -> str:
    """Frame 3, the message id every command carries: non-empty text."""
    msgid = text(PROTOCOL, command, frames, 3, "message id")
    if not msgid:
        raise _empty_id(frames, command, 3, "message id")
    return msgid


def _trailing(frames: Sequence[bytes], command: str, index: int, what: str) -> str | None:
    """The optional last frame eventmq appends as text; ``None`` in the spec's layout."""
    return text(PROTOCOL, command, frames, index, what) if len(frames) > index else None


def _decode_inform(frames: Sequence[bytes], dialect: Dialect, version: str) -> Inform:
    if len(frames) not in {5, 6}:
        expect_count(PROTOCOL, "INFORM", frames, 5, 6)
    msgid = _msgid(frames, "INFORM")
    queues = _decode_queues(frames)
    return Inform(msgid, queues, _trailing(frames, "INFORM", 5, "client type"), version=version)


def _decode_reply(frames: Sequence[bytes], dialect: Dialect, version: str) -> Reply:
    n = len(frames)
    if n not in {5, 6}:
        expect_count(PROTOCOL, "REPLY", frames, 5, 6)
    try:
        msgid = frames[3].decode()
        request_id = frames[5].decode() if n == 6 else None
    except UnicodeDecodeError:
        _bad_text(frames, "REPLY", ((3, "message id"), (5, "request id")))
    if not msgid:
        raise _empty_id(frames, "REPLY", 3, "message id")
    if request_id == "":
        raise _empty_id(frames, "REPLY", 5, "request id")
    set_msgid, set_version, set_body, set_request_id = _SET_REPLY
    cmd = _new(Reply)
    set_msgid(cmd, msgid)
    set_body(cmd, frames[4])
    set_request_id(cmd, request_id)
    set_version(cmd, version)
    return cmd


def _decode_heartbeat(frames: Sequence[bytes], dialect: Dialect, version: str) -> Heartbeat:
    if len(frames) not in {4, 5}:
        expect_count(PROTOCOL, "HEARTBEAT", frames, 4, 5)
    msgid = _msgid(frames, "HEARTBEAT")
    return Heartbeat(msgid, _trailing(frames, "HEARTBEAT", 4, "sender time"), version=version)


def _decoder_of_msgid_only(cls: type[Ready | Disconnect | Kbye]) -> _Decoder:
    """The decoder of a command whose only frame after the envelope is its msgid."""
    command = cls.COMMAND

    def decode_msgid_only(frames: Sequence[bytes], dialect: Dialect, version: str) -> EmqpCommand:
        if len(frames) != 4:
            expect_count(PROTOCOL, command, frames, 4)
        # _msgid's two lines inlined: READY comes once per job a worker takes.
        msgid = text(PROTOCOL, command, frames, 3, "message id")
        if not msgid:
            raise _empty_id(frames, command, 3, "message id")
        return cls(msgid, version=version)

    return decode_msgid_only


def _decode_ack(frames: Sequence[bytes], dialect: Dialect, version: str) -> Ack:
    if len(frames) != 5:
        expect_count(PROTOCOL, "ACK", frames, 5)
    msgid = _msgid(frames, "ACK")
    ref_id = text(PROTOCOL, "ACK", frames, 4, "acknowledged message id")
    if not ref_id:
        raise _empty_id(frames, "ACK", 4, "acknowledged message id")
    return Ack(msgid, ref_id, version=version)


def _decode_schedule_frames(
    frames: Sequence[bytes], dialect: Dialect, command: str
) -> tuple[str, str, Headers, int, bytes, str]:
    if len(frames) != 9:
        expect_count(PROTOCOL, command, frames, 9)
    msgid = _msgid(frames, command)
    queue = text(PROTOCOL, command, frames, 4, "queue name")
    headers = decode_headers(frames, command, 5)
    interval = _interval(frames, command)
    body = frames[7]
    if dialect.json_bodies:
        check_call(body, command, 7)
    cron = text(PROTOCOL, command, frames, 8, "cron expression")
    return msgid, queue, headers, interval, body, cron


def _decode_schedule(frames: Sequence[bytes], dialect: Dialect, version: str) -> Schedule:
    msgid, queue, headers, interval, body, cron = _decode_schedule_frames(
        frames, dialect, "SCHEDULE"
    )
    if (interval == -1) != bool(cron):
        raise FrameValueError(
            PROTOCOL,
            "a cron expression when the interval is -1 and none otherwise",
            command="SCHEDULE",
            frame=8,
            got=frames[8],
        )
    return Schedule(msgid, queue, headers, interval, body, cron, version=version)


def _decode_unschedule(frames: Sequence[bytes], dialect: Dialect, version: str) -> Unschedule:
    msgid, queue, headers, interval, body, cron = _decode_schedule_frames(
        frames, dialect, "UNSCHEDULE"
    )
    return Unschedule(msgid, queue, headers, interval, body, cron, version=version)


@dataclass(frozen=True, slots=True)
class _CommandSpec:
    name: str
    frame: bytes
    low: int
    high: int
    decoder: _Decoder
    eventmq_only: bool


_COMMANDS: Final[dict[bytes, _CommandSpec]] = {
    spec.frame: spec
    for spec in (
        _CommandSpec("REQUEST", b"REQUEST", 7, 7, _decode_request, False),
        _CommandSpec("INFORM", b"INFORM", 5, 6, _decode_inform, False),
        _CommandSpec("READY", b"READY", 4, 4, _decoder_of_msgid_only(Ready), False),
        _CommandSpec("REPLY", b"REPLY", 5, 6, _decode_reply, False),
        _CommandSpec("HEARTBEAT", b"HEARTBEAT", 4, 5, _decode_heartbeat, False),
        _CommandSpec("DISCONNECT", b"DISCONNECT", 4, 4, _decoder_of_msgid_only(Disconnect), False),
        _CommandSpec("ACK", b"ACK", 5, 5, _decode_ack, True),
        _CommandSpec("KBYE", b"KBYE", 4, 4, _decoder_of_msgid_only(Kbye), True),
        _CommandSpec("SCHEDULE", b"SCHEDULE", 9, 9, _decode_schedule, True),
        _CommandSpec("UNSCHEDULE", b"UNSCHEDULE", 9, 9, _decode_unschedule, True),
    )
}
_SPEC_NAMES: Final = ", ".join(s.name for s in _COMMANDS.values() if not s.eventmq_only)
_EVENTMQ_NAMES: Final = ", ".join(s.name for s in _COMMANDS.values() if s.eventmq_only)

#: The eMQP/1.0 tables as written.
SPEC: Final = Dialect()
#: eventmq 0.3.13 (see PEERS.md): JSON bodies and queues, ACK/KBYE/SCHEDULE/UNSCHEDULE.
EVENTMQ: Final = Dialect(json_bodies=True, json_queues=True, eventmq_commands=True)


def decode(frames: Sequence[bytes], dialect: Dialect = SPEC) -> EmqpCommand:
    """Decode one eMQP message (the frames after the ROUTER identity).

    Args:
        frames: the message's frames as ``bytes`` (pyzmq's ``recv_multipart()``).
        dialect: what the peer speaks; :data:`SPEC` unless configured otherwise.

    Raises:
        ProtocolError: a :class:`FrameCountError`, :class:`UnknownCommandError` or
            :class:`FrameValueError` naming the command, the frame and what was expected.
    """
    # Fast path: the envelope every well-formed 1.0 message has.
    if len(frames) >= 4 and not frames[0] and frames[1] == VERSION_FRAME:
        decoder = dialect._decoders.get(frames[2])
        if decoder is not None:
            return decoder(frames, dialect, VERSION)
    return _decode_envelope(frames, dialect)


def _decode_envelope(frames: Sequence[bytes], dialect: Dialect) -> EmqpCommand:
    """Check the envelope frame by frame, so the error names the first thing wrong."""
    n = len(frames)
    spec = _COMMANDS.get(frames[2]) if n >= 3 else None
    name = spec.name if spec is not None else None
    if n < 4:
        if spec is not None:
            expect_count(PROTOCOL, spec.name, frames, spec.low, spec.high)
        raise FrameCountError(PROTOCOL, "at least 4 frames", got=f"{n} frames")
    if frames[0]:
        raise FrameValueError(PROTOCOL, "an empty frame", command=name, frame=0, got=frames[0])
    match = _VERSION_RE.fullmatch(frames[1])
    if match is None:
        raise FrameValueError(
            PROTOCOL,
            "the protocol version b'eMQP/1.0' (or b'eMQP/' and another version number)",
            command=name,
            frame=1,
            got=frames[1],
        )
    decoder = dialect._decoders.get(frames[2])
    if decoder is None:
        known = _SPEC_NAMES
        if not dialect.eventmq_commands:
            known += f" ({_EVENTMQ_NAMES} need the eventmq_commands dialect option)"
        raise UnknownCommandError(PROTOCOL, f"one of {known}", frame=2, got=frames[2])
    return decoder(frames, dialect, match.group(1).decode("ascii"))
