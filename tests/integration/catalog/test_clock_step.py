"""A running catalog whose wall clock is stepped an hour each way: no node changes state.

The service reads a ``SteppableClock``: the machine's monotonic clock, and a wall clock
the test sets forward and back as an operator or NTP may. Liveness is judged on the
monotonic clock, so a node that beats stays active through both steps, and a silent one
turns inactive when its silence says so, not an hour early or an hour late.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import zmq
import zmq.asyncio

from tests.support.catalog import running_catalog
from tests.support.waiting import UNIT, async_wait_until
from zbus.catalog.client.node import CatalogNode
from zbus.catalog.server.service import CatalogService
from zbus.common.clock import SteppableClock
from zbus.common.protocols import dbp

HOUR = 3600.0
INTERVAL = 0.2
MISSES = 20  # a silent node is inactive after 4 s: room for a loaded machine


def _info(name: str) -> dict[str, Any]:
    return {"name": name, "ip": "127.0.0.1", "port": 1, "function": "test",
            "heartbeat_interval": INTERVAL}  # fmt: skip


def _states(catalog: CatalogService) -> dict[str, str]:
    return {r.name: r.state for r in catalog.core.nodes()}


async def _watch(catalog: CatalogService, seconds: float) -> list[dict[str, str]]:
    """The nodes' states every 50 ms for ``seconds``."""
    seen = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        seen.append(_states(catalog))
        await asyncio.sleep(0.05)
    return seen


async def test_a_wall_clock_step_an_hour_each_way_changes_no_node_state(tmp_path: Path) -> None:
    clock = SteppableClock()
    settings = {"heartbeat_interval": INTERVAL, "heartbeat_misses": MISSES, "grace": 60.0}
    async with running_catalog(tmp_path, clock, **settings) as catalog:
        beating = CatalogNode(catalog.endpoints["dbp"], _info("beating"),
                              heartbeat_interval=INTERVAL, misses=MISSES)  # fmt: skip
        await beating.start()
        ctx = zmq.asyncio.Context()
        silent = ctx.socket(zmq.DEALER)  # registers, then never says a word
        try:
            silent.connect(catalog.endpoints["dbp"])
            await silent.send_multipart(dbp.encode(dbp.Registration(_info("silent"), 1.0)))
            reply = dbp.decode(await asyncio.wait_for(silent.recv_multipart(), 10 * UNIT))
            assert isinstance(reply, dbp.Approved)
            registered = time.monotonic()
            await async_wait_until(
                lambda: asyncio.sleep(0, _states(catalog).get("silent") == "late"),
                what="the silent node to be late",
            )

            clock.step(HOUR)
            ahead = await _watch(catalog, 1.0)
            clock.step(-2 * HOUR)
            behind = await _watch(catalog, 1.0)
            # Whatever the wall clock says, the beating node is active and the silent one
            # is still late (not gone: wall time would have made its silence an hour).
            if time.monotonic() - registered < INTERVAL * MISSES - 0.5:
                assert all(s == {"beating": "active", "silent": "late"} for s in ahead + behind)
            else:  # a very slow machine: at least nobody expired or came back
                assert all(s["beating"] == "active" for s in ahead + behind)
                assert all(s["silent"] in ("late", "inactive") for s in ahead + behind)

            # An hour behind, the silent node still turns inactive when its silence (on
            # the monotonic clock) says so; wall time would have kept it late an hour.
            await async_wait_until(
                lambda: asyncio.sleep(0, _states(catalog)["silent"] == "inactive"),
                within=INTERVAL * MISSES + 5,
                what="the silent node to be inactive",
            )
            assert time.monotonic() - registered >= INTERVAL * MISSES - 0.05
            assert _states(catalog)["beating"] == "active"

            # Shown times are wall times (stepped); the uptime is an interval.
            beating_record = next(r for r in catalog.core.nodes() if r.name == "beating")
            assert abs(beating_record.last_heartbeat - (time.time() - HOUR)) < 10
            uptime = catalog.core.uptime("beating", clock.monotonic())
            assert uptime is not None and 0 < uptime < 60
        finally:
            silent.close(linger=0)
            ctx.term()
            await beating.stop()
