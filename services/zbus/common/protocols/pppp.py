"""PPPP, the Paranoid Pirate Publishing Protocol: sans-I/O codec.

The spec (seed 003, "Command Specifications") defines six commands. Five of them have a
frame layout, and this module encodes and decodes those five:

=========  ==========  ===============================================================
command    sent by     frames
=========  ==========  ===============================================================
SUBSCRIBE  subscriber  ``[0x01 + channel]``
PUBLISH    publisher   ``[channel, sequence, payload...]``
ACK/NACK   subscriber  ``[0x02 + channel, highest, range...]``
HEARTBEAT  both        ``[0x03]``
CUSTOM     subscriber  ``[0x04, payload...]``
=========  ==========  ===============================================================

SYNC has no frames of its own: the spec leaves it "application specific". The event bus
sends it as PUBLISH commands with sequence 0 (ADR 0006; the payloads are in
:mod:`zbus.common.protocols.pppp_event`), so there is no SYNC command here.

Where the spec is silent, zbus decides (see ``docs/protocols/pppp.md``):

- A sequence number is an 8-byte big-endian unsigned integer, as in every other zbus
  protocol (ADR 0001). Sequences are per channel (the spec: "a channel specific
  sequenze number").
- A NACK range frame is 16 bytes: the first and the last missing sequence, both
  inclusive, each 8-byte big-endian. ``first <= last < highest``: a number above the
  highest one received is not missing yet, only not received.
- A channel is strict UTF-8 text and must not begin with one of the command bytes
  0x01..0x04, so that a PUBLISH (whose first frame is the bare channel) can never be
  taken for another command. The rule holds for every command that names a channel:
  a subscription to such a channel could never be served.
- PUBLISH and CUSTOM may carry zero payload frames; the payload is opaque here.

Publisher and subscriber receive different commands, so decoding is per side:
:func:`decode_from_subscriber` (what a publisher receives) and
:func:`decode_from_publisher` (what a subscriber receives). A command arriving from the
wrong side is a :class:`~zbus.common.protocols.errors.ProtocolError`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from zbus.common.protocols.errors import (
    FrameCountError,
    FrameValueError,
    UnknownCommandError,
    check_uint64,
    expect_count,
    text,
    uint64,
)

__all__ = [
    "SPEC",
    "AckNack",
    "Custom",
    "Dialect",
    "Heartbeat",
    "PPPPCommand",
    "Publish",
    "PublisherCommand",
    "Subscribe",
    "SubscriberCommand",
    "decode_from_publisher",
    "decode_from_subscriber",
    "encode",
]

PROTOCOL = "pppp"

# Command bytes (spec, "Command Specifications").
SUBSCRIBE = b"\x01"
ACKNACK = b"\x02"
HEARTBEAT = b"\x03"
CUSTOM = b"\x04"

# First bytes a PUBLISH channel may not start with; as ints, because indexing bytes
# gives an int.
_RESERVED_FIRST_BYTES = frozenset(b"\x01\x02\x03\x04")
_RESERVED_FIRST_CHARS = frozenset("\x01\x02\x03\x04")


@dataclass(frozen=True, slots=True)
class Dialect:
    """Options for one kind of PPPP peer.

    PPPP has a single public description and no deployed peer whose frames differ from
    it, so there is nothing to choose yet. The type exists so that PPPP has the same
    call shape as the other codecs (ADR 0001): a future option is a new field here, not
    a new signature.
    """


SPEC = Dialect()


@dataclass(frozen=True, slots=True)
class Subscribe:
    """S: SUBSCRIBE. ``channel`` is a topic prefix; ``""`` subscribes to everything."""

    channel: str


@dataclass(frozen=True, slots=True)
class Publish:
    """P: PUBLISH one message of ``channel`` with its per-channel ``sequence``."""

    channel: str
    sequence: int
    payload: tuple[bytes, ...]


@dataclass(frozen=True, slots=True)
class AckNack:
    """S: ACK/NACK for ``channel``.

    ``highest`` is the highest sequence received (the ACK); ``missing`` lists inclusive
    ``(first, last)`` ranges below it that were not received (the NACKs). Ranges may
    come in any order and may overlap: the publisher resends their union.
    """

    channel: str
    highest: int
    missing: tuple[tuple[int, int], ...] = ()


@dataclass(frozen=True, slots=True)
class Heartbeat:
    """S or P: HEARTBEAT. Any other traffic also counts as a heartbeat (spec)."""


@dataclass(frozen=True, slots=True)
class Custom:
    """S: CUSTOM, an application-specific message to the publisher."""

    payload: tuple[bytes, ...]


SubscriberCommand = Subscribe | AckNack | Heartbeat | Custom
PublisherCommand = Publish | Heartbeat
PPPPCommand = Subscribe | Publish | AckNack | Heartbeat | Custom


# --------------------------------------------------------------------------- encoding


def encode(cmd: PPPPCommand, dialect: Dialect = SPEC) -> list[bytes]:
    """Frame ``cmd`` for the wire.

    Raises:
        FrameValueError: a field cannot be encoded (a reserved or non-UTF-8 channel, a
            sequence outside 0..2**64-1, a NACK range that is reversed or not below
            ``highest``).
    """
    if type(cmd) is Publish:
        check_uint64(PROTOCOL, "PUBLISH", "sequence", cmd.sequence)
        return [
            _channel_bytes("PUBLISH", cmd.channel),
            cmd.sequence.to_bytes(8, "big"),
            *cmd.payload,
        ]
    if type(cmd) is Heartbeat:
        return [HEARTBEAT]
    if type(cmd) is Subscribe:
        return [SUBSCRIBE + _channel_bytes("SUBSCRIBE", cmd.channel)]
    if type(cmd) is AckNack:
        return _encode_acknack(cmd)
    if type(cmd) is Custom:
        return [CUSTOM, *cmd.payload]
    raise TypeError(f"not a PPPP command: {cmd!r}")


def _channel_bytes(command: str, channel: str) -> bytes:
    if channel[:1] in _RESERVED_FIRST_CHARS:
        raise FrameValueError(
            PROTOCOL,
            "a channel that does not begin with a command byte 0x01..0x04",
            command=command,
            got=channel,
        )
    try:
        return channel.encode("utf-8")
    except UnicodeEncodeError:
        raise FrameValueError(
            PROTOCOL, "a channel encodable as UTF-8", command=command, got=channel
        ) from None


def _encode_acknack(cmd: AckNack) -> list[bytes]:
    check_uint64(PROTOCOL, "ACK/NACK", "highest sequence", cmd.highest)
    frames = [ACKNACK + _channel_bytes("ACK/NACK", cmd.channel), cmd.highest.to_bytes(8, "big")]
    for first, last in cmd.missing:
        if not 0 <= first <= last < cmd.highest:
            raise FrameValueError(
                PROTOCOL,
                "a NACK range with 0 <= first <= last < highest",
                command="ACK/NACK",
                got=(first, last),
            )
        frames.append(first.to_bytes(8, "big") + last.to_bytes(8, "big"))
    return frames


# --------------------------------------------------------------------------- decoding


def decode_from_subscriber(frames: Sequence[bytes], dialect: Dialect = SPEC) -> SubscriberCommand:
    """Decode what a publisher receives: SUBSCRIBE, ACK/NACK, HEARTBEAT or CUSTOM.

    Raises:
        ProtocolError: ``frames`` is not one of those commands (a PUBLISH included:
            subscribers do not publish).
    """
    if not frames:
        raise FrameCountError(PROTOCOL, "at least 1 frame", got="0 frames")
    head = frames[0]
    first = head[:1]
    if first == SUBSCRIBE:
        expect_count(PROTOCOL, "SUBSCRIBE", frames, 1)
        return Subscribe(_channel("SUBSCRIBE", frames, 1))
    if first == ACKNACK:
        return _decode_acknack(frames)
    if first == HEARTBEAT:
        return _decode_heartbeat(frames)
    if first == CUSTOM:
        if len(head) != 1:
            raise FrameValueError(
                PROTOCOL, "the single byte 0x04", command="CUSTOM", frame=0, got=head
            )
        return Custom(tuple(frames[1:]))
    raise UnknownCommandError(
        PROTOCOL,
        "a subscriber command byte 0x01 (SUBSCRIBE), 0x02 (ACK/NACK), "
        "0x03 (HEARTBEAT) or 0x04 (CUSTOM)",
        frame=0,
        got=head,
    )


def decode_from_publisher(frames: Sequence[bytes], dialect: Dialect = SPEC) -> PublisherCommand:
    """Decode what a subscriber receives: PUBLISH or HEARTBEAT.

    Raises:
        ProtocolError: ``frames`` is not one of those commands.
    """
    if not frames:
        raise FrameCountError(PROTOCOL, "at least 1 frame", got="0 frames")
    head = frames[0]
    if head[:1] == HEARTBEAT:
        return _decode_heartbeat(frames)
    if head and head[0] in _RESERVED_FIRST_BYTES:
        raise UnknownCommandError(
            PROTOCOL,
            "PUBLISH (a channel) or HEARTBEAT (0x03); a publisher sends no other command",
            frame=0,
            got=head,
        )
    expect_count(PROTOCOL, "PUBLISH", frames, 2, -1)
    return Publish(
        _channel("PUBLISH", frames, 0),
        uint64(PROTOCOL, "PUBLISH", frames, 1, "sequence"),
        tuple(frames[2:]),
    )


def _decode_heartbeat(frames: Sequence[bytes]) -> Heartbeat:
    if len(frames[0]) != 1:
        raise FrameValueError(
            PROTOCOL, "the single byte 0x03", command="HEARTBEAT", frame=0, got=frames[0]
        )
    expect_count(PROTOCOL, "HEARTBEAT", frames, 1)
    return Heartbeat()


def _decode_acknack(frames: Sequence[bytes]) -> AckNack:
    expect_count(PROTOCOL, "ACK/NACK", frames, 2, -1)
    channel = _channel("ACK/NACK", frames, 1)
    highest = uint64(PROTOCOL, "ACK/NACK", frames, 1, "highest sequence received")
    missing = []
    for index in range(2, len(frames)):
        raw = frames[index]
        if len(raw) != 16:
            raise FrameValueError(
                PROTOCOL,
                "a NACK range as 16 bytes (first, last: 8 bytes each in network order)",
                command="ACK/NACK",
                frame=index,
                got=raw,
            )
        first = int.from_bytes(raw[:8], "big")
        last = int.from_bytes(raw[8:], "big")
        if not first <= last < highest:
            raise FrameValueError(
                PROTOCOL,
                f"a NACK range with first <= last < highest ({highest})",
                command="ACK/NACK",
                frame=index,
                got=(first, last),
            )
        missing.append((first, last))
    return AckNack(channel, highest, tuple(missing))


def _channel(command: str, frames: Sequence[bytes], skip: int) -> str:
    """The channel in frame 0 after ``skip`` command bytes, as strict UTF-8 text.

    The channel itself may not start with a command byte (see the module docstring).
    """
    raw = frames[0][skip:]
    if raw and raw[0] in _RESERVED_FIRST_BYTES:
        raise FrameValueError(
            PROTOCOL,
            "a channel that does not begin with a command byte 0x01..0x04",
            command=command,
            frame=0,
            got=frames[0],
        )
    if skip:
        return text(PROTOCOL, command, [raw], 0, "channel") if raw else ""
    return text(PROTOCOL, command, frames, 0, "channel")
