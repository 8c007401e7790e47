"""The live view of the cluster: every registered service as its own admin API tells it.

The catalog knows each service's admin URL from its registration (the ``admin`` field of
the REGISTRATION body). For ``GET /api/v1/cluster`` it asks every one of them for
``/api/v1/info`` and ``/readyz`` at once, server side, so the dashboard in the browser
talks to the catalog only. A service that does not answer, or answers nonsense, gets an
``error`` in its entry; it never fails the whole view.

The URLs come from the nodes themselves, so only ``http``/``https`` URLs are asked, only
those two paths, without following redirects and without proxies from the environment,
and an answer larger than :data:`MAX_ANSWER_BYTES` is refused.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import httpx

from zbus.common.urls import UNSPECIFIED_HOSTS, host_of, split_url, with_host

__all__ = [
    "ADMIN_TIMEOUT",
    "CONCURRENCY",
    "MAX_ANSWER_BYTES",
    "ClusterTarget",
    "admin_url",
    "gather_cluster",
]

ADMIN_TIMEOUT = 1.0  # seconds a service's admin API has for each request
VIEW_DEADLINE = 2.5  # seconds the whole view may take; later answers count as missing
CONCURRENCY = 32  # services asked at once (two requests each)
MAX_ANSWER_BYTES = 256 * 1024


_Answer = tuple[int, Any] | BaseException  # (HTTP status, JSON body), or what went wrong


@dataclass(frozen=True, slots=True)
class ClusterTarget:
    """A registered service and where its admin API is (None: it did not say)."""

    name: str
    state: str
    admin: str | None


class _BadAnswer(Exception):
    """An admin API answered, but not with what was asked for."""


def admin_url(info: Mapping[str, Any], heard_from: str | None = None) -> str | None:
    """The admin URL a node registered with, made reachable from the catalog.

    A service bound to every interface (``0.0.0.0`` in containers) reports that address
    in its URL; the host is then taken from where its heartbeats come from
    (``heard_from``, ``host:port``), else from its registered ``ip``.

    Returns:
        An ``http``/``https`` URL without a trailing slash, or None when the node gave
        none that can be used.
    """
    value = info.get("admin")
    if not isinstance(value, str):
        return None
    parts = split_url(value.strip())
    if parts is None or parts.scheme not in ("http", "https") or parts.hostname is None:
        return None
    host = parts.hostname
    if host in UNSPECIFIED_HOSTS:
        ip = info.get("ip")
        better = host_of(heard_from) or (ip if isinstance(ip, str) else None)
        if better and better not in UNSPECIFIED_HOSTS:
            host = better
    return with_host(parts, host)


async def _get_json(client: httpx.AsyncClient, url: str) -> tuple[int, Any]:
    async with client.stream("GET", url) as response:
        body = bytearray()
        async for chunk in response.aiter_bytes():
            body += chunk
            if len(body) > MAX_ANSWER_BYTES:
                raise _BadAnswer(f"answer larger than {MAX_ANSWER_BYTES // 1024} kB")
        try:
            return response.status_code, json.loads(body)
        except ValueError:
            raise _BadAnswer(f"HTTP {response.status_code}, not JSON") from None


def _describe(exc: BaseException) -> str:
    if isinstance(exc, httpx.TimeoutException):
        return "no answer in time"
    if isinstance(exc, httpx.ConnectError):
        return f"cannot connect: {exc}" if str(exc) else "cannot connect"
    if isinstance(exc, _BadAnswer):
        return str(exc)
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


async def _ask(
    client: httpx.AsyncClient,
    target: ClusterTarget,
    limit: asyncio.Semaphore,
    deadline: float,
) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "name": target.name,
        "state": target.state,
        "admin": target.admin,
        "info": None,
        "ready": None,
        "checks": None,
        "error": None,
    }
    if target.admin is None:
        return entry
    answers: tuple[_Answer, _Answer]
    try:
        async with asyncio.timeout_at(deadline), limit:
            answers = await asyncio.gather(
                _get_json(client, f"{target.admin}/api/v1/info"),
                _get_json(client, f"{target.admin}/readyz"),
                return_exceptions=True,
            )
    except TimeoutError:
        entry["error"] = "no answer in time"
        return entry
    info, ready = answers
    errors: list[str] = []
    if isinstance(info, BaseException):
        errors.append(f"info: {_describe(info)}")
    elif info[0] != 200 or not isinstance(info[1], dict):
        errors.append(f"info: HTTP {info[0]}")
    else:
        entry["info"] = info[1]
    # /readyz answers 503 while the service is not ready, with the same body.
    if isinstance(ready, BaseException):
        errors.append(f"readyz: {_describe(ready)}")
    elif (
        ready[0] not in (200, 503)
        or not isinstance(ready[1], dict)
        or not isinstance(ready[1].get("ready"), bool)
    ):
        errors.append(f"readyz: HTTP {ready[0]}")
    else:
        entry["ready"] = ready[1]["ready"]
        checks = ready[1].get("checks")
        entry["checks"] = checks if isinstance(checks, dict) else None
    if len(errors) == 2 and errors[0].partition(": ")[2] == errors[1].partition(": ")[2]:
        errors = [errors[0].partition(": ")[2]]  # one cause, e.g. nothing listens there
    entry["error"] = "; ".join(errors) or None
    return entry


async def gather_cluster(
    targets: Sequence[ClusterTarget],
    *,
    request_timeout: float = ADMIN_TIMEOUT,
    deadline: float = VIEW_DEADLINE,
    concurrency: int = CONCURRENCY,
) -> list[dict[str, Any]]:
    """Ask every target's admin API for its info and readiness, concurrently.

    Args:
        targets: the registered services.
        request_timeout: seconds each request may take.
        deadline: seconds the whole gathering may take; services not asked or not
            answered by then get ``error: "no answer in time"``.
        concurrency: services asked at once.

    Returns:
        One entry per target, in order: ``name``, ``state``, ``admin``, ``info`` (the
        service's ``/api/v1/info``), ``ready`` (bool) and ``checks`` (from ``/readyz``),
        and ``error`` (None, or what went wrong). Never raises for a service's failure.
    """
    if not targets:
        return []
    limit = asyncio.Semaphore(concurrency)
    until = asyncio.get_running_loop().time() + deadline
    async with httpx.AsyncClient(
        timeout=httpx.Timeout(request_timeout),
        limits=httpx.Limits(max_connections=2 * concurrency, max_keepalive_connections=0),
        follow_redirects=False,
        trust_env=False,
        headers={"Accept": "application/json"},
    ) as client:
        return list(await asyncio.gather(*(_ask(client, t, limit, until) for t in targets)))
