"""How the shells wait: the asyncio wait on plain sockets, several coroutines at once."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import pytest
import zmq

from zbus.eventbus.client._waiting import Wait, run, wait, wait_async


@pytest.fixture
def pair() -> Iterator[tuple[zmq.Socket[Any], zmq.Socket[Any]]]:
    ctx: zmq.Context[Any] = zmq.Context()
    a, b = ctx.socket(zmq.PAIR), ctx.socket(zmq.PAIR)
    a.bind("inproc://waiting")
    b.connect("inproc://waiting")
    yield a, b
    a.close(linger=0)
    b.close(linger=0)
    ctx.term()


async def test_every_coroutine_waiting_on_a_socket_wakes_when_it_is_ready(
    pair: tuple[zmq.Socket[Any], zmq.Socket[Any]],
) -> None:
    a, b = pair

    async def waiter() -> tuple[bool, float]:
        start = time.monotonic()
        ready = await wait_async((a,), zmq.POLLIN, 10_000)
        return ready, time.monotonic() - start

    waiters = [asyncio.create_task(waiter()) for _ in range(3)]
    await asyncio.sleep(0.1)
    b.send(b"x")
    results = await asyncio.gather(*waiters)
    assert all(ready for ready, _ in results)
    assert max(took for _, took in results) < 5  # woken, not timed out
    assert a.recv(zmq.NOBLOCK) == b"x"


async def test_an_async_wait_times_out_and_leaves_nothing_watched(
    pair: tuple[zmq.Socket[Any], zmq.Socket[Any]],
) -> None:
    a, _ = pair
    assert await wait_async((a,), zmq.POLLIN, 0) is False
    assert await wait_async((a,), zmq.POLLIN, 50) is False
    assert await wait_async((a,), zmq.POLLOUT, 50) is True  # a connected PAIR has room
    loop = asyncio.get_running_loop()
    assert loop.remove_reader(a.get(zmq.FD)) is False  # no reader left on the socket


def test_a_flow_is_driven_to_its_result(pair: tuple[zmq.Socket[Any], zmq.Socket[Any]]) -> None:
    a, b = pair

    def flow() -> Any:
        got = yield Wait((a,), zmq.POLLIN, 10)
        b.send(b"y")
        again = yield Wait((a,), zmq.POLLIN, 5_000)
        return got, again, a.recv(zmq.NOBLOCK)

    assert run(flow()) == (False, True, b"y")
    assert wait((a,), zmq.POLLIN, 0) is False
