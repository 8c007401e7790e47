"""Where the worker's jobs run: a fixed set of job threads, and the event loop for
coroutine jobs.

Apart from :mod:`zbus.broker.client.worker` because these run beside the worker's own
event loop and never touch its socket: the worker hands a job thread a function, and a
job thread hands a coroutine to the job loop, so a job that blocks never stalls the
worker's I/O.
"""

from __future__ import annotations

import asyncio
import queue
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from zbus.common.protocols import emqp

__all__ = ["JobLoop", "JobThreads", "RunningJob"]


class JobThreads:
    """A fixed set of daemon threads taking functions from one queue."""

    def __init__(self, size: int) -> None:
        self._tasks: queue.SimpleQueue[Callable[[], None] | None] = queue.SimpleQueue()
        self._threads = [
            threading.Thread(target=self._work, name=f"zbus-job-{i}", daemon=True)
            for i in range(size)
        ]
        for thread in self._threads:
            thread.start()

    def submit(self, fn: Callable[[], None]) -> None:
        self._tasks.put(fn)

    def stop(self) -> None:
        for _ in self._threads:
            self._tasks.put(None)

    def _work(self) -> None:
        while (fn := self._tasks.get()) is not None:
            fn()


class JobLoop:
    """The event loop coroutine jobs run on, in its own thread, started on first use."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None

    def run(self, awaitable: Awaitable[Any]) -> Any:
        """Run ``awaitable`` to its end on the job loop; called from a job thread."""
        with self._lock:
            if self._loop is None:
                self._loop = asyncio.new_event_loop()
                threading.Thread(
                    target=self._loop.run_forever, name="zbus-job-loop", daemon=True
                ).start()
            loop = self._loop

        async def wait() -> Any:
            return await awaitable

        return asyncio.run_coroutine_threadsafe(wait(), loop).result()

    def stop(self) -> None:
        with self._lock:
            if self._loop is not None:
                self._loop.call_soon_threadsafe(self._loop.stop)
                self._loop = None


@dataclass(frozen=True, slots=True)
class RunningJob:
    """A job handed to a job thread: its id, its call, and when it started."""

    job_id: str
    call: emqp.EventmqCall
    started: float  # monotonic
