"""Log records shipped over a real event bus to a real catalog, and served by it."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

from tests.support.bus import bus_on_base_port
from tests.support.catalog import running_catalog
from tests.support.ports import HeldPorts
from tests.support.waiting import UNIT, async_wait_until
from zbus.catalog.server.service import CatalogService
from zbus.runtime.logship import LogShipper


@contextmanager
def shipping_logger(name: str, shipper: LogShipper) -> Iterator[logging.Logger]:
    logger = logging.getLogger(name)
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    logger.addHandler(shipper)
    try:
        yield logger
    finally:
        logger.removeHandler(shipper)
        shipper.close(timeout=5 * UNIT)


async def _logs(catalog: CatalogService, path: str, **params: Any) -> list[dict[str, Any]]:
    async with httpx.AsyncClient(base_url=catalog.admin_url or "") as http:
        reply = await http.get(path, params=params)
    assert reply.status_code == 200, reply.text
    logs: list[dict[str, Any]] = reply.json()["logs"]
    return logs


async def test_shipped_records_are_served_by_the_catalog_with_filters(tmp_path: Path) -> None:
    async with (
        bus_on_base_port(tmp_path / "bus") as base,
        running_catalog(tmp_path / "catalog", eventbus_endpoint=base, log_window=50) as catalog,
    ):
        shipper = LogShipper("fake-svc", base)
        with shipping_logger("fake.service", shipper) as logger:
            # Once this first record is in the catalog its subscription is live.
            logger.info("hello")

            async def arrived(count: int) -> bool:
                return len(await _logs(catalog, "/api/v1/services/fake-svc/logs")) >= count

            await async_wait_until(lambda: arrived(1), what="the first record")
            logger.debug("cache details")
            logger.info("request served", extra={"path": "/x", "status": 200})
            logger.warning("Disk almost full", extra={"free_bytes": 1024})
            logger.error("disk full")
            try:
                raise RuntimeError("boom")
            except RuntimeError:
                logger.exception("write failed on a full disk")
            logger.warning("slow request")
            await async_wait_until(lambda: arrived(7), what="every record")

            mine = await _logs(catalog, "/api/v1/services/fake-svc/logs")
            assert [r["msg"] for r in mine] == [
                "slow request",
                "write failed on a full disk",
                "disk full",
                "Disk almost full",
                "request served",
                "cache details",
                "hello",
            ]
            served = mine[4]
            assert served["service"] == "fake-svc"
            assert served["logger"] == "fake.service"
            assert served["level"] == "info"
            assert served["path"] == "/x" and served["status"] == 200
            assert served["ts"].endswith("Z")
            assert "RuntimeError: boom" in mine[1]["exc"]

            warned = await _logs(catalog, "/api/v1/logs", level="warning", text="FULL")
            assert [r["msg"] for r in warned] == [
                "write failed on a full disk",
                "disk full",
                "Disk almost full",
            ]
            errors = await _logs(catalog, "/api/v1/services/fake-svc/logs", level="error", limit=1)
            assert [r["msg"] for r in errors] == ["write failed on a full disk"]
            assert await _logs(catalog, "/api/v1/logs", service="other") == []
            async with httpx.AsyncClient(base_url=catalog.admin_url or "") as http:
                bad = await http.get("/api/v1/logs", params={"level": "loud"})
                assert bad.status_code == 422
                everything = (await http.get("/api/v1/logs")).json()
            assert everything["services"] == {"fake-svc": 7}
        assert shipper.shipped == 7
        assert shipper.dropped == shipper.failed == 0


async def test_the_window_keeps_the_most_recent_records(tmp_path: Path) -> None:
    async with (
        bus_on_base_port(tmp_path / "bus") as base,
        running_catalog(tmp_path / "catalog", eventbus_endpoint=base, log_window=5) as catalog,
    ):
        shipper = LogShipper("chatty", base)
        with shipping_logger("chatty", shipper) as logger:
            logger.info("first")

            async def last_is(msg: str) -> bool:
                got = await _logs(catalog, "/api/v1/services/chatty/logs")
                return bool(got) and got[0]["msg"] == msg

            await async_wait_until(lambda: last_is("first"), what="the first record")
            for i in range(20):
                logger.info("line %d", i)
            await async_wait_until(lambda: last_is("line 19"), what="the last record")
            got = await _logs(catalog, "/api/v1/services/chatty/logs")
            assert [r["msg"] for r in got] == [f"line {i}" for i in range(19, 14, -1)]


def test_logging_never_blocks_when_the_bus_is_down(refused_ports: HeldPorts) -> None:
    base = f"tcp://127.0.0.1:{refused_ports.port}"  # nothing listens there
    shipper = LogShipper("lonely", base, capacity=100, batch_size=100, send_timeout=0.2)
    logger = logging.getLogger("lonely")
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    logger.addHandler(shipper)
    try:
        began = time.monotonic()
        for i in range(10_000):
            logger.info("record %d", i)
        elapsed = time.monotonic() - began
    finally:
        logger.removeHandler(shipper)
        shipper.close(timeout=1.0)
    assert elapsed < 2 * UNIT, f"logging 10,000 records took {elapsed:.2f} s"
    assert shipper.shipped == 0
    assert shipper.dropped >= 5_000  # a full queue drops the oldest; few batches were tried
    assert shipper.shipped + shipper.dropped + shipper.failed == 10_000


def test_the_shipper_skips_its_own_and_the_bus_clients_records(refused_ports: HeldPorts) -> None:
    shipper = LogShipper("quiet", f"tcp://127.0.0.1:{refused_ports.port}")
    try:

        def shipped(name: str) -> bool:
            record = logging.LogRecord(name, logging.INFO, __file__, 1, "m", None, None)
            return bool(shipper.filter(record))

        assert shipped("zbus.catalog.server.service")
        assert shipped("zbus.eventbus.clientele")
        assert not shipped("zbus.eventbus.client")
        assert not shipped("zbus.eventbus.client.sub")
        assert not shipped("zbus.runtime.logship")
    finally:
        shipper.close(timeout=0.5)
