"""The launcher's state file in the catalog's cluster view: restarts, given-up services."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from zbus.dashboard.supervised import merge_supervised, read_supervised


def _entry(name: str, admin: str | None) -> dict[str, Any]:
    return {"name": name, "state": "active", "admin": admin, "info": {}, "ready": True}


def _sup(name: str, port: int, state: str, **more: Any) -> dict[str, Any]:
    return {
        "name": name,
        "admin": f"http://127.0.0.1:{port}",
        "state": state,
        "restarts": 0,
        **more,
    }


def test_entries_get_their_restarts_by_admin_url() -> None:
    catalog = {"name": "catalog", "endpoints": {"admin": "http://127.0.0.1:8701"}}
    services = [_entry("eventbus", "http://127.0.0.1:8702/"), _entry("remote", None)]
    supervised = [
        _sup("catalog", 8701, "ready", restarts=2),
        _sup("eventbus", 8702, "ready", restarts=1),
    ]
    merged = merge_supervised(catalog, services, supervised)
    assert (catalog["restarts"], catalog["supervised"]) == (2, "ready")
    assert (merged[0]["restarts"], merged[0]["supervised"]) == (1, "ready")
    assert "restarts" not in merged[1] and len(merged) == 2


def test_a_down_service_the_catalog_does_not_know_gets_an_entry() -> None:
    supervised = [
        _sup("broker", 8703, "given up", restarts=4, failed_starts=5, last_exit="exit status 2"),
        _sup("worker", 8705, "restarting", restarts=1, last_exit="killed by SIGKILL"),
        _sup("echo", 9000, "ready"),  # not registered, but up: nothing to say
    ]
    merged = merge_supervised({}, [], supervised)
    assert [e["name"] for e in merged] == ["broker", "worker"]
    broker, worker = merged
    assert broker["ready"] is False and broker["supervised"] == "given up"
    assert broker["error"] == "given up after 5 failed starts (last: exit status 2)"
    assert worker["error"] == "restarting (last: killed by SIGKILL)"
    assert worker["admin"] == "http://127.0.0.1:8705"


def test_without_a_launcher_nothing_changes(tmp_path: Path) -> None:
    services = [_entry("eventbus", "http://127.0.0.1:8702")]
    assert merge_supervised({}, services, None) == [_entry("eventbus", "http://127.0.0.1:8702")]
    assert read_supervised(None) is None
    assert read_supervised(tmp_path / "missing.json") is None
    (tmp_path / "bad.json").write_text("{not json")
    assert read_supervised(tmp_path / "bad.json") is None
    (tmp_path / "ok.json").write_text(
        json.dumps({"launcher": 1, "supervised": [{"name": "a"}, 3, {"name": 4}]})
    )
    assert read_supervised(tmp_path / "ok.json") == [{"name": "a"}]
