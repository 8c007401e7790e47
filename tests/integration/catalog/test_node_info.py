"""CatalogNode's info requests against the real catalog service, in both dialects, and
the node's reading of APPROVED's instructions, on real sockets on 127.0.0.1."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import zmq
import zmq.asyncio

from tests.integration.catalog.test_node import FakeCatalog, register
from tests.support.catalog import node_info, running_catalog
from tests.support.waiting import UNIT
from zbus.catalog.client.node import CatalogNode, CatalogReplyError, CatalogUnavailable
from zbus.common.protocols.dbp import HERMES, Awk, InfoReply, InfoRequest, Update

HERMES_INFO = {
    "name": "Rohan",
    "interfaces": {"router": {"ip": "127.0.0.1", "port": 5247}},
    "reg_time": "Sun Nov 22 08:35:32 2026",
    "topics": None,
}


@pytest.fixture
async def catalog() -> AsyncIterator[FakeCatalog]:
    ctx = zmq.asyncio.Context()
    fake = FakeCatalog(ctx)
    try:
        yield fake
    finally:
        fake.close()
        ctx.term()


@pytest.mark.parametrize("dialect", ["spec", "hermes"])
async def test_a_node_asks_the_catalog_about_services(tmp_path: Path, dialect: str) -> None:
    async with running_catalog(tmp_path) as service:
        endpoint = service.endpoints["dbp"]
        async with CatalogNode(endpoint, node_info("thumbs")) as zbus_node:
            if dialect == "hermes":
                node = CatalogNode(endpoint, HERMES_INFO, dialect=HERMES)
            else:
                node = CatalogNode(endpoint, {**node_info("resizer"), "port": "7000"})
            async with node:
                me = await node.service(node.info["name"])
                other = await zbus_node.service(node.info["name"])
                assert me is not None and other is not None
                if dialect == "hermes":
                    assert me.info == {**HERMES_INFO, "heartbeat_interval": 1.0}
                    assert me.state is None  # Hermes's shape says nothing of liveness
                else:
                    assert me.info["port"] == 7000  # stored in one form: an integer
                    assert me.state == "active"
                assert other.info == me.info and other.state == "active"
                assert await node.service("nobody") is None
                listed = await node.services()
                assert sorted(listed) == sorted(["thumbs", node.info["name"]])
                # (In Hermes's shape with the keys a Hermes client reads added.)
                assert node_info("thumbs").items() <= listed["thumbs"].info.items()
                assert node.counters["info_requests"] == 3
            # Info requests need no registration.
            assert (await node.services()).keys() == {"thumbs"}


async def test_an_info_request_without_an_answer_or_with_garbage(catalog: FakeCatalog) -> None:
    node = CatalogNode(catalog.endpoint, node_info("resizer"), reply_timeout=0.2 * UNIT)
    with pytest.raises(CatalogUnavailable, match="info request"):
        await node.service("anyone")
    await catalog.recv_command(InfoRequest)  # the unanswered one

    async def answer(body: Any) -> None:
        identity, _ = await catalog.recv_command(InfoRequest)
        if isinstance(body, list):
            await catalog.router.send_multipart([identity, *body])
        else:
            await catalog.send(identity, InfoReply(body, 1.0))

    node.reply_timeout = 5 * UNIT
    for body in ([b"", b"Error: Invalid command type.", b"\x00\x00\x80?", b""], {"x": 1}):
        asking = asyncio.create_task(node.service("anyone"))
        await answer(body)
        with pytest.raises(CatalogReplyError):
            await asking
    assert node.counters["malformed"] == 2
    with pytest.raises(ValueError, match="service name"):
        await node.service("*")


async def test_approved_instructions_out_of_range_are_not_trusted(catalog: FakeCatalog) -> None:
    node = CatalogNode(catalog.endpoint, node_info("resizer"), heartbeat_interval=0.5, misses=3)
    await register(catalog, node, {"heartbeat_interval": 1e-9, "heartbeat_misses": 10**30})
    try:
        # A catalog's (or a stranger's) absurd numbers would make the node beat in a
        # tight loop; it keeps its own, counts and logs what it refused.
        assert node.heartbeat_interval == 0.5 and node.misses == 3
        assert node.counters["malformed"] == 2
    finally:
        await node.stop()


async def test_a_node_in_hermes_dialect_names_itself_in_update(catalog: FakeCatalog) -> None:
    node = CatalogNode(catalog.endpoint, HERMES_INFO, dialect=HERMES)
    identity = await register(catalog, node)
    try:
        pending = asyncio.create_task(node.update({"topics": ["x"]}))
        _, cmd = await catalog.recv_command(Update)
        assert isinstance(cmd, Update) and cmd.changes == {"name": "Rohan", "topics": ["x"]}
        await catalog.send(identity, Awk(1.0))
        await asyncio.wait_for(pending, 5 * UNIT)
    finally:
        await node.stop()
