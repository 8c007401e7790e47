"""The catalog's sampler: every few seconds, each registered service's totals.

Each round asks every registered service with an admin URL (at most
:data:`~zbus.dashboard.history.MAX_SERVICES`, the first by name) for its ``/metrics``,
and an event bus (a service whose metrics have ``zbus_eventbus_sequence``) also for
``/api/v1/topics?limit=1000``, all at once, each within :data:`SAMPLE_TIMEOUT` seconds
and :data:`MAX_METRICS_BYTES`. The catalog's own totals come from its registry. The
round goes into the :class:`~zbus.dashboard.history.History`; a service that did not
answer is left out of that round (its rates resume with the next answer).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Callable, Iterable, Sequence

import httpx
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families

from zbus.common.clock import SYSTEM_CLOCK, Clock
from zbus.dashboard.cluster import ClusterTarget
from zbus.dashboard.history import MAX_SERVICES, MAX_TOPICS, History, Totals, totals_from_metrics

__all__ = ["MAX_METRICS_BYTES", "SAMPLE_TIMEOUT", "Sampler"]

log = logging.getLogger(__name__)

SAMPLE_TIMEOUT = 2.0  # seconds for one service's answers
MAX_METRICS_BYTES = 1024 * 1024
LOCAL = "catalog"  # the name the catalog's own totals go under


class _Refused(Exception):
    pass


class Sampler:
    """Fills ``history`` every ``history.interval`` seconds.

    Args:
        history: where the samples go.
        targets: the registered services, asked at each round.
        local: the catalog's own metric families.
        clock: the time of a sample: monotonic for rates, wall for the charts.
    """

    def __init__(
        self,
        history: History,
        targets: Callable[[], Sequence[ClusterTarget]],
        local: Callable[[], Iterable[Metric]],
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.history = history
        self.targets = targets
        self.local = local
        self.clock = clock
        self.rounds = 0

    async def run(self) -> None:
        """Sample until cancelled, one round every ``interval`` (a slow round delays
        the next one rather than piling up)."""
        loop = asyncio.get_running_loop()
        async with self._client() as client:
            while True:
                started = loop.time()
                try:
                    await self.sample(client)
                except Exception:  # a round that failed must not stop the charts
                    log.exception("history sample failed")
                await asyncio.sleep(max(0.0, self.history.interval - (loop.time() - started)))

    def _client(self) -> httpx.AsyncClient:
        return httpx.AsyncClient(
            timeout=httpx.Timeout(SAMPLE_TIMEOUT),
            follow_redirects=False,
            trust_env=False,
            limits=httpx.Limits(max_connections=32, max_keepalive_connections=0),
        )

    async def sample(self, client: httpx.AsyncClient | None = None) -> None:
        """One round: every service's totals into the history."""
        if client is None:
            async with self._client() as own:
                return await self.sample(own)
        targets = sorted(
            (t for t in self.targets() if t.admin is not None and t.name != LOCAL),
            key=lambda t: t.name,
        )[: MAX_SERVICES - 1]
        answers = await asyncio.gather(
            *(self._ask(client, t) for t in targets), return_exceptions=True
        )
        totals: dict[str, Totals] = {LOCAL: totals_from_metrics(self.local())}
        errors: dict[str, str | None] = {LOCAL: None}
        for target, answer in zip(targets, answers, strict=True):
            if isinstance(answer, BaseException):
                errors[target.name] = _describe(answer)
            else:
                totals[target.name] = answer
                errors[target.name] = None
        self.history.record(self.clock.monotonic(), totals, errors, wall=self.clock.time())
        self.rounds += 1

    async def _ask(self, client: httpx.AsyncClient, target: ClusterTarget) -> Totals:
        async with asyncio.timeout(SAMPLE_TIMEOUT):
            text = (await _get(client, f"{target.admin}/metrics")).decode("utf-8", "replace")
            try:
                families = list(text_string_to_metric_families(text))
            except (ValueError, TypeError, IndexError) as exc:
                raise _Refused(f"/metrics is not Prometheus text: {exc}") from None
            totals = totals_from_metrics(families)
            if not any(f.name == "zbus_eventbus_sequence" for f in families):
                return totals
            body = await _get(client, f"{target.admin}/api/v1/topics?limit={MAX_TOPICS}")
            topics: dict[str, float] = {}
            with contextlib.suppress(ValueError, TypeError, KeyError, AttributeError):
                for entry in json.loads(body)["topics"][:MAX_TOPICS]:
                    if isinstance(entry["topic"], str) and isinstance(entry["count"], int):
                        topics[entry["topic"]] = float(entry["count"])
            return totals.with_topics(topics)


async def _get(client: httpx.AsyncClient, url: str) -> bytes:
    async with client.stream("GET", url) as response:
        if response.status_code != 200:
            raise _Refused(f"HTTP {response.status_code} for {url.rsplit('/', 1)[-1]}")
        data = bytearray()
        async for chunk in response.aiter_bytes():
            data += chunk
            if len(data) > MAX_METRICS_BYTES:
                raise _Refused(f"answer larger than {MAX_METRICS_BYTES // 1024} kB")
        return bytes(data)


def _describe(exc: BaseException) -> str:
    if isinstance(exc, TimeoutError | httpx.TimeoutException):
        return "no answer in time"
    if isinstance(exc, httpx.ConnectError):
        return "cannot connect"
    if isinstance(exc, _Refused):
        return str(exc)
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
