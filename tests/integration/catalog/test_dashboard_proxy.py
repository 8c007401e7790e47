"""The catalog's proxy of the services' admin APIs and its sampled history, against a
real catalog and a real broker that registers itself with it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx

from tests.integration.catalog.test_dashboard import closed_port, node_info
from tests.support.broker import running_broker
from tests.support.catalog import running_catalog
from tests.support.waiting import async_wait_until
from zbus.broker.server.service import BrokerService
from zbus.catalog.client.node import CatalogNode
from zbus.catalog.server.service import CatalogService
from zbus.dashboard.proxy import MAX_BODY_BYTES

TOKEN = "s3cret-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@asynccontextmanager
async def catalog_and_broker(tmp_path: Path) -> AsyncIterator[tuple[CatalogService, BrokerService]]:
    """A catalog and a broker registered with it, both with the admin token set."""
    async with (
        running_catalog(tmp_path / "catalog", admin_token=TOKEN, history_interval=0.5) as catalog,
        running_broker(
            tmp_path / "broker",
            catalog_endpoint=catalog.endpoints["dbp"],
            admin_token=TOKEN,
        ) as broker,
    ):

        async def registered() -> bool:
            return any(t.name == "broker" for t in catalog.cluster_targets())

        await async_wait_until(registered, what="the broker's registration")
        yield catalog, broker


def metric(text: str, line_start: str) -> float:
    for line in text.splitlines():
        if line.startswith(line_start):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"no {line_start} in the metrics")


async def test_reads_and_actions_reach_the_registered_service(tmp_path: Path) -> None:
    async with (
        catalog_and_broker(tmp_path) as (catalog, _broker),
        httpx.AsyncClient(base_url=f"{catalog.admin_url}/api/v1/proxy") as http,
    ):
        reply = await http.get("/broker/api/v1/queues")
        assert reply.status_code == 200, reply.text
        assert reply.json() == {"queues": []}

        # An action: the catalog checks its token, the broker its own (forwarded).
        job = {"queue": "parked", "callable": "echo", "args": [1], "delay": 3600}
        refused = await http.post("/broker/api/v1/jobs", json=job)
        assert refused.status_code == 401
        assert refused.json()["detail"] == "a valid bearer token is required"
        created = await http.post("/broker/api/v1/jobs", json=job, headers=AUTH)
        assert created.status_code == 201, created.text
        job_id = created.json()["id"]
        assert created.json()["state"] == "queued"

        # The query goes along; the service's own refusal comes back with its reason.
        listed = await http.get("/broker/api/v1/jobs", params={"queue": "parked", "limit": 5})
        assert [j["id"] for j in listed.json()["jobs"]] == [job_id]
        bad = await http.get("/broker/api/v1/jobs", params={"limit": 0})
        assert bad.status_code == 422
        cancelled = await http.post(f"/broker/api/v1/jobs/{job_id}/cancel", headers=AUTH)
        assert cancelled.status_code == 200 and cancelled.json()["state"] == "cancelled"
        again = await http.post(f"/broker/api/v1/jobs/{job_id}/cancel", headers=AUTH)
        assert again.status_code == 409
        assert "not cancelled" in again.json()["detail"]
        queues = (await http.get("/broker/api/v1/queues")).json()["queues"]
        assert queues[0]["name"] == "parked" and queues[0]["cancelled"] == 1
        assert queues[0]["transitions"] == {"submitted": 1, "cancelled": 1}


async def test_the_proxy_refuses_what_is_not_a_dashboard_call(tmp_path: Path) -> None:
    async with (
        catalog_and_broker(tmp_path) as (catalog, _broker),
        httpx.AsyncClient(base_url=f"{catalog.admin_url}/api/v1/proxy") as http,
    ):
        dbp = catalog.endpoints["dbp"]
        with closed_port() as dead_port:
            dead = node_info("svc-dead", f"http://127.0.0.1:{dead_port}")
            async with (
                CatalogNode(dbp, dead, heartbeat_interval=0.5),
                CatalogNode(dbp, node_info("svc-bare"), heartbeat_interval=0.5),
            ):
                cases: list[tuple[str, str, dict[str, Any], int, str]] = [
                    ("GET", "/broker/metrics", {}, 403, "not allowed through the proxy"),
                    ("GET", "/broker/docs", {}, 403, "not allowed"),
                    ("POST", "/broker/api/v1/info", {"json": {}}, 403, "not allowed"),
                    ("GET", "/broker/api/v1/jobs/a/b", {}, 403, "not allowed"),
                    ("GET", "/nobody/api/v1/info", {}, 404, "no service 'nobody' is registered"),
                    ("GET", "/svc-bare/api/v1/info", {}, 404, "registered no admin URL"),
                    ("GET", "/svc-dead/api/v1/info", {}, 502, "svc-dead: cannot connect"),
                    ("GET", "/broker/api/v1/jobs?" + "x" * 3000, {}, 414, "query longer"),
                    (
                        "POST",
                        "/broker/api/v1/jobs",
                        {"content": b"x" * (MAX_BODY_BYTES + 1)},
                        413,
                        "body larger than 64 kB",
                    ),
                    ("POST", "/broker/api/v1/jobs", {"content": b"{nope"}, 422, "not JSON"),
                ]
                for method, path, extra, status, detail in cases:
                    reply = await http.request(method, path, headers=AUTH, **extra)
                    assert reply.status_code == status, (path, reply.text)
                    assert detail in reply.json()["detail"], (path, reply.text)

        metrics = (await http.get(f"{catalog.admin_url}/metrics")).text
        assert metric(metrics, 'zbus_catalog_proxy_requests_total{outcome="refused"}') == 7
        assert metric(metrics, 'zbus_catalog_proxy_requests_total{outcome="unknown"}') == 2
        assert metric(metrics, 'zbus_catalog_proxy_requests_total{outcome="failed"}') == 1


async def test_the_history_has_rates_from_every_service(tmp_path: Path) -> None:
    async with (
        catalog_and_broker(tmp_path) as (catalog, _broker),
        httpx.AsyncClient(base_url=catalog.admin_url or "") as http,
    ):
        for i in range(3):
            job = {"queue": "parked", "callable": "echo", "args": [i], "delay": 3600}
            reply = await http.post("/api/v1/proxy/broker/api/v1/jobs", json=job, headers=AUTH)
            assert reply.status_code == 201

        async def sampled() -> bool:
            view = (await http.get("/api/v1/history")).json()
            rates = view["queues"].get("broker", {}).get("parked")
            return rates is not None and len(view["points"]["time"]) >= 3

        await async_wait_until(sampled, what="samples of the broker with its queue")
        view = (await http.get("/api/v1/history")).json()
        assert view["interval"] == 0.5 and view["window"] == 900
        assert view["errors"] == {"catalog": None, "broker": None}
        points = view["points"]
        assert set(points) == {
            "time",
            "events_per_s",
            "jobs_per_s",
            "errors_per_s",
            "heartbeats_per_s",
        }
        assert points["time"] == sorted(points["time"])
        # The broker finished no job, the catalog heard its heartbeats; no bus here.
        assert points["jobs_per_s"][-1] == 0.0
        assert points["events_per_s"][-1] is None
        assert isinstance(points["heartbeats_per_s"][-1], float)
        # The cluster view carries the catalog's own figures.
        figures = (await http.get("/api/v1/cluster")).json()["catalog"]["figures"]
        assert figures["services"] == {"active": 1, "late": 0, "inactive": 0}
        assert figures["events"]["registrations_approved"] == 1
        assert figures["heartbeat_interval"] == 3.0
        assert figures["beacon"] is None  # beacon_port 0 in these tests
