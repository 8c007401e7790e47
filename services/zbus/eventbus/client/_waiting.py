"""The one thing the blocking and the asyncio shells do differently: wait.

Both shells move frames the same way, on plain ``zmq.Socket`` objects and without
blocking (``NOBLOCK`` reads until ``Again``, ``NOBLOCK`` sends); only where nothing can
move do they differ: the blocking shell polls, the asyncio shell has the event loop
watch the sockets' file descriptors (:func:`wait_async`).

A piece of logic that waits more than once (a confirmed publish: send, wait for
confirms, fail over, send again) is written once as a *flow*, a generator that yields
each :class:`Wait` it needs and is sent back whether the wait ended ready (True) or
timed out (False); :func:`run` and :func:`run_async` drive it.
"""

from __future__ import annotations

import asyncio
import sys
import weakref
from collections.abc import Generator, Iterable, Sequence
from typing import Any, NamedTuple, TypeAlias, TypeVar, cast

import zmq
import zmq.asyncio

__all__ = ["Flow", "Wait", "run", "run_async", "wait", "wait_async"]

_T = TypeVar("_T")
Sockets: TypeAlias = Sequence["zmq.Socket[Any]"]


class Wait(NamedTuple):
    """Wait until one of ``sockets`` is ready for ``events``, ``ms`` at most (-1: for
    ever)."""

    sockets: Sockets
    events: int
    ms: int


Flow: TypeAlias = Generator[Wait, bool, _T]


def wait(sockets: Sockets, events: int, ms: int) -> bool:
    """Block until one of ``sockets`` is ready for ``events``; False after ``ms``."""
    if len(sockets) == 1:
        return bool(sockets[0].poll(ms, events))
    poller = zmq.Poller()
    for sock in sockets:
        poller.register(sock, events)
    return bool(poller.poll(ms))


# Per event loop, the futures waiting on each file descriptor: every waiter on a socket is
# woken together, so that several coroutines may wait on one socket (the loop holds one
# reader per descriptor).
_WAITERS: weakref.WeakKeyDictionary[
    asyncio.AbstractEventLoop, dict[int, set[asyncio.Future[None]]]
] = weakref.WeakKeyDictionary()


def _wake(waiters: Iterable[asyncio.Future[None]]) -> None:
    for future in waiters:
        if not future.done():
            future.set_result(None)


async def wait_async(sockets: Sockets, events: int, ms: int) -> bool:
    """:func:`wait`, awaited: the event loop watches the sockets' file descriptors.

    A ZeroMQ descriptor only says that the socket's state may have changed, so the
    sockets' ``EVENTS`` are read before each wait and after each wake.
    """

    def ready() -> bool:
        return any(cast(int, sock.get(zmq.EVENTS)) & events for sock in sockets)

    if ready():
        return True
    if ms == 0:
        return False
    loop = asyncio.get_running_loop()
    if sys.platform == "win32":  # a proactor loop watches no descriptor: pyzmq bridges it
        poller = zmq.asyncio.Poller()
        for sock in sockets:
            poller.register(sock, events)
        return bool(await poller.poll(ms))
    table = _WAITERS.setdefault(loop, {})
    deadline = None if ms < 0 else loop.time() + ms / 1000
    fds = [cast(int, sock.get(zmq.FD)) for sock in sockets]
    while True:
        left = None if deadline is None else deadline - loop.time()
        if left is not None and left <= 0:
            return ready()
        future: asyncio.Future[None] = loop.create_future()
        for fd in fds:
            waiters = table.get(fd)
            if waiters is None:
                waiters = table[fd] = set()
                loop.add_reader(fd, _wake, waiters)
            waiters.add(future)
        timer = None if left is None else loop.call_later(left, _wake, (future,))
        try:
            await future
        finally:
            if timer is not None:
                timer.cancel()
            for fd in fds:
                waiters = table.get(fd)
                if waiters is not None:
                    waiters.discard(future)
                    if not waiters:
                        del table[fd]
                        loop.remove_reader(fd)
        if ready():
            return True


def run(flow: Flow[_T]) -> _T:
    """Drive ``flow`` to its end, blocking at each wait; its result."""
    try:
        step = next(flow)
        while True:
            step = flow.send(wait(*step))
    except StopIteration as stop:
        return cast(_T, stop.value)


async def run_async(flow: Flow[_T]) -> _T:
    """Drive ``flow`` to its end, awaiting each wait; its result."""
    try:
        step = next(flow)
        while True:
            step = flow.send(await wait_async(*step))
    except StopIteration as stop:
        return cast(_T, stop.value)
