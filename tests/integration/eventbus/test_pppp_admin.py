"""The PPPP door's admin reads go through the door's thread, which owns its core: the
status page and the door's line in ``/api/v1/bus`` are computed there, and a door that
does not answer makes the admin API answer 503, not read the core from its own thread."""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.bus import bus_thread
from tests.support.pppp import metrics
from zbus.eventbus.doors.pppp import PpppDoor
from zbus.eventbus.doors.pppp import admin as pppp_admin
from zbus.eventbus.server.service import EventBusService


@pytest.fixture
def bus(tmp_path: Path) -> Iterator[EventBusService]:
    with bus_thread(tmp_path, pppp_port=0) as service:
        yield service


def get(bus: EventBusService, path: str) -> tuple[int, Any]:
    try:
        with urllib.request.urlopen(f"{bus.admin_url}{path}", timeout=30) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_the_status_and_the_bus_line_are_computed_on_the_door_thread(
    bus: EventBusService, monkeypatch: pytest.MonkeyPatch
) -> None:
    door = bus.pppp
    assert door is not None
    threads: list[tuple[str, int]] = []
    for name in ("pppp_status", "pppp_summary", "counts"):
        real = getattr(pppp_admin, name)

        def spy(*args: Any, _real: Any = real, _name: str = name) -> Any:
            threads.append((_name, threading.get_ident()))
            return _real(*args)

        monkeypatch.setattr(pppp_admin, name, spy)
    status, page = get(bus, "/api/v1/pppp")
    assert status == 200 and page["subscribers"] == [] and page["endpoint"] == door.endpoint
    status, info = get(bus, "/api/v1/bus")
    assert status == 200
    assert info["doors"]["pppp"] == {
        "endpoint": door.endpoint,
        "serving": True,
        "peers": {"live": 0, "grace": 0},
        "subscribers": 0,
        "subscriptions": 0,
        "malformed": 0,
    }
    assert metrics(bus.admin_url or "")["zbus_pppp_channels"] == 0
    assert {name for name, _ in threads} == {"pppp_status", "pppp_summary", "counts"}
    assert {ident for _, ident in threads} == {door.ident}


def test_a_door_that_does_not_answer_makes_the_admin_api_answer_503(
    bus: EventBusService, monkeypatch: pytest.MonkeyPatch
) -> None:
    door = bus.pppp
    assert door is not None
    monkeypatch.setattr(pppp_admin, "ADMIN_TIMEOUT", 0.2)
    release = threading.Event()

    def stuck(_: PpppDoor) -> None:
        release.wait(30)

    held = door.submit(stuck)  # the door's thread waits in here
    try:
        status, body = get(bus, "/api/v1/pppp")
        assert status == 503
        assert "did not answer within 0.2 s" in body["detail"]
        status, body = get(bus, "/api/v1/bus")
        assert status == 503
    finally:
        release.set()
    held.result(30)
    assert get(bus, "/api/v1/pppp")[0] == 200  # answers again


def test_a_stopped_door_answers_503_at_once(bus: EventBusService) -> None:
    door = bus.pppp
    assert door is not None
    door.stop()
    door.join(30)
    status, body = get(bus, "/api/v1/pppp")
    assert status == 503
    assert "has stopped" in body["detail"]
