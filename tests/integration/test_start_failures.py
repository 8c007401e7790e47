"""A service whose start fails says why, releases what it got, and shuts down cleanly.

Every service is started in process with one thing in its way (a port taken, its store
unopenable, a job module missing). Its start must fail with a ConfigError naming the
cause, and its shutdown must not fail on what the start never made: no thread joined
that never started, no attribute of a socket or store never opened. Each case ends with
the ports it bound free again.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.support.waiting import UNIT
from zbus.broker.server.config import BrokerSettings
from zbus.broker.server.service import BrokerService
from zbus.catalog.server.config import CatalogSettings
from zbus.catalog.server.service import CatalogService
from zbus.common.settings import ConfigError
from zbus.eventbus.server.config import EventBusSettings
from zbus.eventbus.server.service import EventBusService
from zbus.runtime.service import Service
from zbus.worker.service import WorkerService, WorkerSettings


@contextmanager
def _taken(kind: int = socket.SOCK_STREAM) -> Iterator[int]:
    """A port of 127.0.0.1 held by someone else for the duration."""
    with socket.socket(socket.AF_INET, kind) as sock:
        sock.bind(("127.0.0.1", 0))
        if kind == socket.SOCK_STREAM:
            sock.listen()
        yield int(sock.getsockname()[1])


def _no_db(data_dir: Path, name: str) -> None:
    """Make the store's file unopenable: a directory where the file should be."""
    (data_dir / name).mkdir(parents=True)


Case = Callable[[Path, int], tuple[Service, str]]


def _bus_collector_taken(data_dir: Path, port: int) -> tuple[Service, str]:
    # The pipeline thread fails to bind: the snapshot thread never started.
    settings = EventBusSettings(data_dir=data_dir, port=0, collector_port=port)
    return EventBusService(settings), str(port)


def _bus_snapshot_taken(data_dir: Path, port: int) -> tuple[Service, str]:
    # The pipeline thread started, the snapshot thread fails: the pipeline must stop.
    settings = EventBusSettings(
        data_dir=data_dir, port=port, publisher_port=0, collector_port=0, stream_port=0
    )
    return EventBusService(settings), str(port)


def _bus_log_unopenable(data_dir: Path, port: int) -> tuple[Service, str]:
    _no_db(data_dir, "events.db")
    return EventBusService(EventBusSettings(data_dir=data_dir)), "events.db"


def _broker_client_taken(data_dir: Path, port: int) -> tuple[Service, str]:
    settings = BrokerSettings(data_dir=data_dir, client_port=port, worker_port=0)
    return BrokerService(settings), str(port)


def _broker_store_unopenable(data_dir: Path, port: int) -> tuple[Service, str]:
    _no_db(data_dir, "jobs.db")
    settings = BrokerSettings(data_dir=data_dir, client_port=0, worker_port=0)
    return BrokerService(settings), "jobs.db"


def _catalog_dbp_taken(data_dir: Path, port: int) -> tuple[Service, str]:
    settings = CatalogSettings(data_dir=data_dir, port=port, udp_port=0, beacon_port=0)
    return CatalogService(settings), str(port)


def _catalog_udp_taken(data_dir: Path, port: int) -> tuple[Service, str]:
    settings = CatalogSettings(data_dir=data_dir, port=0, udp_port=port, beacon_port=0)
    return CatalogService(settings), str(port)


def _catalog_store_unopenable(data_dir: Path, port: int) -> tuple[Service, str]:
    _no_db(data_dir, "registry.db")
    settings = CatalogSettings(data_dir=data_dir, port=0, udp_port=0, beacon_port=0)
    return CatalogService(settings), "registry.db"


def _worker_module_missing(data_dir: Path, port: int) -> tuple[Service, str]:
    settings = WorkerSettings(
        data_dir=data_dir, broker_endpoint="tcp://127.0.0.1:1", import_jobs="zbus_no_such_mod"
    )
    return WorkerService(settings), "zbus_no_such_mod"


def _sparkworker_job_missing(data_dir: Path, port: int) -> tuple[Service, str]:
    from zbus.sparkworker.config import SparkWorkerSettings
    from zbus.sparkworker.service import SparkWorkerService

    settings = SparkWorkerSettings(
        data_dir=data_dir,
        broker_endpoint="tcp://127.0.0.1:1",
        spark_jobs="squares=zbus_no_such_mod:squares",
    )
    return SparkWorkerService(settings, entry_points=[]), "zbus_no_such_mod"


# name -> (the kind of port taken first, or None; the service and what its error names)
CASES: dict[str, tuple[int | None, Case]] = {
    "eventbus collector port taken": (socket.SOCK_STREAM, _bus_collector_taken),
    "eventbus snapshot port taken": (socket.SOCK_STREAM, _bus_snapshot_taken),
    "eventbus log unopenable": (None, _bus_log_unopenable),
    "broker client port taken": (socket.SOCK_STREAM, _broker_client_taken),
    "broker store unopenable": (None, _broker_store_unopenable),
    "catalog DBP port taken": (socket.SOCK_STREAM, _catalog_dbp_taken),
    "catalog UDP port taken": (socket.SOCK_DGRAM, _catalog_udp_taken),
    "catalog store unopenable": (None, _catalog_store_unopenable),
    "worker job module missing": (None, _worker_module_missing),
    "sparkworker job module missing": (None, _sparkworker_job_missing),
}


@pytest.mark.parametrize("case", list(CASES))
async def test_a_failed_start_shuts_down_cleanly(
    case: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    kind, make = CASES[case]
    caplog.set_level(logging.INFO)
    bound: dict[str, str] = {}

    async def attempt(port: int) -> None:
        service, named = make(tmp_path, port)
        with pytest.raises(ConfigError, match=named):
            try:
                await asyncio.wait_for(service.run(), 30 * UNIT)
            finally:
                bound.update(service.endpoints)
        assert service.ctx.closed

    if kind is None:
        await attempt(0)
    else:
        with _taken(kind) as port:
            await attempt(port)
    failures = [
        f"{r.getMessage()}: {r.exc_text or r.exc_info}"
        for r in caplog.records
        if r.levelno >= logging.ERROR
    ]
    assert failures == []
    assert any(r.getMessage() == "service stopped" for r in caplog.records)
    for endpoint in bound.values():  # whatever the start bound is free again
        port = int(endpoint.rsplit(":", 1)[1])
        family = socket.SOCK_DGRAM if endpoint.startswith("udp") else socket.SOCK_STREAM
        with socket.socket(socket.AF_INET, family) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(("127.0.0.1", port))  # raises if the service still holds it
