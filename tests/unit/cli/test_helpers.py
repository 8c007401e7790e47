"""The ``zbus`` command's pure parts: how it finds services and prints values."""

from __future__ import annotations

import argparse

import msgpack
import pytest

from zbus.cli.common import CliError, Cluster, located, reachable, status_error
from zbus.cli.logs import matches, render
from zbus.cli.output import data_view, duration, identity, size


def test_unspecified_hosts_are_replaced_by_where_the_service_is() -> None:
    assert reachable("tcp://0.0.0.0:5556", "10.0.0.7") == "tcp://10.0.0.7:5556"
    assert reachable("http://[::]:8702/", "fd00::1") == "http://[fd00::1]:8702"
    assert reachable("tcp://10.0.0.8:5556", "10.0.0.7") == "tcp://10.0.0.8:5556"
    assert reachable("tcp://0.0.0.0:5556", None) == "tcp://0.0.0.0:5556"
    assert reachable("not a url:x", "h") == "not a url:x"


def test_a_catalog_entry_located() -> None:
    entry = {
        "name": "bus-1",
        "state": "active",
        "udp_address": "10.1.2.3:40000",
        "info": {
            "function": "eventbus",
            "admin": "http://0.0.0.0:8700",
            "endpoints": {"snapshot": "tcp://0.0.0.0:5556", "bad": 7},
        },
    }
    where = located(entry)
    assert where.function == "eventbus"
    assert where.admin == "http://10.1.2.3:8700"
    assert where.endpoints == {"snapshot": "tcp://10.1.2.3:5556"}
    bare = located({"name": "x", "info": "nonsense"})
    assert (bare.function, bare.admin, dict(bare.endpoints)) == ("x", None, {})


def test_flags_then_variables_then_the_catalog() -> None:
    args = argparse.Namespace(bus="tcp://flag:1", catalog=None, timeout=None)
    env = {"ZBUS_EVENTBUS_ENDPOINT": "tcp://env:2", "ZBUS_CATALOG_URL": "http://cat:9/"}
    cluster = Cluster(args, env)
    assert cluster.bus_endpoint() == "tcp://flag:1"
    assert cluster.catalog == "http://cat:9"
    assert Cluster(argparse.Namespace(bus=None), env).bus_endpoint() == "tcp://env:2"
    with pytest.raises(CliError, match="--timeout"):
        Cluster(argparse.Namespace(timeout=-1), {})


def test_api_errors_read_as_one_line() -> None:
    assert status_error("the broker", 404, {"detail": "no job 'x'"}) == (
        "the broker answered HTTP 404: no job 'x'"
    )
    invalid = {"detail": [{"loc": ["query", "limit"], "msg": "too big"}]}
    assert status_error("the bus", 422, invalid) == "the bus answered HTTP 422: limit: too big"
    assert "--token" in status_error("the broker", 401, None)
    assert status_error("x", 500, ["odd"]) == "x answered HTTP 500"


def test_values_for_people() -> None:
    assert [duration(s) for s in (None, 4.25, 42, 200, 7300, 200_000)] == [
        "-",
        "4.2s",
        "42s",
        "3m 20s",
        "2h 1m",
        "2d 7h",
    ]
    assert [size(n) for n in (None, 18, 1273, 5_000_000, 7e12)] == [
        "-",
        "18 B",
        "1.3 kB",
        "5.0 MB",
        "7000.0 GB",
    ]
    assert identity(b"worker-1".hex()) == "worker-1"
    assert identity("00ff") == "00ff" and identity("zz") == "zz" and identity(None) == "-"


def test_event_data_as_json_can_carry_it() -> None:
    assert data_view(msgpack.packb({"a": [1, b"x"]})) == ({"a": [1, "x"]}, "msgpack")
    assert data_view(b"plain text") == ("plain text", "utf-8")
    assert data_view(b"\xc1\xff") == ("wf8=", "base64")


def test_log_filters() -> None:
    record = {"ts": "t", "level": "warning", "service": "broker", "logger": "l", "msg": "Disk full"}
    ns = argparse.Namespace
    assert matches(record, ns(service="broker", level="info", grep="DISK"))
    assert not matches(record, ns(service="broker-2", level=None, grep=None))
    assert not matches(record, ns(service=None, level="error", grep=None))
    assert not matches(record, ns(service=None, level=None, grep="cpu"))
    assert render({**record, "path": "/x"}) == "t WARNING  broker l: Disk full  path=/x"
