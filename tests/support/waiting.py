"""Waiting without sleeping to synchronise: poll a condition until a deadline.

Every real-time bound in the suite is a number of units of ``ZBUS_TEST_TIME_UNIT``
seconds (1 by default; raise it on a slow machine), and every wait has one: a test that
waits for something that never comes fails with what it waited for, it never hangs.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Awaitable, Callable

# One scalable unit for every real-time bound in the suite (slow machines: raise it).
UNIT = float(os.environ.get("ZBUS_TEST_TIME_UNIT", "1.0"))

# How often a condition is polled (real seconds, not scaled: it bounds the latency only).
POLL = 0.01


class Deadline:
    """A bound for a loop that reads until what it wants arrives, skipping the rest
    (heartbeats, other replies): such a loop has no deadline of its own, since each
    read returns in time while the wanted message may never come.

    Args:
        timeout: the bound, in units of ``ZBUS_TEST_TIME_UNIT`` seconds.
        what: what the loop waits for, for the failure's message.
    """

    def __init__(self, timeout: float = 10.0, what: str = "condition") -> None:
        self.seconds = timeout * UNIT
        self.what = what
        self.at = time.monotonic() + self.seconds

    def left(self) -> float:
        """Seconds left before the deadline.

        Raises:
            AssertionError: the deadline has passed.
        """
        left = self.at - time.monotonic()
        if left <= 0:
            raise AssertionError(f"timed out after {self.seconds:g} s waiting for {self.what}")
        return left


def wait_until(
    predicate: Callable[[], bool], timeout: float = 10.0, what: str = "condition"
) -> None:
    """Poll ``predicate`` until it is true.

    Args:
        predicate: the condition, cheap to call and without side effects the test sees.
        timeout: the bound, in units of ``ZBUS_TEST_TIME_UNIT`` seconds.
        what: what the test waits for, for the failure's message.

    Raises:
        AssertionError: ``predicate`` was still false at the deadline.
    """
    deadline = Deadline(timeout, what)
    while not predicate():
        deadline.left()
        time.sleep(POLL)


async def async_wait_until(
    predicate: Callable[[], Awaitable[bool]], within: float = 10.0, what: str = "condition"
) -> None:
    """``wait_until`` on an event loop: ``predicate`` is awaited, the loop runs between;
    ``within`` is its ``timeout``.

    Raises:
        AssertionError: ``predicate`` was still false at the deadline.
    """
    deadline = Deadline(within, what)
    while not await predicate():
        deadline.left()
        await asyncio.sleep(POLL)
