"""Waiting without sleeping to synchronise: poll a condition until a deadline."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Awaitable, Callable

# One scalable unit for every real-time bound in the suite (slow machines: raise it).
UNIT = float(os.environ.get("ZBUS_TEST_TIME_UNIT", "1.0"))


def wait_for(predicate: Callable[[], bool], timeout: float = 10.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout * UNIT
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout * UNIT:g} s waiting for {what}")
        time.sleep(0.01)


async def async_wait_for(
    predicate: Callable[[], Awaitable[bool]], within: float = 10.0, what: str = "condition"
) -> None:
    deadline = time.monotonic() + within * UNIT
    while not await predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {within * UNIT:g} s waiting for {what}")
        await asyncio.sleep(0.01)
