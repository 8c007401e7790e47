"""The PPPP door's state as events of the log, for a replicated bus (ADR 0010), sans-I/O.

With replication on, the leader's door writes what it would store (checkpoints and ACK
positions, :class:`~zbus.eventbus.core.pppp.Changes`) as events on :data:`STATE_TOPIC`,
and every replica's door folds those events, as the log holds them, into its own store.
This module is their encoding: ``msgpack([1, checkpoints, positions])`` with

- a checkpoint ``[channel, cseq, seq]``, or ``[channel]`` for a channel that is gone;
- a position ``[identity, channel, acked]``, or ``[identity, channel]`` for a
  conversation that is gone;

cut so that no event's data passes a size. Every number has its range and every name its
length, checked on the way in: a state event is read back from the log, which anyone who
may publish could have written to (the collector refuses :data:`STATE_TOPIC` but from the
door; this is the second line).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import msgpack

from zbus.eventbus.core.pppp._types import MAX_CHANNEL_BYTES

#: The topic of the door's state events; no PPPP channel numbers it.
STATE_TOPIC = "/zbus/pppp/state"
STATE_PRODUCER = "pppp:state"
VERSION = 1
MAX_IDENTITY_BYTES = 255
_U64 = 1 << 64
#: Bytes an entry may take beyond its names, for cutting (msgpack headers and numbers).
_ENTRY_OVERHEAD = 32


class StateError(ValueError):
    """A state event that is not one the door writes."""


@dataclass(slots=True)
class StateDelta:
    """Checkpoints and positions, each to set (a value) or to delete (None)."""

    checkpoints: dict[str, tuple[int, int] | None] = field(default_factory=dict)
    positions: dict[tuple[bytes, str], int | None] = field(default_factory=dict)
    #: Channels that went on the way (and may be back): their older positions go too.
    dropped: set[str] = field(default_factory=set)

    def __bool__(self) -> bool:
        return bool(self.checkpoints or self.positions or self.dropped)

    def update(self, later: StateDelta) -> None:
        """Fold ``later`` in: its entries win. A channel that is gone takes its positions
        with it, as the store's delete does."""
        for name, value in later.checkpoints.items():
            if value is None:
                self.dropped.add(name)
                for key in [k for k in self.positions if k[1] == name]:
                    del self.positions[key]
            self.checkpoints[name] = value
        self.positions.update(later.positions)


def encode_state(
    checkpoints: Mapping[str, tuple[int, int] | None],
    positions: Mapping[tuple[bytes, str], int | None],
    max_bytes: int,
) -> list[bytes]:
    """The data of the events that carry these changes, in order (checkpoints first),
    each at most ``max_bytes`` (at least one entry an event)."""
    entries: list[tuple[int, list[Any]]] = []
    for name, value in checkpoints.items():
        entries.append((0, [name] if value is None else [name, value[0], value[1]]))
    for (identity, name), acked in positions.items():
        entries.append((1, [identity, name] if acked is None else [identity, name, acked]))
    return [msgpack.packb([VERSION, c, p], use_bin_type=True) for c, p in _cut(entries, max_bytes)]


def _cut(
    entries: list[tuple[int, list[Any]]], max_bytes: int
) -> Iterator[tuple[list[list[Any]], list[list[Any]]]]:
    parts: tuple[list[list[Any]], list[list[Any]]] = ([], [])
    size = 16
    for kind, entry in entries:
        cost = _ENTRY_OVERHEAD + sum(len(x) * 4 if isinstance(x, str) else 0 for x in entry)
        cost += sum(len(x) for x in entry if isinstance(x, bytes))
        if (parts[0] or parts[1]) and size + cost > max_bytes:
            yield parts
            parts, size = ([], []), 16
        parts[kind].append(entry)
        size += cost
    if parts[0] or parts[1]:
        yield parts


def decode_state(data: bytes) -> StateDelta:
    """The changes one state event carries.

    Raises:
        StateError: not a state event of this version, or a value out of its range.
    """
    try:
        got = msgpack.unpackb(data, raw=False, use_list=True, strict_map_key=True)
    except (ValueError, TypeError, msgpack.UnpackException) as exc:
        raise StateError(f"not msgpack: {exc}") from None
    if not (isinstance(got, list) and len(got) == 3 and got[0] == VERSION):
        raise StateError(f"not [{VERSION}, checkpoints, positions]")
    _, checkpoints, positions = got
    if not isinstance(checkpoints, list) or not isinstance(positions, list):
        raise StateError("checkpoints and positions must be lists")
    delta = StateDelta()
    for entry in checkpoints:
        if not isinstance(entry, list) or len(entry) not in (1, 3):
            raise StateError("a checkpoint is [channel] or [channel, cseq, seq]")
        name = _channel(entry[0])
        delta.checkpoints[name] = (
            None if len(entry) == 1 else (_number(entry[1], "cseq"), _number(entry[2], "seq"))
        )
    for entry in positions:
        if not isinstance(entry, list) or len(entry) not in (2, 3):
            raise StateError("a position is [identity, channel] or [identity, channel, acked]")
        identity = entry[0]
        if not isinstance(identity, bytes) or not 1 <= len(identity) <= MAX_IDENTITY_BYTES:
            raise StateError(f"an identity is 1 to {MAX_IDENTITY_BYTES} bytes")
        key = (identity, _channel(entry[1]))
        delta.positions[key] = None if len(entry) == 2 else _number(entry[2], "acked")
    return delta


def _channel(value: object) -> str:
    if not isinstance(value, str) or len(value.encode("utf-8")) > MAX_CHANNEL_BYTES:
        raise StateError(f"a channel is a string of {MAX_CHANNEL_BYTES} bytes at most")
    return value


def _number(value: object, what: str) -> int:
    if type(value) is not int or not 0 <= value < _U64:
        raise StateError(f"{what} must be 0..2**64-1, got {value!r}")
    return value


__all__ = [
    "STATE_PRODUCER",
    "STATE_TOPIC",
    "StateDelta",
    "StateError",
    "decode_state",
    "encode_state",
]
