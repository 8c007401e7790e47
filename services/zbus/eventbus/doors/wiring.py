"""What the service hands a door to build it, and what it gets back.

The doors sit below the service (``zbus.eventbus.server``) and never import it: the
settings come in as :class:`DoorSettings`, the few settings a door reads (the service's
``EventBusSettings`` has them all), and the store as plain callables: the log's reader
as a factory of :class:`~zbus.eventbus.core.log.EventLogReader` (the service's
``SqliteEventLogReader``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar

import zmq
from prometheus_client.registry import CollectorRegistry

from zbus.common.clock import Clock
from zbus.eventbus.core.log import EventLogReader
from zbus.eventbus.core.mc0 import Mc0Limits

__all__ = ["Door", "DoorSettings", "DoorSpec", "DoorWiring"]


class DoorSettings(Protocol):
    """The bus's settings a door reads (``ZBUS_*``; docs/eventbus.md)."""

    host: str
    fsync: bool
    max_batch_events: int  # what the collector takes in one batch
    max_message_bytes: int
    max_event_bytes: int
    mc0_port: int | None
    mc0_peer_bytes: int
    pppp_port: int | None
    pppp_window: int
    pppp_peer_bytes: int
    pppp_cache_bytes: int
    pppp_max_channels: int
    pppp_max_subscribers: int
    pppp_first_idle: float
    pppp_idle: float
    pppp_misses: int
    pppp_grace: float

    def mc0_limits(self) -> Mc0Limits: ...


class Door(Protocol):
    """A running door: a thread that binds its port in its own start-up."""

    ready: threading.Event
    failed: BaseException | None
    endpoint: str

    def start(self) -> None: ...

    def stop(self) -> None: ...

    def join(self, timeout: float | None = None) -> None: ...

    def is_alive(self) -> bool: ...


@dataclass(frozen=True, slots=True)
class DoorWiring:
    """Everything a door is built from.

    Attributes:
        ctx: the context of the pipeline's inproc endpoints.
        settings: the bus's settings.
        clock: monotonic time for deadlines, wall time for the events' timestamps.
        collector: the pipeline's collector endpoint (events in).
        stream: the pipeline's stream endpoint (events out).
        secure: applies the bus's CURVE keys and ZAP allow-list to a socket it binds.
        log_path: the event log's file, for a door that keeps files beside it.
        open_reader: opens a reader of the log, for a door that reads it (on its own
            thread, which closes it).
        hold: holds the log's retention for this door (None: holds nothing), for a door
            that needs events to stay in the log until it passed them.
        leading: on a replica of a replicated bus, ``(epoch, log end)`` while it leads
            in ``epoch`` (the log's end as it was elected), ``(0, 0)`` while it does not;
            None on a bus of one.
        token: the start of every door's identity on the collector, which trusts it
            with the topics it reserves for the doors.
    """

    ctx: zmq.Context[Any]
    settings: DoorSettings
    clock: Clock
    collector: str
    stream: str
    secure: Callable[[zmq.Socket[Any]], None]
    log_path: Path
    hold: Callable[[int | None], None]
    open_reader: Callable[[], EventLogReader]
    leading: Callable[[], tuple[int, int]] | None = None
    token: bytes = b""


D = TypeVar("D", bound=Door)


@dataclass(frozen=True, slots=True)
class DoorSpec(Generic[D]):
    """One row of the bus's table of doors.

    Attributes:
        name: its key in the service's endpoints and admin API (``mc0``, ``pppp``).
        title: how messages name it ("the mc0 door").
        port_setting: the setting that turns it on: its port (None: off; 0: any port).
        build: makes the door's thread (not started).
        metrics: registers the door's metrics collector, read when Prometheus scrapes.
        holds_retention: the log deletes nothing until the door has said what it holds
            (:attr:`DoorWiring.hold`).
    """

    name: str
    title: str
    port_setting: str
    build: Callable[[DoorWiring], D]
    metrics: Callable[[D, CollectorRegistry], object]
    holds_retention: bool = False

    def enabled(self, settings: object) -> bool:
        """Whether ``settings`` turn the door on."""
        return getattr(settings, self.port_setting, None) is not None
