"""Helpers for event bus tests: run a real bus in process, and raw spec/extension peers."""

from __future__ import annotations

import asyncio
import random
import socket
import uuid as uuidlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import zmq
import zmq.asyncio

from tests.support.waiting import UNIT, async_wait_for
from zbus.common.protocols import eventbus_ext as ext
from zbus.common.settings import ConfigError
from zbus.eventbus.server.config import EventBusSettings
from zbus.eventbus.server.service import EventBusService


def stamp() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def new_event(topic: str, data: bytes = b"\x01", producer: str = "test") -> ext.EventData:
    return ext.EventData(topic, producer, stamp(), str(uuidlib.uuid4()), data)


@asynccontextmanager
async def running_bus(
    data_dir: Path, port: int = 0, **settings: Any
) -> AsyncIterator[EventBusService]:
    """A real event bus in this process (on free ports, or on ``port``..``port + 3``)."""
    service = EventBusService(EventBusSettings(port=port, data_dir=data_dir, **settings))
    task = asyncio.create_task(service.run())

    async def started() -> bool:
        if task.done():
            task.result()
        return service.readiness()["started"]

    await async_wait_for(started, what="event bus start")
    try:
        yield service
    finally:
        service.request_stop()
        await asyncio.wait_for(task, 20 * UNIT)


async def confirmed_publish(
    sock: zmq.asyncio.Socket, events: list[ext.EventData]
) -> list[tuple[str, int]]:
    """Send one ZB-PUB with confirm on a DEALER and return its confirmations."""
    await sock.send_multipart(ext.encode(ext.PubBatch(tuple(events), confirm=True)))
    reply = ext.decode_collector_reply(await asyncio.wait_for(sock.recv_multipart(), 10 * UNIT))
    assert isinstance(reply, ext.Confirm), reply
    return list(reply.sequences)


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now (the kernel's choice)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _free(port: int) -> bool:
    with socket.socket() as sock:
        # As ZeroMQ binds: a port left in TIME_WAIT by an earlier test is usable.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_base_port() -> int:
    """A port P with P..P+3 free (the bus's four sockets), below the kernel's ephemeral
    range, where outgoing connections of other tests do not land."""
    rng = random.Random()
    for _ in range(200):
        port = rng.randrange(20_000, 32_000)
        if all(_free(port + i) for i in range(4)):
            return port
    raise AssertionError("no four consecutive free ports")


@asynccontextmanager
async def bus_on_base_port(data_dir: Path, **settings: Any) -> AsyncIterator[str]:
    """A real event bus on P..P+3, as clients that know only a base endpoint need (log
    shipping); yields ``tcp://127.0.0.1:P``."""
    for attempt in range(5):
        port = free_base_port()
        service = EventBusService(
            EventBusSettings(port=port, data_dir=data_dir / str(attempt), **settings)
        )
        task = asyncio.create_task(service.run())

        async def started(task: asyncio.Task[None] = task, bus: EventBusService = service) -> bool:
            if task.done():
                task.result()
            return bus.readiness()["started"]

        try:
            await async_wait_for(started, what="event bus start")
        except ConfigError:  # another process took one of the ports meanwhile
            continue
        try:
            yield f"tcp://127.0.0.1:{port}"
        finally:
            service.request_stop()
            await asyncio.wait_for(task, 20 * UNIT)
        return
    raise AssertionError("the event bus did not start on a free base port")
