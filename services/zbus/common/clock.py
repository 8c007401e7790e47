"""Injectable clocks: protocol logic takes the time as an input and never reads it itself."""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    """Where a service gets the time from; passed into state machines as plain floats."""

    def time(self) -> float:
        """Seconds since the epoch (wall clock: for timestamps shown to people and peers)."""
        ...

    def monotonic(self) -> float:
        """Seconds on a clock that never goes back (for deadlines and expiry)."""
        ...


class SystemClock:
    """The real clocks of the machine."""

    def time(self) -> float:
        return time.time()

    def monotonic(self) -> float:
        return time.monotonic()


class ManualClock:
    """A clock that moves only when told to: drives heartbeat and expiry logic in tests."""

    def __init__(self, start: float = 1_700_000_000.0) -> None:
        self._wall = start
        self._mono = 0.0

    def time(self) -> float:
        return self._wall

    def monotonic(self) -> float:
        return self._mono

    def advance(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError("a clock does not go back")
        self._wall += seconds
        self._mono += seconds
