"""Log aggregation: the recent log records of every service, as shipped over the bus.

Services publish their records on ``/zbus/logs/<service>`` (:mod:`zbus.runtime.logship`);
:func:`follow_logs` subscribes to that subtree and feeds a :class:`LogWindow`, which keeps
the most recent records of each service in a bounded deque and answers queries.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
from collections import OrderedDict, deque
from collections.abc import Iterator, Mapping
from typing import Any

from zbus.common.protocols.errors import ProtocolError
from zbus.common.security import KeyPair
from zbus.eventbus.client import AsyncEventBusClient, EndpointsArg
from zbus.runtime.logship import LOG_TOPIC_PREFIX

log = logging.getLogger(__name__)

__all__ = ["LEVELS", "LogWindow", "follow_logs"]

LEVELS: Mapping[str, int] = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
    "critical": logging.CRITICAL,
}
_RETRY_SECONDS = 1.0


def level_number(level: str) -> int:
    """The numeric level of a level name (any case; ``warn`` and ``fatal`` too).

    Raises:
        ValueError: an unknown level name.
    """
    name = level.strip().lower()
    name = {"warn": "warning", "fatal": "critical"}.get(name, name)
    if name not in LEVELS:
        raise ValueError(f"unknown level {level!r}: one of {', '.join(LEVELS)}")
    return LEVELS[name]


class LogWindow:
    """Per service, the ``size`` most recent records; at most ``max_services`` services.

    Records are kept in arrival order; when a new service would exceed
    ``max_services``, the one that logged least recently is forgotten.
    """

    def __init__(self, size: int = 1000, max_services: int = 1000) -> None:
        if size < 1 or max_services < 1:
            raise ValueError("size and max_services must be positive")
        self.size = size
        self.max_services = max_services
        self.received = 0
        self.malformed = 0
        self._windows: OrderedDict[str, deque[tuple[int, dict[str, Any]]]] = OrderedDict()
        self._arrival = itertools.count()

    def add(self, record: Mapping[str, Any]) -> bool:
        """Keep ``record`` (a dict with at least a text ``service``); False if malformed."""
        service = record.get("service")
        if not isinstance(service, str) or not service:
            self.malformed += 1
            return False
        window = self._windows.get(service)
        if window is None:
            window = self._windows[service] = deque(maxlen=self.size)
            while len(self._windows) > self.max_services:
                self._windows.popitem(last=False)
        else:
            self._windows.move_to_end(service)
        window.append((next(self._arrival), dict(record)))
        self.received += 1
        return True

    def services(self) -> dict[str, int]:
        """Records kept, by service."""
        return {name: len(window) for name, window in sorted(self._windows.items())}

    def query(
        self,
        service: str | None = None,
        level: str | None = None,
        text: str | None = None,
        limit: int = 100,
    ) -> list[dict[str, Any]]:
        """The newest records first: of ``service`` (None: all), at ``level`` or above,
        whose message contains ``text`` (case-insensitive); at most ``limit``.

        Raises:
            ValueError: an unknown level name.
        """
        floor = level_number(level) if level else None
        needle = text.casefold() if text else None
        if service is None:
            sources = [reversed(w) for w in self._windows.values()]
            newest: Iterator[tuple[int, dict[str, Any]]] = heapq.merge(
                *sources, key=lambda item: item[0], reverse=True
            )
        else:
            window = self._windows.get(service)
            newest = reversed(window) if window is not None else iter(())
        out: list[dict[str, Any]] = []
        if limit < 1:
            return out
        for _, record in newest:
            if floor is not None and _rank(record) < floor:
                continue
            if needle is not None and needle not in str(record.get("msg", "")).casefold():
                continue
            out.append(record)
            if len(out) >= limit:
                break
        return out


def _rank(record: Mapping[str, Any]) -> int:
    level = record.get("level")
    if not isinstance(level, str):
        return 0
    try:
        return level_number(level)
    except ValueError:
        return 0


def _service_of(topic: str) -> str | None:
    if not topic.startswith(LOG_TOPIC_PREFIX):
        return None
    service = topic[len(LOG_TOPIC_PREFIX) :]
    return service if service and "/" not in service else None


async def follow_logs(
    endpoints: EndpointsArg,
    window: LogWindow,
    producer: str = "catalog",
    *,
    curve: tuple[KeyPair, bytes] | None = None,
) -> None:
    """Feed ``window`` with the records published under ``/zbus/logs/``, until cancelled.

    The service comes from the topic. The subscription fails over and retries by itself;
    should it fail anyway, it starts again a second later. With ``curve`` (the catalog's
    key pair and the bus's public key) it subscribes over CURVE.
    """
    while True:
        client = AsyncEventBusClient(endpoints, producer=producer, curve=curve)
        try:
            subscription = await client.subscribe((LOG_TOPIC_PREFIX,))
            async for event in subscription:
                service = _service_of(event.topic)
                try:
                    record = event.unpack()
                except ProtocolError:
                    record = None
                if service is None or not isinstance(record, dict):
                    window.malformed += 1
                    continue
                record["service"] = service
                window.add(record)
        except Exception:
            log.exception("following the logs on the bus failed; retrying")
        finally:
            client.close()
        await asyncio.sleep(_RETRY_SECONDS)
