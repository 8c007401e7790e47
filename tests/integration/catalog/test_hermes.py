"""zbus against the real Hermes (PyPI ``Hermes-lnestelroad`` 1.0.2), the DBP spec
editor's own broker, service and client, each run as a process on 127.0.0.1.

Hermes finds its broker by the ``SHALOM <port>`` beacon; here the beacon goes to a UDP
port on 127.0.0.1 that the test picks (``tests/support/hermes_peer.py``).
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.catalog import node_info, running_catalog
from tests.support.hermes import hermes_broker, hermes_python, run_hermes
from tests.support.ports import beacon_port
from tests.support.waiting import UNIT
from zbus.catalog.client.discovery import discover
from zbus.catalog.client.node import CatalogNode, NodeState
from zbus.common.protocols.dbp import HERMES


@pytest.fixture(scope="session")
def hermes() -> Path:
    """The Python of the Hermes virtualenv (made on first use, then kept)."""
    return hermes_python()


def shalom_catalog(tmp_path: Path, beacon_port: int, **settings: Any) -> Any:
    """A zbus catalog that announces itself as Hermes's broker does, on loopback."""
    return running_catalog(
        tmp_path,
        beacon_port=beacon_port,
        beacon_format="shalom",
        beacon_addresses="127.0.0.1",
        **settings,
    )


async def _record(admin_url: str, name: str) -> dict[str, Any]:
    async with httpx.AsyncClient(base_url=admin_url) as http:
        reply = await http.get(f"/api/v1/services/{name}")
        assert reply.status_code == 200, reply.text
        record: dict[str, Any] = reply.json()
        return record


async def test_a_hermes_service_updates_on_a_new_socket(tmp_path: Path, hermes: Path) -> None:
    beacon = beacon_port()
    async with shalom_catalog(tmp_path, beacon) as catalog:
        update = '{"name": "Rohan", "topics": ["weather"]}'
        said = await asyncio.to_thread(run_hermes, hermes, "service", str(beacon), "Rohan", update)
        assert said[0]["registered"] is True
        # Hermes reconnects for the UPDATE; the catalog matches it by name and answers u.u.
        assert said[1] == {"acknowledged": True}
        record = await _record(catalog.admin_url or "", "Rohan")
        assert record["time_encoding"] == "float32"
        assert record["info"]["topics"] == ["weather"]
        assert record["info"]["interfaces"] == said[0]["interfaces"]
        assert catalog.core.counters["updates"] == 1
        assert catalog.core.counters["unexpected_commands"] == 0


async def test_a_hermes_client_reads_the_catalogs_info_replies(
    tmp_path: Path, hermes: Path
) -> None:
    beacon = beacon_port()
    async with shalom_catalog(tmp_path, beacon) as catalog:
        said = await asyncio.to_thread(run_hermes, hermes, "service", str(beacon), "Rohan")
        assert said[0]["registered"] is True
        # A zbus node too: a Hermes client finds it at its "router" interface.
        async with CatalogNode(catalog.endpoints["dbp"], node_info("thumbs")):
            answers = await asyncio.to_thread(
                run_hermes, hermes, "client", str(beacon), "Rohan", "thumbs", "Gondor", ""
            )
    rohan, thumbs, gondor, listed = (a["services"] for a in answers)
    assert rohan["interfaces"] == said[0]["interfaces"] and rohan["topics"] is None
    assert thumbs["interfaces"] == {"router": {"ip": "127.0.0.1", "port": 1}}
    assert gondor is None  # the client's reading of {"Error": ...}
    assert sorted(listed) == ["Rohan", "thumbs"] and listed["Rohan"] == rohan


async def test_a_catalog_node_in_hermes_dialect_keeps_its_session_with_hermes(
    hermes: Path,
) -> None:
    beacon = beacon_port()
    with hermes_broker(hermes, beacon) as (port, broker):
        # The real Hermes beacon, heard by zbus's discovery in Hermes's dialect.
        endpoint = await discover(20 * UNIT, port=beacon, dialect=HERMES, bind="127.0.0.1")
        assert endpoint == f"tcp://127.0.0.1:{port}"
        states: list[NodeState] = []
        hermes_info = {
            "name": "Isengard",
            "interfaces": {"router": {"ip": "127.0.0.1", "port": 5999}},
            "reg_time": time.asctime(),
            "topics": None,
        }
        node = CatalogNode(
            endpoint,
            hermes_info,
            dialect=HERMES,
            heartbeat_interval=0.05,
            misses=2,
            reply_timeout=5 * UNIT,
            register_timeout=10 * UNIT,
            on_state=states.append,
        )
        async with node:
            # Hermes's broker never sends a heartbeat. Over many silent periods (0.1 s
            # each) the node keeps its first session: every UPDATE is acknowledged and
            # it never registers again.
            started = time.monotonic()
            updates = 0
            while time.monotonic() - started < 1.0 or updates < 5:
                await node.update({"topics": [f"t{updates}"]})
                updates += 1
            assert node.counters["reregistrations"] == 0
            assert states == [NodeState.REGISTERING, NodeState.REGISTERED]
            # Info requests in Hermes's shape, from the real broker.
            me = await node.service("Isengard")
            assert me is not None and me.info["interfaces"] == hermes_info["interfaces"]
            assert me.info["topics"] == [f"t{updates - 1}"]  # the UPDATEs, by name
            assert await node.service("Gondor") is None
            assert sorted(await node.services()) == ["Isengard"]
        assert broker.poll() is None  # the broker is still up
