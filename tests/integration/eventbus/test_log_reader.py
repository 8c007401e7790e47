"""LogReader: paging a real bus's log over the SNAPSHOT socket (ZB-SNAPSHOT, mode "log").

The reader is blocking, so it runs in a worker thread while the bus runs on the test's loop.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterable
from pathlib import Path

import pytest
import zmq
import zmq.asyncio

from tests.support.bus import new_event, running_bus
from tests.support.waiting import UNIT
from zbus.common.protocols import eventbus_ext as ext
from zbus.eventbus.client import (
    AsyncEventBusClient,
    BusEndpoints,
    LogPage,
    LogQueryError,
    LogReader,
)


def read_all(
    endpoint: BusEndpoints | str, subtrees: Iterable[str] | str, limit: int
) -> list[LogPage]:
    """Every page from the start, following the cursor until there is none."""
    pages = []
    with LogReader(endpoint, timeout=10 * UNIT) as reader:
        after = 0
        while True:
            page = reader.page(subtrees, after, limit)
            pages.append(page)
            if page.next_after is None:
                return pages
            after = page.next_after


async def test_pages_the_log_by_cursor_and_subtree(tmp_path: Path) -> None:
    async with running_bus(tmp_path) as service:
        ends = BusEndpoints.from_info(service.info())
        async with AsyncEventBusClient(ends, producer="log-test") as c:
            items = [(f"/{'ab'[i % 2]}/{i}", {"i": i}) for i in range(25)]
            assert await c.publish_many(items, confirm=True) == list(range(1, 26))

        pages = await asyncio.to_thread(read_all, ends, (), 10)
        assert [len(p.events) for p in pages] == [10, 10, 5]
        assert [p.next_after for p in pages] == [10, 20, None]
        assert {p.last_sequence for p in pages} == {25}
        events = [e for p in pages for e in p.events]
        assert [(e.seq, e.topic) for e in events] == [(i + 1, t) for i, (t, _) in enumerate(items)]
        assert events[3].unpack() == {"i": 3} and events[3].producer == "log-test"
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", events[3].ts)

        # Under a subtree the cursor is the last sequence returned; the bus looks one
        # event ahead, so a full last page knows it is the last.
        pages = await asyncio.to_thread(read_all, ends.snapshot, ("/b/",), 4)
        assert [[e.seq for e in p.events] for p in pages] == [
            [2, 4, 6, 8],
            [10, 12, 14, 16],
            [18, 20, 22, 24],
        ]
        assert [p.next_after for p in pages] == [8, 16, None]

        def more() -> None:
            with LogReader(ends.snapshot, timeout=10 * UNIT) as reader:
                page = reader.page("/a/", after=20, limit=100)
                assert [e.seq for e in page.events] == [21, 23, 25]
                assert page.next_after is None
                assert reader.page(after=25) == LogPage([], None, 25)
                assert reader.last_sequence() == 25
                with pytest.raises(ValueError, match="limit"):
                    reader.page(limit=ext.MAX_LIMIT + 1)
                with pytest.raises(ValueError, match="after"):
                    reader.page(after=1 << 63)

        await asyncio.to_thread(more)


async def test_no_bus_at_the_endpoint_is_a_timeout_naming_it(refused_port: int) -> None:
    endpoint = f"tcp://127.0.0.1:{refused_port}"
    with (
        LogReader(endpoint, timeout=0.2 * UNIT) as reader,
        pytest.raises(TimeoutError, match=re.escape(endpoint)),
    ):
        await asyncio.to_thread(reader.page)


async def test_a_late_answer_is_not_taken_for_the_next_query_and_refusals_raise() -> None:
    ctx = zmq.asyncio.Context.instance()
    router = ctx.socket(zmq.ROUTER)
    router.linger = 0
    endpoint = f"tcp://127.0.0.1:{router.bind_to_random_port('tcp://127.0.0.1')}"
    reader = LogReader(endpoint, timeout=0.2 * UNIT)
    try:
        with pytest.raises(TimeoutError, match=re.escape(endpoint)):
            await asyncio.to_thread(reader.page)
        unanswered = await asyncio.wait_for(router.recv_multipart(), 10 * UNIT)

        reader.timeout = 10 * UNIT
        answer = asyncio.create_task(asyncio.to_thread(reader.page, "/x", 7, 1))
        asked = await asyncio.wait_for(router.recv_multipart(), 10 * UNIT)
        assert ext.decode_snapshot_request(asked[1:]) == ext.SnapshotQuery(
            ("/x",), 7, None, "log", 1
        )
        e = new_event("/x/late")
        late = [[1, e.topic, e.producer, e.timestamp, e.uuid, e.data]]
        await router.send_multipart([unanswered[0], *ext.encode_page(late, "1", 1)])
        await router.send_multipart([asked[0], *ext.encode_page([], None, 9)])
        assert await answer == LogPage([], None, 9)

        refused = asyncio.create_task(asyncio.to_thread(reader.page))
        asked = await asyncio.wait_for(router.recv_multipart(), 10 * UNIT)
        await router.send_multipart([asked[0], *ext.encode(ext.Error("storage failed"))])
        with pytest.raises(LogQueryError, match=f"{re.escape(endpoint)}.*storage failed"):
            await refused
    finally:
        reader.close()
        router.close(linger=0)
