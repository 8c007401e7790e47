"""LogWindow: bounds, filters and ordering of the recent log records."""

from __future__ import annotations

from typing import Any

import pytest

from zbus.catalog.server.logs import LogWindow, level_number


def rec(service: str, msg: str, level: str = "info", **extra: Any) -> dict[str, Any]:
    return {"ts": "2024-01-01T00:00:00.000Z", "level": level, "service": service, "logger": "t"} | {
        "msg": msg,
        **extra,
    }


def msgs(records: list[dict[str, Any]]) -> list[str]:
    return [r["msg"] for r in records]


def test_each_service_keeps_only_its_most_recent_records() -> None:
    window = LogWindow(size=3)
    for i in range(5):
        window.add(rec("a", f"a{i}"))
    window.add(rec("b", "b0"))
    assert msgs(window.query("a")) == ["a4", "a3", "a2"]
    assert msgs(window.query("b")) == ["b0"]
    assert window.services() == {"a": 3, "b": 1}
    assert window.received == 6


def test_across_services_newest_arrival_first() -> None:
    window = LogWindow(size=10)
    for name in ("a1", "b1", "a2", "c1", "b2"):
        window.add(rec(name[0], name))
    assert msgs(window.query()) == ["b2", "c1", "a2", "b1", "a1"]
    assert msgs(window.query(limit=2)) == ["b2", "c1"]
    assert window.query(limit=0) == []
    assert window.query("nobody") == []


def test_level_is_a_minimum_and_text_a_case_insensitive_substring() -> None:
    window = LogWindow()
    window.add(rec("a", "disk almost FULL", "warning"))
    window.add(rec("a", "request served", "info"))
    window.add(rec("a", "disk full", "error"))
    window.add(rec("a", "details", "debug"))
    window.add(rec("a", "odd level", "level 5"))
    window.add(rec("a", "boom", "critical"))
    assert msgs(window.query("a", level="warning")) == ["boom", "disk full", "disk almost FULL"]
    assert msgs(window.query("a", level="ERROR")) == ["boom", "disk full"]
    assert msgs(window.query("a", level="warn", text="Full")) == ["disk full", "disk almost FULL"]
    assert msgs(window.query(text="DETAIL")) == ["details"]
    assert len(window.query("a", level="debug")) == 5  # an unknown level ranks lowest
    assert len(window.query("a")) == 6
    # The limit counts matches, not records looked at.
    assert msgs(window.query(level="error", limit=1)) == ["boom"]


def test_unknown_query_level_is_an_error() -> None:
    with pytest.raises(ValueError, match="unknown level"):
        LogWindow().query(level="loud")
    assert level_number("fatal") == level_number("critical")


def test_records_without_a_service_are_counted_not_kept() -> None:
    window = LogWindow()
    assert not window.add({"msg": "who?"})
    assert not window.add({"service": "", "msg": "who?"})
    assert window.malformed == 2
    assert window.query() == []


def test_least_recent_service_is_forgotten_past_the_service_bound() -> None:
    window = LogWindow(size=2, max_services=2)
    window.add(rec("a", "a0"))
    window.add(rec("b", "b0"))
    window.add(rec("a", "a1"))  # a is now the most recent
    window.add(rec("c", "c0"))
    assert window.services() == {"a": 2, "c": 1}


def test_a_kept_record_is_a_copy() -> None:
    window = LogWindow()
    original = rec("a", "m")
    window.add(original)
    original["msg"] = "changed"
    assert msgs(window.query()) == ["m"]


def test_bad_bounds_are_refused() -> None:
    with pytest.raises(ValueError):
        LogWindow(size=0)
    with pytest.raises(ValueError):
        LogWindow(max_services=0)
