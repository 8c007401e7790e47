"""The catalog node's parts without I/O: the catalog's silence (time passed in), APPROVED's
instructions and their ranges, and info replies in both dialects' shapes."""

from __future__ import annotations

from typing import Any

import pytest

from zbus.catalog.client.base import catalog_silence, read_instructions, udp_target
from zbus.catalog.client.info import ServiceInfo, read_list, read_one
from zbus.catalog.client.node import CatalogNode, CatalogReplyError
from zbus.common.protocols.dbp import HERMES, SPEC

I = 1.0  # noqa: E741


@pytest.mark.parametrize(
    ("silent", "verdict"), [(0.0, None), (1.49, None), (1.5, "missed"), (2.99, "missed"),
                            (3.0, "gone"), (1e9, "gone")],
)  # fmt: skip
def test_the_catalogs_silence_in_zbus_dialect(silent: float, verdict: str | None) -> None:
    assert catalog_silence(silent, I, 3, hermes=False) == verdict


@pytest.mark.parametrize("silent", [0.0, 1.5, 3.0, 1e9])
def test_a_hermes_brokers_silence_means_nothing(silent: float) -> None:
    # Hermes's broker never sends a heartbeat: a node in its dialect never gives up on it.
    assert catalog_silence(silent, I, 3, hermes=True) is None


@pytest.mark.parametrize(
    ("config", "interval", "misses", "bad"),
    [
        ({"heartbeat_interval": 2, "heartbeat_misses": 4}, 2.0, 4, []),
        ({}, None, None, []),
        ({"heartbeat_interval": 1e-9}, None, None, ["heartbeat_interval"]),
        ({"heartbeat_interval": 1e308}, None, None, ["heartbeat_interval"]),
        ({"heartbeat_interval": "2"}, None, None, ["heartbeat_interval"]),
        ({"heartbeat_interval": True}, None, None, ["heartbeat_interval"]),
        ({"heartbeat_misses": 0}, None, None, ["heartbeat_misses"]),
        ({"heartbeat_misses": 10**100}, None, None, ["heartbeat_misses"]),
        ({"heartbeat_misses": 3.0}, None, None, ["heartbeat_misses"]),
    ],
)
def test_approved_instructions_out_of_range_are_not_trusted(
    config: dict[str, Any], interval: float | None, misses: int | None, bad: list[str]
) -> None:
    got_interval, got_misses, problems = read_instructions(config)
    assert (got_interval, got_misses) == (interval, misses)
    assert [p.split(" ")[0] for p in problems] == bad


@pytest.mark.parametrize(
    "value", ["h:" + "9" * 5000, "h:\u00b2", "h:70000", "h:0", 0, 65536, [1, 2], ["h", "x"]]
)
def test_an_unusable_udp_heartbeat_address_is_ignored(value: Any) -> None:
    assert udp_target("tcp://127.0.0.1:5246", value) is None


def test_node_settings_have_ranges() -> None:
    for bad in ({"heartbeat_interval": 0.0}, {"heartbeat_interval": 1e9},
                {"misses": 0}, {"misses": 1000}, {"misses": 2.5}):  # fmt: skip
        with pytest.raises(ValueError, match=next(iter(bad))):
            CatalogNode("tcp://127.0.0.1:1", {"name": "x"}, **bad)


# ---------------------------------------------------------------- info replies

VIEW = {"state": "active", "confirmed": True, "info": {"name": "a", "port": 1}}


def test_zbus_shaped_replies() -> None:
    assert read_one("a", {"service": "a", **VIEW}, SPEC) == ServiceInfo(
        "a", {"name": "a", "port": 1}, "active"
    )
    warning = {"service": "b", "state": "gone", "warning": "inactive: 'b' ..."}
    assert read_one("b", warning, SPEC) is None
    assert read_list({"services": {"a": VIEW}}, SPEC) == {
        "a": ServiceInfo("a", {"name": "a", "port": 1}, "active")
    }


def test_hermes_shaped_replies() -> None:
    entry = {"interfaces": {"router": {"ip": "h", "port": 1}}, "reg_time": "t", "topics": None}
    assert read_one("a", {"a": entry}, HERMES) == ServiceInfo("a", {"name": "a", **entry})
    assert read_one("a", {"Error": "No Registered Service With the Name a"}, HERMES) is None
    assert read_list({"a": entry}, HERMES) == {"a": ServiceInfo("a", {"name": "a", **entry})}
    assert read_list({}, HERMES) == {}


@pytest.mark.parametrize(
    ("query", "body", "dialect"),
    [
        ("a", {"services": {}}, SPEC),
        ("a", {"service": "other", **VIEW}, SPEC),
        ("a", {"service": "a", "state": "active", "info": "x"}, SPEC),
        ("a", {"service": "a", "state": "weird", "info": {}}, SPEC),
        ("", {"service": "a"}, SPEC),
        ("", {"services": {"a": {"state": "active"}}}, SPEC),
        ("a", {"b": {}}, HERMES),
        ("a", {"a": "x"}, HERMES),
        ("", {"a": 1}, HERMES),
    ],
)
def test_replies_in_neither_shape_are_errors(
    query: str, body: dict[str, Any], dialect: Any
) -> None:
    with pytest.raises(CatalogReplyError, match="info REPLY"):
        if query:
            read_one(query, body, dialect)
        else:
            read_list(body, dialect)
