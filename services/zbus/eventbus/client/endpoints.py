"""Where a bus is: :class:`BusEndpoints`, the four sockets of one bus server, and the
list of them a client is given (a primary and its backups, in order); the doors of a
door's client (:func:`door_list`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeAlias

from zbus.common.endpoints import parse_tcp_endpoint

__all__ = ["BusEndpoints", "EndpointsArg", "door_list", "endpoint_list"]


@dataclass(frozen=True, slots=True)
class BusEndpoints:
    """The four sockets of one bus server."""

    snapshot: str
    publisher: str
    collector: str
    stream: str

    @classmethod
    def from_base(cls, base: str) -> BusEndpoints:
        """``tcp://host:P`` -> SNAPSHOT P, PUBLISHER P+1, COLLECTOR P+2, STREAM P+3."""
        host, port = parse_tcp_endpoint(base, room=3)
        return cls(*(f"tcp://{host}:{port + i}" for i in range(4)))

    @classmethod
    def from_info(cls, info: Mapping[str, Any]) -> BusEndpoints:
        """From ``GET /api/v1/info``: the whole answer or its ``endpoints`` map."""
        endpoints = info.get("endpoints", info)
        if not isinstance(endpoints, Mapping):
            raise ValueError("info has no endpoints map")
        names = ("snapshot", "publisher", "collector", "stream")
        missing = [n for n in names if not isinstance(endpoints.get(n), str)]
        if missing:
            raise ValueError(f"info endpoints lack {', '.join(missing)}")
        return cls(*(endpoints[n] for n in names))


EndpointsArg: TypeAlias = BusEndpoints | str | Sequence[BusEndpoints | str]


def endpoint_list(endpoints: EndpointsArg) -> tuple[BusEndpoints, ...]:
    """One bus or several, as the tuple a client tries in order (base endpoints expanded);
    a string may list several, comma-separated.

    Raises:
        ValueError: no endpoints, or a base endpoint that is not ``tcp://host:port``.
    """
    if isinstance(endpoints, str):
        # "tcp://a:5556,tcp://b:5566": the replicas of a group (ZBUS_EVENTBUS_ENDPOINT).
        items: list[BusEndpoints | str] = [e.strip() for e in endpoints.split(",") if e.strip()]
    elif isinstance(endpoints, BusEndpoints):
        items = [endpoints]
    else:
        items = list(endpoints)
    out = tuple(BusEndpoints.from_base(e) if isinstance(e, str) else e for e in items)
    if not out:
        raise ValueError("at least one set of bus endpoints is needed")
    return out


def door_list(endpoint: str | Sequence[str]) -> tuple[str, ...]:
    """The doors a PPPP or mc0 client tries in turn: one endpoint, a list, or several in one
    string, comma-separated (``"tcp://a:5560,tcp://b:5570"``).

    Raises:
        ValueError: no endpoint.
        TypeError: an endpoint that is not text.
    """
    items = endpoint.split(",") if isinstance(endpoint, str) else list(endpoint)
    for item in items:
        if not isinstance(item, str):
            raise TypeError(f"an endpoint must be text, got {item!r}")
    out = tuple(e.strip() for e in items if e.strip())
    if not out:
        raise ValueError("at least one endpoint is needed")
    return out
