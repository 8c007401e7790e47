"""Injectable clocks: protocol logic takes the time as an input and never reads it itself.

Two clocks, two uses. ``monotonic()`` measures intervals and deadlines (heartbeat
schedules, expiry, timeouts, backoff): it never goes back and does not jump when the
machine's time is set. ``time()`` is wall time, for timestamps that people or peers read
(a registration's ``registered_at``, the time frame of a DBP command). A wall clock can
be stepped an hour either way by an operator or NTP; nothing that decides liveness or
waits may read it.

Threads, services and clients take a :class:`Clock` (the machine's, :class:`SystemClock`,
by default) and read it; sans-I/O cores are handed the values as plain floats.
"""

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


#: The machine's clocks, for a default argument (the class holds no state).
SYSTEM_CLOCK: Clock = SystemClock()


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
        """Let ``seconds`` pass on both clocks.

        Raises:
            ValueError: ``seconds`` is negative.
        """
        if seconds < 0:
            raise ValueError("a clock does not go back")
        self._wall += seconds
        self._mono += seconds

    def step(self, seconds: float) -> None:
        """Set the wall clock ``seconds`` forward (or back, when negative), as an operator
        or NTP does; monotonic time does not move."""
        self._wall += seconds


class SteppableClock:
    """The machine's clocks with a wall clock that can be stepped: for tests of a running
    service, whose timers wait in real time, that a wall-clock step must not disturb."""

    def __init__(self) -> None:
        self.offset = 0.0

    def time(self) -> float:
        return time.time() + self.offset

    def monotonic(self) -> float:
        return time.monotonic()

    def step(self, seconds: float) -> None:
        """Set the wall clock ``seconds`` forward (or back, when negative)."""
        self.offset += seconds
