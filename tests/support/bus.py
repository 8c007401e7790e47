"""Helpers for event bus tests: run a real bus in process, and raw spec/extension peers."""

from __future__ import annotations

import asyncio
import uuid as uuidlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import zmq
import zmq.asyncio

from services.common.protocols import eventbus_ext as ext
from services.eventbus.config import EventBusSettings
from services.eventbus.server import EventBusService
from tests.support.waiting import UNIT, async_wait_for


def stamp() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def new_event(topic: str, data: bytes = b"\x01", producer: str = "test") -> ext.EventData:
    return ext.EventData(topic, producer, stamp(), str(uuidlib.uuid4()), data)


@asynccontextmanager
async def running_bus(data_dir: Path, **settings: Any) -> AsyncIterator[EventBusService]:
    service = EventBusService(EventBusSettings(port=0, data_dir=data_dir, **settings))
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
