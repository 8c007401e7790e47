"""The one thing the blocking and the asyncio shells do differently: wait.

Both shells move frames the same way, on plain ``zmq.Socket`` objects and without
blocking (``NOBLOCK`` reads until ``Again``, ``NOBLOCK`` sends); only where nothing can
move do they differ: the blocking shell polls, the asyncio shell awaits a
``zmq.asyncio.Poller`` (which watches the same sockets from the event loop).

A piece of logic that waits more than once (a confirmed publish: send, wait for
confirms, fail over, send again) is written once as a *flow*, a generator that yields
each :class:`Wait` it needs and is sent back whether the wait ended ready (True) or
timed out (False); :func:`run` and :func:`run_async` drive it.
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
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


async def wait_async(sockets: Sockets, events: int, ms: int) -> bool:
    """:func:`wait`, awaited in the event loop."""
    poller = zmq.asyncio.Poller()
    for sock in sockets:
        poller.register(sock, events)
    return bool(await poller.poll(ms))


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
