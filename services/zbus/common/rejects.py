"""Refusing bad input: bounded reason labels, and log lines that cannot flood."""

from __future__ import annotations

import logging

from zbus.common.protocols.errors import (
    FrameCountError,
    FrameValueError,
    NumberRangeError,
    ProtocolError,
    UnknownCommandError,
)


def reject_reason(exc: ProtocolError) -> str:
    """A bounded label value for the reason label of a rejected counter."""
    if isinstance(exc, FrameCountError):
        return "frame_count"
    if isinstance(exc, UnknownCommandError):
        return "unknown_command"
    if isinstance(exc, NumberRangeError):
        return "out_of_range"
    if isinstance(exc, FrameValueError):
        return "bad_value"
    return "malformed"


class LogLimiter:
    """At most ``per_second`` log lines a second for one kind of event; counts the rest."""

    def __init__(self, per_second: int = 10) -> None:
        self.per_second = per_second
        self._window = -1.0
        self._used = 0
        self.suppressed = 0

    def allow(self, now: float) -> bool:
        """Whether a line may be logged at ``now`` (seconds on any clock that does not go
        back; a monotonic one)."""
        second = float(int(now))
        if second != self._window:
            self._window, self._used = second, 0
        if self._used < self.per_second:
            self._used += 1
            return True
        self.suppressed += 1
        return False


def log_refusals(
    refusals: list[tuple[bytes, str, str]],
    limiter: LogLimiter,
    logger: logging.Logger,
    message: str,
    now: float,
) -> None:
    """Log what a door refused, ``(peer identity, reason, detail)`` each, within the
    limiter's rate at ``now`` (monotonic seconds), and empty the list (the refusals are
    counted where they were made)."""
    if not refusals:
        return
    for identity, reason, detail in refusals:
        if limiter.allow(now):
            logger.warning(
                message, extra={"peer": identity.hex(), "reason": reason, "error": detail}
            )
    refusals.clear()
