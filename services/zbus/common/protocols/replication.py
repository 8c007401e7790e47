"""The replication dialog between the replicas of a group, sans-I/O.

A follower's DEALER pulls from the leader's ROUTER (the codec stops at the frame list:
the ROUTER's identity frame is the transport's). Every command carries the sender's
epoch: the leader refuses a fetch of another epoch, and a follower drops an answer of
another epoch than the one it follows.

- follower -> leader: ``[b"ZR-FETCH", msgpack [group, name, epoch, from_seq,
  last_epoch, max_bytes]]``: send me what you hold from ``from_seq`` (I hold everything
  before it), at most about ``max_bytes``; my last entry was written in ``last_epoch``.
- leader -> follower, one of:
  - ``[b"ZR-SERVE", msgpack [epoch, from_seq, hwm, log_end, [[epoch, first_seq], ...]],
    batch, ...]``: the batches from ``from_seq`` (each frame one stored batch, opaque
    here: the service's log decodes and checks it), the high watermark, the leader's
    log end and its epoch history;
  - ``[b"ZR-DIVERGING", msgpack [epoch, at_epoch, end]]``: truncate after ``end``
    what you wrote in ``at_epoch`` or before; drop what you wrote later;
  - ``[b"ZR-REFUSED", msgpack [epoch, reason, detail]]``.

Ranges: epochs and sequences are 0..2**63-1 (etcd revisions and SQLite integers);
``from_seq`` is at least 1; ``max_bytes`` is 1 KiB..64 MiB; names and groups are 1-255
bytes of UTF-8; a history has at most 4,096 entries, a SERVE at most 10,000 batches; a
reason is at most 64 bytes and a detail at most 1,024.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypeAlias

import msgpack

from zbus.common.protocols.errors import (
    FrameCountError,
    FrameValueError,
    ProtocolError,
    UnknownCommandError,
)

PROTOCOL = "replication"

FETCH = b"ZR-FETCH"
SERVE = b"ZR-SERVE"
DIVERGING = b"ZR-DIVERGING"
REFUSED = b"ZR-REFUSED"

MAX_POSITION = 2**63 - 1
MIN_FETCH_BYTES = 1024
MAX_FETCH_BYTES = 64 << 20
MAX_NAME_BYTES = 255
MAX_HISTORY = 4096
MAX_BATCHES = 10_000
MAX_REASON_BYTES = 64
MAX_DETAIL_BYTES = 1024


@dataclass(frozen=True, slots=True)
class Fetch:
    group: str
    name: str
    epoch: int
    from_seq: int
    last_epoch: int
    max_bytes: int


@dataclass(frozen=True, slots=True)
class Serve:
    epoch: int
    from_seq: int
    hwm: int
    log_end: int
    history: tuple[tuple[int, int], ...]
    batches: tuple[bytes, ...]


@dataclass(frozen=True, slots=True)
class Diverging:
    epoch: int
    at_epoch: int
    end: int


@dataclass(frozen=True, slots=True)
class Refused:
    epoch: int
    reason: str
    detail: str


Command: TypeAlias = Fetch | Serve | Diverging | Refused


def encode(cmd: Command) -> list[bytes]:
    pack = msgpack.packb
    if isinstance(cmd, Fetch):
        body = [cmd.group, cmd.name, cmd.epoch, cmd.from_seq, cmd.last_epoch, cmd.max_bytes]
        return [FETCH, pack(body)]
    if isinstance(cmd, Serve):
        head = [cmd.epoch, cmd.from_seq, cmd.hwm, cmd.log_end, [list(e) for e in cmd.history]]
        return [SERVE, pack(head), *cmd.batches]
    if isinstance(cmd, Diverging):
        return [DIVERGING, pack([cmd.epoch, cmd.at_epoch, cmd.end])]
    return [REFUSED, pack([cmd.epoch, cmd.reason, cmd.detail])]


def decode(frames: Sequence[bytes]) -> Command:
    """Raises:
    ProtocolError: the frames are not a replication command within its ranges."""
    if not frames:
        raise FrameCountError(PROTOCOL, "a command frame", got=[])
    head = bytes(frames[0])
    if head == SERVE:
        if len(frames) < 2 or len(frames) - 2 > MAX_BATCHES:
            raise FrameCountError(
                PROTOCOL, f"2 to {MAX_BATCHES + 2} frames", command="SERVE", got=len(frames)
            )
        epoch, from_seq, hwm, log_end, history = _fields(frames[1], "SERVE", 5)
        return Serve(
            _position(epoch, "SERVE", "epoch"),
            _position(from_seq, "SERVE", "from_seq", low=1),
            _position(hwm, "SERVE", "hwm"),
            _position(log_end, "SERVE", "log_end"),
            _history(history),
            tuple(bytes(f) for f in frames[2:]),
        )
    if head not in (FETCH, DIVERGING, REFUSED):
        raise UnknownCommandError(
            PROTOCOL, "ZR-FETCH, ZR-SERVE, ZR-DIVERGING or ZR-REFUSED", got=head
        )
    command = head.decode()[3:]
    if len(frames) != 2:
        raise FrameCountError(PROTOCOL, "2 frames", command=command, got=len(frames))
    if head == FETCH:
        group, name, epoch, from_seq, last_epoch, max_bytes = _fields(frames[1], command, 6)
        size = _position(max_bytes, command, "max_bytes", low=MIN_FETCH_BYTES)
        if size > MAX_FETCH_BYTES:
            raise FrameValueError(
                PROTOCOL, f"max_bytes at most {MAX_FETCH_BYTES}", command=command, got=size
            )
        return Fetch(
            _text(group, command, "group", MAX_NAME_BYTES),
            _text(name, command, "name", MAX_NAME_BYTES),
            _position(epoch, command, "epoch"),
            _position(from_seq, command, "from_seq", low=1),
            _position(last_epoch, command, "last_epoch"),
            size,
        )
    if head == DIVERGING:
        epoch, at_epoch, end = _fields(frames[1], command, 3)
        return Diverging(
            _position(epoch, command, "epoch"),
            _position(at_epoch, command, "at_epoch"),
            _position(end, command, "end"),
        )
    epoch, reason, detail = _fields(frames[1], command, 3)
    return Refused(
        _position(epoch, command, "epoch"),
        _text(reason, command, "reason", MAX_REASON_BYTES),
        _text(detail, command, "detail", MAX_DETAIL_BYTES, empty=True),
    )


def _fields(frame: bytes, command: str, n: int) -> list[Any]:
    try:
        value = msgpack.unpackb(frame, use_list=True, raw=False, strict_map_key=True)
    except (ValueError, TypeError, msgpack.UnpackException) as exc:
        raise FrameValueError(
            PROTOCOL, f"a msgpack array ({exc})", command=command, frame=1, got=frame
        ) from exc
    if not isinstance(value, list) or len(value) != n:
        raise FrameValueError(
            PROTOCOL, f"a msgpack array of {n} fields", command=command, frame=1, got=value
        )
    return value


def _position(value: object, command: str, what: str, *, low: int = 0) -> int:
    if type(value) is not int or not low <= value <= MAX_POSITION:
        raise FrameValueError(
            PROTOCOL, f"{what} an integer in {low}..2**63-1", command=command, frame=1, got=value
        )
    return value


def _text(value: object, command: str, what: str, limit: int, *, empty: bool = False) -> str:
    if not isinstance(value, str) or not (empty or value) or len(value.encode()) > limit:
        raise FrameValueError(
            PROTOCOL,
            f"{what} a string of {0 if empty else 1}-{limit} bytes",
            command=command,
            frame=1,
            got=value,
        )
    return value


def _history(value: object) -> tuple[tuple[int, int], ...]:
    if not isinstance(value, list) or len(value) > MAX_HISTORY:
        raise FrameValueError(
            PROTOCOL, f"a history of at most {MAX_HISTORY} entries", command="SERVE", got=value
        )
    out: list[tuple[int, int]] = []
    for entry in value:
        if not isinstance(entry, list) or len(entry) != 2:
            raise FrameValueError(
                PROTOCOL, "[epoch, first_seq] entries", command="SERVE", got=entry
            )
        epoch = _position(entry[0], "SERVE", "an entry's epoch", low=1)
        first = _position(entry[1], "SERVE", "an entry's first_seq", low=1)
        if out and not (epoch > out[-1][0] and first >= out[-1][1]):
            raise FrameValueError(
                PROTOCOL, "a history in ascending order", command="SERVE", got=value
            )
        out.append((epoch, first))
    return tuple(out)


__all__ = [
    "DIVERGING",
    "FETCH",
    "REFUSED",
    "SERVE",
    "Command",
    "Diverging",
    "Fetch",
    "ProtocolError",
    "Refused",
    "Serve",
    "decode",
    "encode",
]
