"""A zbus service run on the test's own loop: started, waited for, stopped."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TypeVar

from tests.support.waiting import UNIT, async_wait_until
from zbus.runtime.service import Service

S = TypeVar("S", bound=Service)


async def start_service(service: Service, what: str = "service start") -> asyncio.Task[None]:
    """Run ``service`` on this loop until it reports itself started; its task.

    Raises:
        BaseException: whatever made the service stop before it started.
        AssertionError: it did not start in time.
    """
    task = asyncio.create_task(service.run())

    async def started() -> bool:
        if task.done():
            task.result()
        return bool(service.readiness()["started"])

    await async_wait_until(started, what=what)
    return task


@asynccontextmanager
async def running_service(service: S, what: str = "service start") -> AsyncIterator[S]:
    """``service`` started on this loop for the block, then stopped (and waited for)."""
    task = await start_service(service, what)
    try:
        yield service
    finally:
        service.request_stop()
        await asyncio.wait_for(task, 20 * UNIT)
