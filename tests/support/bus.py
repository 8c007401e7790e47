"""A real event bus in this process (on this loop, in a thread of its own, or on a base
port), and raw ZB-PUB publishing."""

from __future__ import annotations

import asyncio
import threading
import uuid as uuidlib
from collections.abc import AsyncIterator, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager, contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import zmq
import zmq.asyncio

from tests.support.ports import HeldPorts
from tests.support.running import running_service, start_service
from tests.support.waiting import UNIT, wait_until
from zbus.common.protocols import eventbus_ext as ext
from zbus.common.settings import ConfigError
from zbus.eventbus.server.config import EventBusSettings
from zbus.eventbus.server.service import EventBusService


def stamp() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def new_event(topic: str, data: bytes = b"\x01", producer: str = "test") -> ext.EventData:
    return ext.EventData(topic, producer, stamp(), str(uuidlib.uuid4()), data)


def running_bus(
    data_dir: Path, port: int = 0, **settings: Any
) -> AbstractAsyncContextManager[EventBusService]:
    """A real event bus on this loop (on ports it chose, or on ``port``..``port + 3``)."""
    service = EventBusService(EventBusSettings(port=port, data_dir=data_dir, **settings))
    return running_service(service, "event bus start")


async def confirmed_publish(
    sock: zmq.asyncio.Socket, events: list[ext.EventData]
) -> list[tuple[str, int]]:
    """Send one ZB-PUB with confirm on a DEALER and return its confirmations."""
    await sock.send_multipart(ext.encode(ext.PubBatch(tuple(events), confirm=True)))
    reply = ext.decode_collector_reply(await asyncio.wait_for(sock.recv_multipart(), 10 * UNIT))
    assert isinstance(reply, ext.Confirm), reply
    return list(reply.sequences)


@contextmanager
def bus_thread(data_dir: Path, **settings: Any) -> Iterator[EventBusService]:
    """A real event bus with its mc0 door on ports it chose (port 0), run on a loop in its
    own thread, so that the test's blocking sockets and clients never stall it."""
    options: dict[str, Any] = {"port": 0, "mc0_port": 0, "archive": False, "shutdown_timeout": 5}
    options.update(settings)
    service = EventBusService(EventBusSettings(data_dir=data_dir, **options))
    loop = asyncio.new_event_loop()
    failed: list[BaseException] = []
    finished = threading.Event()

    def run() -> None:
        try:
            loop.run_until_complete(service.run())
        except BaseException as exc:
            failed.append(exc)
        finally:
            loop.close()
            finished.set()

    thread = threading.Thread(target=run, name="test-eventbus", daemon=True)
    thread.start()
    wait_until(
        lambda: finished.is_set() or service.readiness()["started"], 20, what="event bus start"
    )
    if failed:
        raise failed[0]
    try:
        yield service
    finally:
        if not finished.is_set():
            loop.call_soon_threadsafe(service.request_stop)
        thread.join(20 * UNIT)
        assert not thread.is_alive(), "the event bus did not stop"


@asynccontextmanager
async def bus_on_base_port(data_dir: Path, **settings: Any) -> AsyncIterator[str]:
    """A real event bus on P..P+3, as clients that know only a base endpoint need (log
    shipping); yields ``tcp://127.0.0.1:P``."""
    for attempt in range(5):
        with HeldPorts(4) as held:
            port = held.port
        service = EventBusService(
            EventBusSettings(port=port, data_dir=data_dir / str(attempt), **settings)
        )
        try:
            task = await start_service(service, "event bus start")
        except ConfigError:  # another process took one of the ports meanwhile
            continue
        try:
            yield f"tcp://127.0.0.1:{port}"
        finally:
            service.request_stop()
            await asyncio.wait_for(task, 20 * UNIT)
        return
    raise AssertionError("the event bus did not start on a free base port")
