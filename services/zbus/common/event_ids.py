"""An event's UUID and its wire timestamp, made one way for every door and client.

The bus stores an event's producer time as ISO-8601 text in UTC with milliseconds and a
``Z`` (the Event BUS RFC's ``timestamp``), and its idempotency key as a version 4 UUID in
the canonical text form. Publishers make many of both per second, so both are cheap:
UUIDs come from one read of the system's randomness per batch, and a stamp is cached for
the millisecond it names.
"""

from __future__ import annotations

import os
from datetime import UTC, datetime

__all__ = ["StampCache", "uuid4", "uuid4s", "wire_stamp"]

# The RFC 4122 variant: the top two bits of byte 8 are 10, so its first hex digit is 8-b.
_VARIANT = {d: "89ab"[int(d, 16) & 0x3] for d in "0123456789abcdef"}


def uuid4s(n: int) -> list[str]:
    """``n`` random (version 4) UUIDs in the canonical text form, from one read of the
    system's randomness (a fifth of ``str(uuid.uuid4())``'s cost each)."""
    h = os.urandom(16 * n).hex()
    return [
        f"{h[i : i + 8]}-{h[i + 8 : i + 12]}-4{h[i + 13 : i + 16]}-"
        f"{_VARIANT[h[i + 16]]}{h[i + 17 : i + 20]}-{h[i + 20 : i + 32]}"
        for i in range(0, 32 * n, 32)
    ]


def uuid4() -> str:
    """One random (version 4) UUID in the canonical text form."""
    return uuid4s(1)[0]


def wire_stamp(now: float) -> str:
    """``now`` (seconds since the epoch) as an event's timestamp: ISO-8601, UTC,
    milliseconds, ``Z``."""
    return datetime.fromtimestamp(now, UTC).isoformat(timespec="milliseconds")[:-6] + "Z"


class StampCache:
    """:func:`wire_stamp` for a publisher that stamps many events a millisecond: the
    text is made once per millisecond."""

    def __init__(self) -> None:
        self._ms = -1
        self._stamp = ""

    def stamp(self, now: float) -> str:
        """``now`` (seconds since the epoch, from the caller's wall clock) as a stamp."""
        ms = int(now * 1000)
        if ms != self._ms:
            self._stamp = wire_stamp(ms / 1000)
            self._ms = ms
        return self._stamp
