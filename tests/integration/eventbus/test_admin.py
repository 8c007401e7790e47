"""The event bus admin API over real HTTP: publish, read back, snapshot, topics, bus, auth."""

from __future__ import annotations

from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

from tests.support.bus import running_bus


async def test_publish_and_read_back_through_the_admin_api(tmp_path: Path) -> None:
    async with (
        running_bus(tmp_path) as bus,
        httpx.AsyncClient(base_url=bus.admin_url or "") as http,
    ):
        first = await http.post("/api/v1/events", json={"topic": "/demo/a", "data": {"v": 1}})
        assert first.status_code == 200
        assert first.json()["seq"] == 1
        again = await http.post(
            "/api/v1/events",
            json={"topic": "/demo/a", "data": {"v": 1}, "uuid": first.json()["uuid"]},
        )
        assert again.json()["seq"] == 1  # idempotent by uuid
        await http.post("/api/v1/events", json={"topic": "/demo/a", "data": {"v": 2}})
        await http.post("/api/v1/events", json={"topic": "/other", "data_base64": "wQ=="})

        recent = (await http.get("/api/v1/events", params={"prefix": "/demo/"})).json()
        assert [(e["seq"], e["data"]) for e in recent["events"]] == [(2, {"v": 2}), (1, {"v": 1})]
        snap = (await http.get("/api/v1/snapshot")).json()
        assert [(e["topic"], e["seq"]) for e in snap["events"]] == [("/demo/a", 2), ("/other", 3)]
        assert snap["events"][1]["data_encoding"] == "base64"
        paged = (await http.get("/api/v1/snapshot", params={"limit": 1})).json()
        assert [e["topic"] for e in paged["events"]] == ["/demo/a"] and paged["next"] == "/demo/a"
        topics = (await http.get("/api/v1/topics")).json()["topics"]
        assert [(t["topic"], t["count"], t["last_seq"]) for t in topics] == [
            ("/demo/a", 2, 2),
            ("/other", 1, 3),
        ]
        state = (await http.get("/api/v1/bus")).json()
        assert state["sequence"] == 3 and state["log"]["events"] == 3

        text = (await http.get("/metrics")).text
        families = {f.name: f for f in text_string_to_metric_families(text)}
        assert families["zbus_eventbus_events_stored"].samples[0].value == 3
        assert families["zbus_eventbus_events_duplicate"].samples[0].value == 1
        assert families["zbus_eventbus_sequence"].samples[0].value == 3


async def test_bad_requests_are_clear_errors_and_counted(tmp_path: Path) -> None:
    async with (
        running_bus(tmp_path, admin_token="s3cret") as bus,
        httpx.AsyncClient(base_url=bus.admin_url or "") as http,
    ):
        denied = await http.post("/api/v1/events", json={"topic": "/x"})
        assert denied.status_code == 401
        auth = {"authorization": "Bearer s3cret"}
        empty = await http.post("/api/v1/events", json={"topic": ""}, headers=auth)
        assert empty.status_code == 422 and "topic" in empty.text
        nul = await http.post("/api/v1/events", json={"topic": "\u0000x"}, headers=auth)
        assert nul.status_code == 422 and "NUL" in nul.json()["detail"]
        b64 = await http.post(
            "/api/v1/events", json={"topic": "/x", "data_base64": "%%"}, headers=auth
        )
        assert b64.status_code == 422
        ok = await http.post("/api/v1/events", json={"topic": "/x"}, headers=auth)
        assert ok.status_code == 200 and ok.json()["seq"] == 1
        families = {
            f.name: f for f in text_string_to_metric_families((await http.get("/metrics")).text)
        }
        rejected = {
            s.labels["reason"]: s.value
            for s in families["zbus_admin_rejected_requests"].samples
            if s.name.endswith("_total")
        }
        assert rejected["unauthorised"] == 1 and rejected["invalid"] >= 1


async def test_what_the_dashboard_reads_tails_pages_counts_and_doors(tmp_path: Path) -> None:
    async with (
        running_bus(tmp_path) as bus,
        httpx.AsyncClient(base_url=bus.admin_url or "") as http,
    ):
        for topic in ("/t/a", "/t/b", "/t/a", "/t/c"):
            reply = await http.post("/api/v1/events", json={"topic": topic, "data": 1})
            assert reply.status_code == 200
        # A live tail asks for what came after the last sequence it has.
        tail = (await http.get("/api/v1/events", params={"prefix": "/t/", "after": 2})).json()
        assert [e["seq"] for e in tail["events"]] == [4, 3]
        none = (await http.get("/api/v1/events", params={"after": 4})).json()
        assert none["events"] == []
        assert (await http.get("/api/v1/events", params={"after": -1})).status_code == 422
        assert (await http.get("/api/v1/events", params={"after": 2**64})).status_code == 422

        # Topics come in pages with the time of each one's last event.
        page = (await http.get("/api/v1/topics", params={"prefix": "/t/", "limit": 2})).json()
        assert [(t["topic"], t["count"]) for t in page["topics"]] == [("/t/a", 2), ("/t/b", 1)]
        assert page["next"] == "/t/b"
        assert page["topics"][0]["last_ts"].endswith("Z")
        rest = (await http.get("/api/v1/topics", params={"after": "/t/b", "limit": 2})).json()
        assert [t["topic"] for t in rest["topics"]] == ["/t/c"] and rest["next"] is None

        state = (await http.get("/api/v1/bus")).json()
        assert state["counters"]["received"] == 4 and state["counters"]["stored"] == 4
        assert state["counters"]["duplicates"] == 0
        assert sum(state["counters"]["rejected"].values()) == 0
        assert state["counters"]["dropped"]["publisher"] == 0
        spec = state["doors"]["spec"]
        assert spec["endpoint"] == bus.endpoints["snapshot"]
        assert spec["subscribers"] == spec["peers"].get("publisher", 0)
        assert spec["subscriptions"] == len(state["subscriptions"])
