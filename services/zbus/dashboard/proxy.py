"""The catalog's proxy of the services' admin APIs, for the dashboard page.

The page talks to the catalog only (same origin, no cross-origin calls, the browser
needs no route to the services' admin ports). ``/api/v1/proxy/{service}/{path}`` asks
the registered service ``service`` for ``path`` on its admin URL. It is never an open
proxy:

- only services registered with the catalog, at the admin URL they registered
  (:func:`zbus.dashboard.cluster.admin_url`), ``http``/``https`` only;
- only the paths and methods of :data:`ALLOWED` (the dashboard's reads and actions);
- a query of at most :data:`MAX_QUERY_CHARS`, a request body of at most
  :data:`MAX_BODY_BYTES` (JSON), an answer of at most :data:`MAX_ANSWER_BYTES`, within
  :data:`PROXY_TIMEOUT` seconds; no redirects followed, no proxy from the environment;
- the caller's ``Authorization`` header goes along with an action (POST), so the service
  checks its own admin token; nothing else of the caller's request is forwarded.

What the service answers (status and JSON body) is passed back as it is, so a refusal
(401 without a valid token, 409 for a job in the wrong state, 422 for a bad value)
reaches the page with the service's reason. What the proxy itself refuses or cannot
get is answered with a ``detail`` that says why, logged (rate-limited) and counted in
``zbus_catalog_proxy_requests_total{outcome}``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import httpx
from prometheus_client import CollectorRegistry, Counter

from zbus.common.clock import SYSTEM_CLOCK, Clock
from zbus.common.rejects import LogLimiter
from zbus.dashboard.cluster import ClusterTarget

__all__ = [
    "ALLOWED",
    "MAX_ANSWER_BYTES",
    "MAX_BODY_BYTES",
    "MAX_QUERY_CHARS",
    "OUTCOMES",
    "PROXY_TIMEOUT",
    "AdminProxy",
    "ProxyAnswer",
    "allowed",
]

log = logging.getLogger(__name__)

PROXY_TIMEOUT = 5.0  # seconds for the whole request to the service
MAX_ANSWER_BYTES = 2 * 1024 * 1024
MAX_BODY_BYTES = 64 * 1024
MAX_QUERY_CHARS = 2048
_SEGMENT = r"[^/]+"

#: (method, path pattern) pairs the proxy forwards; a path segment of an id or a name
#: matches any text without "/".
ALLOWED: tuple[tuple[str, str], ...] = (
    ("GET", "api/v1/info"),
    ("GET", "readyz"),
    # the event bus
    ("GET", "api/v1/bus"),
    ("GET", "api/v1/topics"),
    ("GET", "api/v1/events"),
    ("GET", "api/v1/snapshot"),
    ("GET", "api/v1/replication"),
    ("POST", "api/v1/events"),
    # the broker
    ("GET", "api/v1/queues"),
    ("GET", "api/v1/workers"),
    ("GET", "api/v1/jobs"),
    ("GET", f"api/v1/jobs/{_SEGMENT}"),
    ("GET", f"api/v1/jobs/{_SEGMENT}/result"),
    ("POST", "api/v1/jobs"),
    ("POST", f"api/v1/jobs/{_SEGMENT}/retry"),
    ("POST", f"api/v1/jobs/{_SEGMENT}/cancel"),
    ("POST", f"api/v1/queues/{_SEGMENT}/purge"),
    # workers and the sparkworker
    ("GET", "api/v1/worker"),
    ("GET", "api/v1/spark"),
    ("GET", "api/v1/spark/jobs"),
    ("GET", f"api/v1/spark/jobs/{_SEGMENT}"),
    ("POST", f"api/v1/spark/jobs/{_SEGMENT}/cancel"),
)
_COMPILED = tuple((method, re.compile(pattern)) for method, pattern in ALLOWED)

#: The values of the ``outcome`` label: answered (whatever the service's status),
#: refused (path, method, query or body not allowed), unknown (no such service or no
#: admin URL), failed (no connection, no answer in time, not JSON, too large).
OUTCOMES = ("answered", "refused", "unknown", "failed")


def allowed(method: str, path: str) -> bool:
    """Whether ``method`` on ``path`` (no leading "/") may go through the proxy."""
    segments = path.split("/")
    if any(s in ("", ".", "..") for s in segments):
        return False
    return any(m == method and p.fullmatch(path) for m, p in _COMPILED)


@dataclass(frozen=True, slots=True)
class ProxyAnswer:
    """What goes back to the caller: an HTTP status and a JSON body."""

    status: int
    body: Any


class _TooLarge(Exception):
    pass


class AdminProxy:
    """Forwards allowed requests to registered services' admin APIs.

    Args:
        targets: the registered services, asked at each request.
        registry: where the request counter goes.
        timeout: seconds for one forwarded request.
        clock: its monotonic time paces the log lines of refusals.
    """

    def __init__(
        self,
        targets: Callable[[], Sequence[ClusterTarget]],
        registry: CollectorRegistry,
        *,
        timeout: float = PROXY_TIMEOUT,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.targets = targets
        self.clock = clock
        self.timeout = timeout
        self.requests = Counter(
            "zbus_catalog_proxy_requests",
            "Dashboard requests to the services' admin APIs through the catalog, by outcome",
            ["outcome"],
            registry=registry,
        )
        for outcome in OUTCOMES:
            self.requests.labels(outcome)
        self._limiter = LogLimiter()

    def _refuse(self, outcome: str, status: int, detail: str, **extra: Any) -> ProxyAnswer:
        self.requests.labels(outcome).inc()
        if self._limiter.allow(self.clock.monotonic()):
            log.warning("proxy request not forwarded", extra={"detail": detail, **extra})
        return ProxyAnswer(status, {"detail": detail})

    def too_large(self) -> ProxyAnswer:
        """The answer to a request whose body is over :data:`MAX_BODY_BYTES`."""
        return self._refuse("refused", 413, f"body larger than {MAX_BODY_BYTES // 1024} kB")

    async def forward(
        self,
        service: str,
        method: str,
        path: str,
        *,
        query: str = "",
        body: bytes = b"",
        authorization: str | None = None,
    ) -> ProxyAnswer:
        """Ask ``service`` for ``method path?query``; never raises for the service's
        failure (the answer says what happened)."""
        if not allowed(method, path):
            return self._refuse(
                "refused", 403, f"{method} /{path} is not allowed through the proxy", path=path
            )
        if len(query) > MAX_QUERY_CHARS:
            return self._refuse("refused", 414, f"query longer than {MAX_QUERY_CHARS} characters")
        if len(body) > MAX_BODY_BYTES:
            return self.too_large()
        if method == "POST":
            try:
                json.loads(body or b"{}")
            except ValueError:
                return self._refuse("refused", 422, "the body is not JSON")
        target = next((t for t in self.targets() if t.name == service), None)
        if target is None:
            return self._refuse("unknown", 404, f"no service {service!r} is registered")
        if target.admin is None:
            return self._refuse("unknown", 404, f"service {service!r} registered no admin URL")
        url = target.admin + "/" + "/".join(quote(s, safe="") for s in path.split("/"))
        headers = {"Accept": "application/json"}
        if method == "POST":
            headers["Content-Type"] = "application/json"
            if authorization:
                headers["Authorization"] = authorization
        try:
            async with asyncio.timeout(self.timeout):  # the whole exchange, not each read
                status, answer = await self._ask(method, url, query, body or b"{}", headers)
        except (TimeoutError, httpx.TimeoutException):
            return self._refuse(
                "failed", 504, f"{service}: no answer within {self.timeout:g} s", url=url
            )
        except httpx.HTTPError as exc:
            detail = f"{service}: cannot connect to {target.admin}: {exc}".rstrip(": ")
            return self._refuse("failed", 502, detail, url=url)
        except _TooLarge:
            return self._refuse(
                "failed", 502, f"{service}: answer larger than {MAX_ANSWER_BYTES // 1024} kB"
            )
        try:
            parsed = json.loads(answer)
        except ValueError:
            return self._refuse("failed", 502, f"{service}: HTTP {status}, not JSON", url=url)
        self.requests.labels("answered").inc()
        return ProxyAnswer(status, parsed)

    async def _ask(
        self, method: str, url: str, query: str, body: bytes, headers: dict[str, str]
    ) -> tuple[int, bytes]:
        async with (
            httpx.AsyncClient(
                timeout=httpx.Timeout(self.timeout),
                follow_redirects=False,
                trust_env=False,
            ) as client,
            client.stream(
                method,
                f"{url}?{query}" if query else url,
                content=body if method == "POST" else None,
                headers=headers,
            ) as response,
        ):
            data = bytearray()
            async for chunk in response.aiter_bytes():
                data += chunk
                if len(data) > MAX_ANSWER_BYTES:
                    raise _TooLarge
            return response.status_code, bytes(data)
