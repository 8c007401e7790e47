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

The codec is split by what each part does; this module re-exports all of it:

- :mod:`~zbus.common.protocols.dbp_commands`: the command dataclasses, their union
  :data:`DBPCommand`, :class:`Dialect` with :data:`SPEC` and :data:`HERMES`, and the
  command frames.
- :mod:`~zbus.common.protocols.dbp_frames`: the time frame and the JSON and text bodies.
- this module: :func:`encode`, :func:`decode` and the UDP datagrams.

HEARTBEAT and DISCONNECT also travel as single UDP datagrams
(:func:`encode_datagram` / :func:`decode_datagram`): the same frames, each prefixed by
its length as 2 bytes in network order, at most :data:`MAX_DATAGRAM` bytes in all.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable, Sequence
from typing import Any

from zbus.common.protocols.dbp_commands import (
    APPROVED,
    AWK,
    DATAGRAM,
    DENIED,
    DENIED_HERMES,
    DISCONNECT,
    HEARTBEAT,
    HEARTBEAT_INTERVAL_RANGE,
    HEARTBEAT_MISSES_RANGE,
    HERMES,
    INFO_REPLY,
    INFO_REQUEST,
    MAX_DATAGRAM,
    MAX_INFO_BYTES,
    MAX_NAME_CHARS,
    PORT_RANGE,
    PROTOCOL,
    REGISTRATION,
    REGISTRATION_ALIASES,
    REGISTRATION_FIELDS,
    SPEC,
    UPDATE,
    Approved,
    Awk,
    BeaconFormat,
    DBPCommand,
    Denied,
    Dialect,
    Disconnect,
    Heartbeat,
    InfoReply,
    InfoRequest,
    JSONObject,
    Registration,
    TimeEncoding,
    Update,
    missing_registration_fields,
    name_of,
)
from zbus.common.protocols.dbp_frames import (
    MAX_JSON_FRAME_BYTES,
    decode_json,
    decode_time,
    encode_json,
    encode_text,
    encode_time,
    no_body,
)
from zbus.common.protocols.errors import (
    FrameCountError,
    FrameValueError,
    UnknownCommandError,
    expect_count,
    text,
)

__all__ = [
    "HEARTBEAT_INTERVAL_RANGE",
    "HEARTBEAT_MISSES_RANGE",
    "HERMES",
    "MAX_DATAGRAM",
    "MAX_INFO_BYTES",
    "MAX_JSON_FRAME_BYTES",
    "MAX_NAME_CHARS",
    "PORT_RANGE",
    "REGISTRATION_ALIASES",
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
            name = encode_text("HEARTBEAT", cmd.service, "service name")
        when = cmd.time
        encoding = cmd.time_encoding or dialect.time_encoding
        if encoding is TimeEncoding.ASCII and 1e-4 <= when < 1e16:
            # In this range repr() writes plain decimal, as encode_time would.
            stamp = repr(when).encode("ascii")
        else:
            stamp = encode_time("HEARTBEAT", when, encoding)
        return [b"", HEARTBEAT, stamp, name]
    encoder = _ENCODERS.get(type(cmd))
    if encoder is None:
        raise TypeError(f"not a DBP command: {cmd!r}")
    return encoder(cmd, dialect)


def _head(command: bytes, name: str, cmd: DBPCommand, dialect: Dialect) -> list[bytes]:
    return [
        b"",
        command,
        encode_time(name, cmd.time, cmd.time_encoding or dialect.time_encoding),
    ]


def _enc_info_request(cmd: InfoRequest, dialect: Dialect) -> list[bytes]:
    if not cmd.query.isprintable():
        raise FrameValueError(PROTOCOL, "a printable query", command="REQUEST", got=cmd.query)
    return [
        *_head(INFO_REQUEST, "REQUEST", cmd, dialect),
        encode_text("REQUEST", cmd.query, "query"),
    ]


def _enc_info_reply(cmd: InfoReply, dialect: Dialect) -> list[bytes]:
    return [*_head(INFO_REPLY, "REPLY", cmd, dialect), encode_json("REPLY", cmd.info, dialect)]


def _enc_registration(cmd: Registration, dialect: Dialect) -> list[bytes]:
    body = encode_json("REGISTRATION", cmd.info, dialect)
    return [*_head(REGISTRATION, "REGISTRATION", cmd, dialect), body]


def _enc_update(cmd: Update, dialect: Dialect) -> list[bytes]:
    return [*_head(UPDATE, "UPDATE", cmd, dialect), encode_json("UPDATE", cmd.changes, dialect)]


def _enc_approved(cmd: Approved, dialect: Dialect) -> list[bytes]:
    frames = _head(APPROVED, "APPROVED", cmd, dialect)
    if cmd.config:
        frames.append(encode_json("APPROVED", cmd.config, dialect))
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
        frames.append(encode_text("DENIED", reason, "reason"))
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
        if raw.replace(b".", b"", 1).isdigit() and (when := float(raw)) < math.inf:
            encoding = TimeEncoding.ASCII
        else:
            when, encoding = decode_time("HEARTBEAT", raw)
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
    when, encoding = decode_time("REQUEST", frames[2])
    query = text(PROTOCOL, "REQUEST", frames, 3, "query")
    if not query.isprintable():
        raise FrameValueError(
            PROTOCOL, "query as printable text", command="REQUEST", frame=3, got=frames[3]
        )
    return InfoRequest(query, when, encoding)


def _json_body_decoder(
    cls: type[InfoReply | Registration | Update], command: str, what: str
) -> Callable[[Sequence[bytes]], DBPCommand]:
    """The decoder of a command whose body is one JSON object (frame 3)."""

    def decode_json_body(frames: Sequence[bytes]) -> DBPCommand:
        expect_count(PROTOCOL, command, frames, 4)
        when, encoding = decode_time(command, frames[2])
        return cls(decode_json(command, frames, 3, what), when, encoding)

    return decode_json_body


def _no_body_decoder(
    cls: type[Disconnect | Awk], command: str
) -> Callable[[Sequence[bytes]], DBPCommand]:
    """The decoder of a command with no body (or Hermes's one empty body frame)."""

    def decode_no_body(frames: Sequence[bytes]) -> DBPCommand:
        no_body(command, frames)
        when, encoding = decode_time(command, frames[2])
        return cls(when, encoding)

    return decode_no_body


def _dec_approved(frames: Sequence[bytes]) -> Approved:
    expect_count(PROTOCOL, "APPROVED", frames, 3, 4)
    when, encoding = decode_time("APPROVED", frames[2])
    config: JSONObject = {}
    if len(frames) == 4 and frames[3]:
        config = decode_json("APPROVED", frames, 3, "configuration changes")
    return Approved(config, when, encoding)


def _dec_denied(frames: Sequence[bytes]) -> Denied:
    when, encoding = decode_time("DENIED", frames[2])
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


_new = object.__new__
_set_service = Heartbeat.__dict__["service"].__set__
_set_time = Heartbeat.__dict__["time"].__set__
_set_time_encoding = Heartbeat.__dict__["time_encoding"].__set__

_DECODERS: dict[bytes, Callable[[Sequence[bytes]], DBPCommand]] = {
    INFO_REQUEST: _dec_info_request,
    INFO_REPLY: _json_body_decoder(InfoReply, "REPLY", "information"),
    REGISTRATION: _json_body_decoder(Registration, "REGISTRATION", "service information"),
    UPDATE: _json_body_decoder(Update, "UPDATE", "updated values"),
    APPROVED: _dec_approved,
    DENIED: _dec_denied,
    DENIED_HERMES: _dec_denied,
    DISCONNECT: _no_body_decoder(Disconnect, "DISCONNECT"),
    AWK: _no_body_decoder(Awk, "AWK"),
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
            command=name_of(cmd),
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
            command=name_of(cmd),
            frame=1,
            got=frames[1],
        )
    return cmd
