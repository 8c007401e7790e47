"""A stop signal that comes before the service runs is kept, not fatal.

Until :meth:`zbus.runtime.service.Service.run` installs its handlers, SIGTERM and SIGINT
would kill the process outright (status -15), and a service that takes seconds to
import (the sparkworker loads PySpark) would not stop gracefully when asked to during
that time. :func:`defer_stop_signals` installs handlers that only remember the signal;
the service's run then starts and stops at once, gracefully, and exits 0. After the run,
the same handlers keep a late signal from killing a process that is already exiting.

This module imports nothing heavy, so that it can be called first.
"""

from __future__ import annotations

import signal
from types import FrameType

__all__ = ["defer_stop_signals", "deferred_stop_signal"]

_received: list[signal.Signals] = []


def _remember(signum: int, frame: FrameType | None) -> None:
    _received.append(signal.Signals(signum))


def defer_stop_signals() -> None:
    """Remember SIGTERM and SIGINT instead of dying of them (main thread only)."""
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, _remember)


def deferred_stop_signal() -> signal.Signals | None:
    """The first stop signal remembered (and forgets them all), or None."""
    first = _received[0] if _received else None
    _received.clear()
    return first
