"""DBP, the Core Catalog Service protocol (Distributive Broker Protocol): sans-I/O codec.

Every DBP command is ``[b"", command, time, body...]`` (seed 004, "Specifications"): an
empty frame 0 that the spec lists as part of every command, a short emoticon command
frame, the sender's epoch time, then the body.

=============  ===========  =========================================================
command        frame 1      body (frame 3 on)
=============  ===========  =========================================================
REQUEST        ``u_U``      one frame: a service name, or ``""`` / ``"*"`` for all
REPLY          ``o_O``      one frame: a JSON object
REGISTRATION   ``UwU``      one frame: a JSON object describing the service
UPDATE         ``UoU``      one frame: a JSON object of changed values
APPROVED       ``OwO``      optional: a JSON object of configuration changes
DENIED         ``(O_O)``    zero or more frames, one reason each (Hermes: ``OmO``)
HEARTBEAT      ``<3``       one frame: the service name
DISCONNECT     ``</3``      none
AWK            ``u.u``      none
=============  ===========  =========================================================

Decisions where the spec is silent or ambiguous (reasons in ``docs/protocols/dbp.md``):

- The time frame has three encodings (:class:`TimeEncoding`). Decoding accepts all of
  them in every dialect and records which one it saw, so that a service can answer a
  peer in kind. zbus's own default is ASCII decimal text.
- Times must be finite and not negative.
- JSON bodies are strict UTF-8 JSON objects (no NaN, no Infinity, no other top-level
  value).
- Decoding accepts both DENIED tokens in every dialect: they cannot be confused with
  each other or with any other command.
- A single empty frame 3 means "no body" wherever a body is optional (APPROVED,
  DENIED, DISCONNECT, AWK), because Hermes always sends a body frame and sends ``b""``
  when it has nothing to say.
- HEARTBEAT is 4 frames (the spec's frame list; its "3 frames" is the count it gives
  DISCONNECT and AWK). A 3-frame HEARTBEAT is accepted as one without a name.

HEARTBEAT and DISCONNECT also travel as single UDP datagrams
(:func:`encode_datagram` / :func:`decode_datagram`): the same frames, each prefixed by
its length as 2 bytes in network order, at most :data:`MAX_DATAGRAM` bytes in all.
"""

from __future__ import annotations

import enum
import json
import math
import struct
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from zbus.common.protocols.errors import (
    FrameCountError,
    FrameValueError,
    UnknownCommandError,
    expect_count,
    text,
)

__all__ = [
    "HERMES",
    "MAX_DATAGRAM",
    "REGISTRATION_FIELDS",
    "SPEC",
    "Approved",
    "Awk",
    "BeaconFormat",
    "DBPCommand",
    "Denied",
    "Dialect",
    "Disconnect",
    "Heartbeat",
    "InfoReply",
    "InfoRequest",
    "JSONObject",
    "Registration",
    "TimeEncoding",
    "Update",
    "decode",
    "decode_datagram",
    "encode",
    "encode_datagram",
    "missing_registration_fields",
]

PROTOCOL = "dbp"
DATAGRAM = "dbp/udp"

# Command frames (seed 004, frame 1 of each command).
INFO_REQUEST = b"u_U"
INFO_REPLY = b"o_O"
REGISTRATION = b"UwU"
UPDATE = b"UoU"
APPROVED = b"OwO"
DENIED = b"(O_O)"
DENIED_HERMES = b"OmO"
HEARTBEAT = b"<3"
DISCONNECT = b"</3"
AWK = b"u.u"

#: Largest UDP datagram zbus sends or accepts: an Ethernet MTU of 1,500 bytes less
#: IPv4/IPv6 and UDP headers and some tunnel overhead, so a datagram is never fragmented.
MAX_DATAGRAM = 1400

JSONObject = dict[str, Any]


class TimeEncoding(enum.Enum):
    """How the time frame (frame 2) carries the epoch time.

    The spec only says "time (current epoch time)".
    """

    #: Decimal text such as ``b"1763800000.25"``: digits and at most one ``.``.
    ASCII = "ascii"
    #: 4 bytes, IEEE 754 single precision, little-endian (``struct`` ``'<f'``). Hermes
    #: packs with native ``'f'``, which is little-endian on the x86 and ARM machines it
    #: runs on; zbus always reads and writes little-endian so the bytes do not depend on
    #: the host. A float32 epoch time has a resolution of 128 s in the 2020s.
    FLOAT32 = "float32"
    #: 8 bytes, IEEE 754 double precision, big-endian (``'>d'``, network order).
    FLOAT64 = "float64"


class BeaconFormat(enum.Enum):
    """Which UDP beacon a dialect announces the catalog with (see ``beacon.py``)."""

    #: zbus's binary beacon: magic, version, instance UUID, TCP port, host.
    ZBUS = "zbus"
    #: Hermes's ``b"SHALOM <tcp port>"``.
    SHALOM = "shalom"


@dataclass(frozen=True, slots=True)
class Dialect:
    """How zbus writes DBP for one kind of peer. Decoding is the same in every dialect.

    Attributes:
        denied_token: frame 1 of DENIED: ``b"(O_O)"`` (spec) or ``b"OmO"`` (Hermes).
        time_encoding: the time encoding of commands whose ``time_encoding`` is None.
        empty_body_frame: send ``b""`` as frame 3 when a command has no body. Hermes
            needs it: its receiver drops any message shorter than
            ``[command, time, body]``.
        json_separators: ``json.dumps`` separators; Hermes uses Python's default.
        json_ensure_ascii: escape non-ASCII text in JSON bodies, as Hermes does.
        beacon: the beacon format announced and listened for.
    """

    denied_token: bytes = DENIED
    time_encoding: TimeEncoding = TimeEncoding.ASCII
    empty_body_frame: bool = False
    json_separators: tuple[str, str] = (",", ":")
    json_ensure_ascii: bool = False
    beacon: BeaconFormat = BeaconFormat.ZBUS

    def __post_init__(self) -> None:
        if self.denied_token not in (DENIED, DENIED_HERMES):
            raise ValueError(f"denied_token must be {DENIED!r} or {DENIED_HERMES!r}")


#: The spec as written, with ASCII decimal times and compact JSON.
SPEC = Dialect()
#: lnestelroad/Hermes (PyPI Hermes-lnestelroad 1.0.2), the spec editor's implementation.
HERMES = Dialect(
    denied_token=DENIED_HERMES,
    time_encoding=TimeEncoding.FLOAT32,
    empty_body_frame=True,
    json_separators=(", ", ": "),
    json_ensure_ascii=True,
    beacon=BeaconFormat.SHALOM,
)


# Every command carries ``time`` (seconds since the epoch) and ``time_encoding``.
# ``time_encoding=None`` means "the dialect's default" when encoding; decoding always
# fills in the encoding it saw, so a reply can use ``time_encoding=request.time_encoding``.


@dataclass(frozen=True, slots=True)
class InfoRequest:
    """C: REQUEST information about one service, or the list of active services.

    ``query`` is a service name; ``""`` or ``"*"`` asks for every active service (the
    spec: "either a specified services name or a list of currently active services").
    It must be printable text (spec: "printable string").
    """

    query: str
    time: float
    time_encoding: TimeEncoding | None = None

    @property
    def wants_list(self) -> bool:
        """True when the request asks for the list of all active services."""
        return self.query in ("", "*")


@dataclass(frozen=True, slots=True)
class InfoReply:
    """B: REPLY to an information request with a JSON object."""

    info: JSONObject
    time: float
    time_encoding: TimeEncoding | None = None


@dataclass(frozen=True, slots=True)
class Registration:
    """S: REGISTRATION with the service's description as a JSON object.

    The codec accepts any object; which keys a registration needs is the catalog's
    business (see :func:`missing_registration_fields`).
    """

    info: JSONObject
    time: float
    time_encoding: TimeEncoding | None = None


@dataclass(frozen=True, slots=True)
class Update:
    """S: UPDATE of some registered values, as a JSON object."""

    changes: JSONObject
    time: float
    time_encoding: TimeEncoding | None = None


@dataclass(frozen=True, slots=True)
class Approved:
    """B: APPROVED, with optional configuration changes (``{}`` for none)."""

    config: JSONObject
    time: float
    time_encoding: TimeEncoding | None = None


@dataclass(frozen=True, slots=True)
class Denied:
    """B: DENIED, with zero or more non-empty reasons, one frame each."""

    reasons: tuple[str, ...]
    time: float
    time_encoding: TimeEncoding | None = None


@dataclass(frozen=True, slots=True)
class Heartbeat:
    """S or B: HEARTBEAT naming the sending service."""

    service: str
    time: float
    time_encoding: TimeEncoding | None = None


@dataclass(frozen=True, slots=True)
class Disconnect:
    """S or B: DISCONNECT; the receiver sends nothing more to the sender."""

    time: float
    time_encoding: TimeEncoding | None = None


@dataclass(frozen=True, slots=True)
class Awk:
    """B: AWK, the acknowledgement of an UPDATE (Hermes calls it "Acknowledged")."""

    time: float
    time_encoding: TimeEncoding | None = None


DBPCommand = (
    InfoRequest
    | InfoReply
    | Registration
    | Update
    | Approved
    | Denied
    | Heartbeat
    | Disconnect
    | Awk
)

#: The service fields the spec requires "at a minimum" ("name, ip address, port,
#: function, and heartbeat timing"), under the keys zbus registers them with.
REGISTRATION_FIELDS = ("name", "ip", "port", "function", "heartbeat_interval")


def missing_registration_fields(info: Mapping[str, Any]) -> tuple[str, ...]:
    """The keys of :data:`REGISTRATION_FIELDS` that ``info`` lacks or sets to null.

    A Hermes registration (``name``, ``interfaces``, ``reg_time``, ``topics``) lacks all
    but ``name``; whether to approve it anyway is the catalog's decision.
    """
    return tuple(key for key in REGISTRATION_FIELDS if info.get(key) is None)


# --------------------------------------------------------------------------- time frame

_F32 = struct.Struct("<f")
_F64 = struct.Struct(">d")
_INF = math.inf
_ASCII = TimeEncoding.ASCII
_FLOAT32 = TimeEncoding.FLOAT32
_FLOAT64 = TimeEncoding.FLOAT64


def _encode_time(command: str, value: float, encoding: TimeEncoding) -> bytes:
    if not 0.0 <= value < _INF:
        raise FrameValueError(
            PROTOCOL, "a finite, non-negative epoch time", command=command, got=value
        )
    if encoding is _ASCII:
        # repr() is the shortest text that reads back as the same double. abs() turns
        # -0.0 into 0.0, since a sign is not a digit.
        out = repr(abs(value))
        if "e" in out:
            # Very large or very small: write the same digits without an exponent.
            out = format(Decimal(out), "f")
        return out.encode("ascii")
    if encoding is _FLOAT32:
        try:
            return _F32.pack(value)
        except OverflowError:
            raise FrameValueError(
                PROTOCOL, "a time that fits a float32", command=command, got=value
            ) from None
    return _F64.pack(value)


def _decode_time(command: str, raw: bytes) -> tuple[float, TimeEncoding]:
    # ASCII is tried first: a frame of digits with at most one "." is ASCII even when it
    # is 4 or 8 bytes long. The float32 or float64 values whose bytes are all digits and
    # dots are below 0.001, so no real epoch time is lost to this rule.
    if raw.replace(b".", b"", 1).isdigit():
        value = float(raw)
        encoding = _ASCII
    elif len(raw) == 4:
        value = _F32.unpack(raw)[0]
        encoding = _FLOAT32
    elif len(raw) == 8:
        value = _F64.unpack(raw)[0]
        encoding = _FLOAT64
    else:
        raise FrameValueError(
            PROTOCOL,
            "time as ASCII decimal, a 4-byte float32 or an 8-byte float64",
            command=command,
            frame=2,
            got=raw,
        )
    if not 0.0 <= value < _INF:
        raise FrameValueError(
            PROTOCOL, "a finite, non-negative epoch time", command=command, frame=2, got=raw
        )
    return value, encoding


# --------------------------------------------------------------------------- bodies


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _decode_json(command: str, frames: Sequence[bytes], index: int, what: str) -> JSONObject:
    raw = frames[index]
    try:
        # Decode the UTF-8 first: json.loads(bytes) would also accept UTF-16 and UTF-32.
        body = bytes(raw).decode("utf-8")
        value = json.loads(body, parse_constant=_reject_constant)
        if "\\u" in body:
            # An escape can smuggle in a lone surrogate, which is not Unicode text and
            # could not be written back as UTF-8.
            json.dumps(value, ensure_ascii=False).encode("utf-8")
    except (ValueError, RecursionError):
        # ValueError covers bad UTF-8, bad JSON, NaN/Infinity and integers beyond
        # Python's digit limit; RecursionError covers absurd nesting.
        raise FrameValueError(
            PROTOCOL, f"{what} as a UTF-8 JSON object", command=command, frame=index, got=raw
        ) from None
    if not isinstance(value, dict):
        raise FrameValueError(
            PROTOCOL, f"{what} as a JSON object", command=command, frame=index, got=raw
        )
    return value


def _encode_json(command: str, value: JSONObject, dialect: Dialect) -> bytes:
    if not isinstance(value, dict):
        raise FrameValueError(PROTOCOL, "a JSON object (dict)", command=command, got=value)
    try:
        return json.dumps(
            value,
            separators=dialect.json_separators,
            ensure_ascii=dialect.json_ensure_ascii,
            allow_nan=False,
        ).encode("utf-8")
    except (TypeError, ValueError, RecursionError) as exc:
        raise FrameValueError(
            PROTOCOL, f"a body that is valid JSON ({exc})", command=command, got=value
        ) from None


def _encode_text(command: str, value: str, what: str) -> bytes:
    try:
        return value.encode("utf-8")
    except UnicodeEncodeError:
        raise FrameValueError(
            PROTOCOL, f"{what} encodable as UTF-8", command=command, got=value
        ) from None


def _no_body(command: str, frames: Sequence[bytes]) -> None:
    """Frames 3+ of a command without a body: nothing, or Hermes's single ``b""``."""
    if len(frames) > 3:
        expect_count(PROTOCOL, command, frames, 3, 4)
        if frames[3]:
            raise FrameValueError(
                PROTOCOL, "no body (or one empty frame)", command=command, frame=3, got=frames[3]
            )


# --------------------------------------------------------------------------- encoding


def encode(cmd: DBPCommand, dialect: Dialect = SPEC) -> list[bytes]:
    """Frame ``cmd`` for the wire, frame 0 (empty) included.

    Raises:
        FrameValueError: a field cannot be encoded (a negative or non-finite time, a
            time too large for float32, a body that is not a JSON object, a query that
            is not printable, an empty reason, text that is not valid Unicode).
    """
    # HEARTBEAT is the one command sent many times a second; keep its path short.
    if type(cmd) is Heartbeat:
        try:
            name = cmd.service.encode("utf-8")
        except UnicodeEncodeError:
            name = _encode_text("HEARTBEAT", cmd.service, "service name")
        when = cmd.time
        encoding = cmd.time_encoding or dialect.time_encoding
        if encoding is _ASCII and 1e-4 <= when < 1e16:
            # In this range repr() writes plain decimal, as _encode_time would.
            stamp = repr(when).encode("ascii")
        else:
            stamp = _encode_time("HEARTBEAT", when, encoding)
        return [b"", HEARTBEAT, stamp, name]
    encoder = _ENCODERS.get(type(cmd))
    if encoder is None:
        raise TypeError(f"not a DBP command: {cmd!r}")
    return encoder(cmd, dialect)


def _head(command: bytes, name: str, cmd: DBPCommand, dialect: Dialect) -> list[bytes]:
    return [
        b"",
        command,
        _encode_time(name, cmd.time, cmd.time_encoding or dialect.time_encoding),
    ]


def _enc_info_request(cmd: InfoRequest, dialect: Dialect) -> list[bytes]:
    if not cmd.query.isprintable():
        raise FrameValueError(PROTOCOL, "a printable query", command="REQUEST", got=cmd.query)
    return [
        *_head(INFO_REQUEST, "REQUEST", cmd, dialect),
        _encode_text("REQUEST", cmd.query, "query"),
    ]


def _enc_info_reply(cmd: InfoReply, dialect: Dialect) -> list[bytes]:
    return [*_head(INFO_REPLY, "REPLY", cmd, dialect), _encode_json("REPLY", cmd.info, dialect)]


def _enc_registration(cmd: Registration, dialect: Dialect) -> list[bytes]:
    body = _encode_json("REGISTRATION", cmd.info, dialect)
    return [*_head(REGISTRATION, "REGISTRATION", cmd, dialect), body]


def _enc_update(cmd: Update, dialect: Dialect) -> list[bytes]:
    return [*_head(UPDATE, "UPDATE", cmd, dialect), _encode_json("UPDATE", cmd.changes, dialect)]


def _enc_approved(cmd: Approved, dialect: Dialect) -> list[bytes]:
    frames = _head(APPROVED, "APPROVED", cmd, dialect)
    if cmd.config:
        frames.append(_encode_json("APPROVED", cmd.config, dialect))
    elif not isinstance(cmd.config, dict):
        raise FrameValueError(PROTOCOL, "a JSON object (dict)", command="APPROVED", got=cmd.config)
    elif dialect.empty_body_frame:
        frames.append(b"")
    return frames


def _enc_denied(cmd: Denied, dialect: Dialect) -> list[bytes]:
    frames = _head(dialect.denied_token, "DENIED", cmd, dialect)
    for reason in cmd.reasons:
        if not reason:
            # An empty frame 3 means "no reasons" (see the module docstring).
            raise FrameValueError(PROTOCOL, "non-empty reasons", command="DENIED", got=reason)
        frames.append(_encode_text("DENIED", reason, "reason"))
    if not cmd.reasons and dialect.empty_body_frame:
        frames.append(b"")
    return frames


def _enc_bodiless(command: bytes, name: str) -> Callable[[Disconnect | Awk, Dialect], list[bytes]]:
    def enc(cmd: Disconnect | Awk, dialect: Dialect) -> list[bytes]:
        frames = _head(command, name, cmd, dialect)
        if dialect.empty_body_frame:
            frames.append(b"")
        return frames

    return enc


_ENCODERS: dict[type, Callable[[Any, Dialect], list[bytes]]] = {
    InfoRequest: _enc_info_request,
    InfoReply: _enc_info_reply,
    Registration: _enc_registration,
    Update: _enc_update,
    Approved: _enc_approved,
    Denied: _enc_denied,
    Disconnect: _enc_bodiless(DISCONNECT, "DISCONNECT"),
    Awk: _enc_bodiless(AWK, "AWK"),
}


# --------------------------------------------------------------------------- decoding


def decode(frames: Sequence[bytes], dialect: Dialect = SPEC) -> DBPCommand:
    """Decode one DBP command from ``frames`` (frame 0 is the empty frame).

    Decoding is the same in every dialect: both DENIED tokens, every time encoding and
    Hermes's empty body frame are accepted; ``dialect`` keeps the codecs' call shape.

    Raises:
        ProtocolError: ``frames`` is not a DBP command.
    """
    if len(frames) < 3:
        raise FrameCountError(
            PROTOCOL, "at least 3 frames: empty, command, time", got=f"{len(frames)} frames"
        )
    if frames[0]:
        raise FrameValueError(PROTOCOL, "an empty frame 0", frame=0, got=frames[0])
    command = frames[1]
    # HEARTBEAT first, inline: it is the hot path.
    if command == HEARTBEAT:
        n = len(frames)
        if n == 4:
            raw = frames[3]
            try:
                service = raw.decode("utf-8")
            except UnicodeDecodeError:
                service = text(PROTOCOL, "HEARTBEAT", frames, 3, "service name")
        elif n == 3:
            service = ""
        else:
            raise FrameCountError(PROTOCOL, "3 or 4 frames", command="HEARTBEAT", got=f"{n} frames")
        raw = frames[2]
        if raw.replace(b".", b"", 1).isdigit() and (when := float(raw)) < _INF:
            encoding = _ASCII
        else:
            when, encoding = _decode_time("HEARTBEAT", raw)
        # Same as Heartbeat(service, when, encoding), at half the cost: a frozen
        # dataclass's __init__ sets each field through object.__setattr__.
        heartbeat = _new(Heartbeat)
        _set_service(heartbeat, service)
        _set_time(heartbeat, when)
        _set_time_encoding(heartbeat, encoding)
        return heartbeat
    decoder = _DECODERS.get(command)
    if decoder is None:
        raise UnknownCommandError(
            PROTOCOL,
            "a DBP command (u_U, o_O, UwU, UoU, OwO, (O_O), OmO, <3, </3, u.u)",
            frame=1,
            got=command,
        )
    return decoder(frames)


def _dec_info_request(frames: Sequence[bytes]) -> InfoRequest:
    expect_count(PROTOCOL, "REQUEST", frames, 4)
    when, encoding = _decode_time("REQUEST", frames[2])
    query = text(PROTOCOL, "REQUEST", frames, 3, "query")
    if not query.isprintable():
        raise FrameValueError(
            PROTOCOL, "query as printable text", command="REQUEST", frame=3, got=frames[3]
        )
    return InfoRequest(query, when, encoding)


def _dec_info_reply(frames: Sequence[bytes]) -> InfoReply:
    expect_count(PROTOCOL, "REPLY", frames, 4)
    when, encoding = _decode_time("REPLY", frames[2])
    return InfoReply(_decode_json("REPLY", frames, 3, "information"), when, encoding)


def _dec_registration(frames: Sequence[bytes]) -> Registration:
    expect_count(PROTOCOL, "REGISTRATION", frames, 4)
    when, encoding = _decode_time("REGISTRATION", frames[2])
    info = _decode_json("REGISTRATION", frames, 3, "service information")
    return Registration(info, when, encoding)


def _dec_update(frames: Sequence[bytes]) -> Update:
    expect_count(PROTOCOL, "UPDATE", frames, 4)
    when, encoding = _decode_time("UPDATE", frames[2])
    return Update(_decode_json("UPDATE", frames, 3, "updated values"), when, encoding)


def _dec_approved(frames: Sequence[bytes]) -> Approved:
    expect_count(PROTOCOL, "APPROVED", frames, 3, 4)
    when, encoding = _decode_time("APPROVED", frames[2])
    config: JSONObject = {}
    if len(frames) == 4 and frames[3]:
        config = _decode_json("APPROVED", frames, 3, "configuration changes")
    return Approved(config, when, encoding)


def _dec_denied(frames: Sequence[bytes]) -> Denied:
    when, encoding = _decode_time("DENIED", frames[2])
    if len(frames) == 4 and not frames[3]:
        return Denied((), when, encoding)
    reasons = []
    for index in range(3, len(frames)):
        if not frames[index]:
            raise FrameValueError(
                PROTOCOL, "a non-empty reason", command="DENIED", frame=index, got=frames[index]
            )
        reasons.append(text(PROTOCOL, "DENIED", frames, index, "reason"))
    return Denied(tuple(reasons), when, encoding)


def _dec_disconnect(frames: Sequence[bytes]) -> Disconnect:
    _no_body("DISCONNECT", frames)
    when, encoding = _decode_time("DISCONNECT", frames[2])
    return Disconnect(when, encoding)


def _dec_awk(frames: Sequence[bytes]) -> Awk:
    _no_body("AWK", frames)
    when, encoding = _decode_time("AWK", frames[2])
    return Awk(when, encoding)


_new = object.__new__
_set_service = Heartbeat.__dict__["service"].__set__
_set_time = Heartbeat.__dict__["time"].__set__
_set_time_encoding = Heartbeat.__dict__["time_encoding"].__set__

_DECODERS: dict[bytes, Callable[[Sequence[bytes]], DBPCommand]] = {
    INFO_REQUEST: _dec_info_request,
    INFO_REPLY: _dec_info_reply,
    REGISTRATION: _dec_registration,
    UPDATE: _dec_update,
    APPROVED: _dec_approved,
    DENIED: _dec_denied,
    DENIED_HERMES: _dec_denied,
    DISCONNECT: _dec_disconnect,
    AWK: _dec_awk,
}


# --------------------------------------------------------------------------- UDP datagrams
#
# The spec sends heartbeats over "raw UDP sockets" but gives them no datagram layout.
# zbus puts the command's frames in one datagram, each frame prefixed by its length as
# 2 bytes in network order: the frames stay exactly those of the TCP command, and a
# datagram that is cut short or has trailing bytes is detected.


_U16 = struct.Struct(">H")
_pack_u16 = _U16.pack
_unpack_u16 = _U16.unpack_from


def encode_datagram(cmd: Heartbeat | Disconnect, dialect: Dialect = SPEC) -> bytes:
    """One UDP datagram carrying a HEARTBEAT or DISCONNECT.

    Raises:
        FrameValueError: ``cmd`` cannot be encoded, or the datagram would exceed
            :data:`MAX_DATAGRAM` bytes (a very long service name).
    """
    if type(cmd) is not Heartbeat and type(cmd) is not Disconnect:
        raise TypeError(f"only HEARTBEAT and DISCONNECT travel over UDP, not {cmd!r}")
    parts: list[bytes] = []
    for frame in encode(cmd, dialect):
        parts += (_pack_u16(len(frame)), frame)
    data = b"".join(parts)
    if len(data) > MAX_DATAGRAM:
        raise FrameValueError(
            DATAGRAM,
            f"a datagram of at most {MAX_DATAGRAM} bytes",
            command=_name(cmd),
            got=f"{len(data)} bytes",
        )
    return data


def decode_datagram(data: bytes, dialect: Dialect = SPEC) -> Heartbeat | Disconnect:
    """Decode one UDP datagram into a HEARTBEAT or DISCONNECT.

    Raises:
        ProtocolError: ``data`` is not a well-framed HEARTBEAT or DISCONNECT datagram.
    """
    data = bytes(data)
    size = len(data)
    if size > MAX_DATAGRAM:
        raise FrameValueError(
            DATAGRAM, f"a datagram of at most {MAX_DATAGRAM} bytes", got=f"{size} bytes"
        )
    frames: list[bytes] = []
    offset = 0
    while offset < size:
        if offset + 2 > size:
            raise FrameValueError(
                DATAGRAM,
                "a 2-byte frame length",
                frame=len(frames),
                got=f"1 byte left at offset {offset}",
            )
        end = offset + 2 + _unpack_u16(data, offset)[0]
        if end > size:
            raise FrameValueError(
                DATAGRAM,
                f"{end - offset - 2} bytes of frame data",
                frame=len(frames),
                got=f"{size - offset - 2} bytes left",
            )
        frames.append(data[offset + 2 : end])
        offset = end
    # The frames after the length prefixes are an ordinary DBP command.
    cmd = decode(frames, dialect)
    if type(cmd) is not Heartbeat and type(cmd) is not Disconnect:
        raise UnknownCommandError(
            DATAGRAM,
            "HEARTBEAT or DISCONNECT (no other command travels over UDP)",
            command=_name(cmd),
            frame=1,
            got=frames[1],
        )
    return cmd


_NAMES: dict[type, str] = {
    InfoRequest: "REQUEST",
    InfoReply: "REPLY",
    Registration: "REGISTRATION",
    Update: "UPDATE",
    Approved: "APPROVED",
    Denied: "DENIED",
    Heartbeat: "HEARTBEAT",
    Disconnect: "DISCONNECT",
    Awk: "AWK",
}


def _name(cmd: object) -> str:
    return _NAMES.get(type(cmd), type(cmd).__name__)
