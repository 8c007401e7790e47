"""The cluster's recent history for the dashboard's charts, kept in the catalog's memory.

A sampler (:mod:`zbus.dashboard.sampler`) reads every service's running totals every
few seconds; :class:`History` turns each service's counter deltas into rates and keeps
the cluster-wide rates of the last :data:`WINDOW` seconds in a ring, so the charts need
no Prometheus. This module does no I/O: the time of each sample is passed in.

What is counted (:func:`totals_from_metrics`, from each service's ``/metrics``):

- events: events stored in the log (``zbus_eventbus_events_stored_total``);
- jobs: jobs the broker finished (``zbus_broker_jobs_total``, transitions ``succeeded``,
  ``failed``, ``dead``, ``cancelled``); per queue also ``submitted`` (in) and finished (out);
- errors: messages and requests refused by any service (every family in
  :data:`ERROR_FAMILIES`, and the catalog proxy's refusals), plus jobs that failed or
  went dead;
- heartbeats and beacons: the catalog's own (``zbus_catalog_events_total`` of kinds
  ``heartbeats_tcp`` and ``heartbeats_udp``; ``zbus_catalog_beacons_sent_total``).

A counter that went down (its service restarted) counts from zero again; a topic's count
that went down (retention) counts as no events.
"""

from __future__ import annotations

import collections
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from prometheus_client.metrics_core import Metric

from zbus.common.metrics import family_totals

__all__ = [
    "ERROR_FAMILIES",
    "MAX_QUEUES",
    "MAX_SERVICES",
    "MAX_TOPICS",
    "SERIES",
    "WINDOW",
    "History",
    "Totals",
    "totals_from_metrics",
]

WINDOW = 900.0  # seconds of history kept: 15 minutes
MAX_SERVICES = 64  # services sampled (the first by name); more are left out of the charts
MAX_QUEUES = 256  # queues per broker with rates
MAX_TOPICS = 1000  # topics per bus with rates (the first by name)

#: Counter families whose every increment is a refusal of bad input (by any service).
ERROR_FAMILIES = (
    "zbus_eventbus_rejected",
    "zbus_eventbus_mc0_errors",
    "zbus_broker_rejected",
    "zbus_catalog_rejected",
    "zbus_admin_rejected_requests",
)
_FINISHED = ("succeeded", "failed", "dead", "cancelled")
_FAILED = ("failed", "dead")

#: The cluster-wide series of every point, in the order of :meth:`History.view`.
SERIES = ("events_per_s", "jobs_per_s", "errors_per_s", "heartbeats_per_s")


@dataclass(frozen=True, slots=True)
class Totals:
    """One service's running totals at one sample (None: the service has no such count)."""

    events: float | None = None
    jobs: float | None = None
    errors: float = 0.0
    heartbeats: float | None = None
    beacons: float | None = None
    queues: Mapping[str, tuple[float, float]] = field(default_factory=dict)  # (in, out)
    topics: Mapping[str, float] = field(default_factory=dict)  # topic -> events

    def with_topics(self, topics: Mapping[str, float]) -> Totals:
        return Totals(
            self.events,
            self.jobs,
            self.errors,
            self.heartbeats,
            self.beacons,
            self.queues,
            dict(topics),
        )


def totals_from_metrics(families: Iterable[Metric]) -> Totals:
    """A service's totals from its metric families (its registry, or parsed text)."""
    got = list(families)
    names = {f.name for f in got}
    errors = sum(sum(family_totals(got, name).values()) for name in ERROR_FAMILIES)
    # The dashboard's proxy: requests it refused (path not allowed, body not JSON, ...).
    errors += family_totals(got, "zbus_catalog_proxy_requests", "outcome").get("refused", 0.0)
    events = jobs = heartbeats = beacons = None
    queues: dict[str, tuple[float, float]] = {}
    if "zbus_eventbus_events_stored" in names:
        events = family_totals(got, "zbus_eventbus_events_stored").get("", 0.0)
    if "zbus_broker_jobs" in names:
        moves: dict[str, dict[str, float]] = {}
        for family in got:
            if family.name != "zbus_broker_jobs":
                continue
            for sample in family.samples:
                if sample.name == "zbus_broker_jobs_total":
                    queue = moves.setdefault(sample.labels.get("queue", ""), {})
                    transition = sample.labels.get("transition", "")
                    queue[transition] = queue.get(transition, 0.0) + float(sample.value)
        jobs = 0.0
        for name in sorted(moves)[:MAX_QUEUES]:
            counts = moves[name]
            out = sum(counts.get(t, 0.0) for t in _FINISHED)
            queues[name] = (counts.get("submitted", 0.0), out)
        for counts in moves.values():
            jobs += sum(counts.get(t, 0.0) for t in _FINISHED)
            errors += sum(counts.get(t, 0.0) for t in _FAILED)
    if "zbus_catalog_events" in names:
        kinds = family_totals(got, "zbus_catalog_events", "event")
        heartbeats = kinds.get("heartbeats_tcp", 0.0) + kinds.get("heartbeats_udp", 0.0)
    if "zbus_catalog_beacons_sent" in names:
        beacons = family_totals(got, "zbus_catalog_beacons_sent").get("", 0.0)
    return Totals(events, jobs, errors, heartbeats, beacons, queues)


def _counter_delta(new: float, old: float) -> float:
    return new - old if new >= old else new  # went down: the service restarted


def _rate(value: float, seconds: float) -> float:
    return round(value / seconds, 3)


@dataclass(slots=True)
class _Seen:
    time: float
    totals: Totals


class History:
    """Rates from successive samples, and the cluster-wide ones of the last ``window``.

    Memory is bounded: ``window / interval`` points of five numbers; for each of at most
    :data:`MAX_SERVICES` services its last totals and rates, with at most
    :data:`MAX_QUEUES` queues and :data:`MAX_TOPICS` topics each.

    Args:
        interval: seconds between samples (sets the ring's length).
        window: seconds of points kept.
    """

    def __init__(self, interval: float, window: float = WINDOW) -> None:
        if not (interval > 0 and window >= interval):
            raise ValueError("interval must be > 0 and window >= interval")
        self.interval = interval
        self.window = window
        self.points: collections.deque[tuple[float, ...]] = collections.deque(
            maxlen=math.ceil(window / interval) + 1
        )
        self._seen: dict[str, _Seen] = {}
        self.queue_rates: dict[str, dict[str, tuple[float, float]]] = {}
        self.topic_rates: dict[str, dict[str, float]] = {}
        self.errors: dict[str, str | None] = {}

    def record(
        self,
        now: float,
        totals: Mapping[str, Totals],
        errors: Mapping[str, str | None] | None = None,
        *,
        wall: float,
    ) -> None:
        """Add one sample: each service's totals at ``now``; ``errors`` says why a
        service has no totals this time.

        Args:
            now: monotonic time of the sample: rates and the window are measured on it,
                so a step of the wall clock makes no rate jump.
            wall: its wall time (Unix seconds): the point's time on the charts.
        """
        sums = dict.fromkeys(SERIES, 0.0)
        measured = dict.fromkeys(SERIES, False)
        for name, new in list(totals.items())[:MAX_SERVICES]:
            before = self._seen.get(name)
            self._seen[name] = _Seen(now, new)
            if before is None or now <= before.time:
                continue
            seconds, old = now - before.time, before.totals
            for key, a, b in (
                ("events_per_s", new.events, old.events),
                ("jobs_per_s", new.jobs, old.jobs),
                ("heartbeats_per_s", new.heartbeats, old.heartbeats),
                ("errors_per_s", new.errors, old.errors),
            ):
                if a is not None and b is not None:
                    sums[key] += _counter_delta(a, b) / seconds
                    measured[key] = True
            if new.queues:
                self.queue_rates[name] = {
                    q: (
                        _rate(_counter_delta(i, old.queues.get(q, (0.0, 0.0))[0]), seconds),
                        _rate(_counter_delta(o, old.queues.get(q, (0.0, 0.0))[1]), seconds),
                    )
                    for q, (i, o) in new.queues.items()
                }
            if new.topics:
                self.topic_rates[name] = {
                    t: _rate(max(0.0, c - old.topics.get(t, c)), seconds)
                    for t, c in new.topics.items()
                }
        # Services gone for longer than the window are forgotten (bounded memory).
        for name in [n for n, s in self._seen.items() if now - s.time > self.window]:
            del self._seen[name]
            self.queue_rates.pop(name, None)
            self.topic_rates.pop(name, None)
        self.errors = dict(errors or {})
        self.points.append(
            (wall, *(round(sums[k], 3) if measured[k] else math.nan for k in SERIES))
        )

    def view(self) -> dict[str, Any]:
        """The points (one list per series, ``null`` where nothing was measured) and
        the latest rates per queue, as JSON."""
        columns: dict[str, list[float | None]] = {"time": []}
        columns.update({k: [] for k in SERIES})
        for point in self.points:
            columns["time"].append(point[0])
            for key, value in zip(SERIES, point[1:], strict=True):
                columns[key].append(None if math.isnan(value) else value)
        return {
            "interval": self.interval,
            "window": self.window,
            "points": columns,
            "queues": {
                service: {q: {"in_per_s": i, "out_per_s": o} for q, (i, o) in rates.items()}
                for service, rates in self.queue_rates.items()
            },
            "errors": self.errors,
        }

    def topics(self, service: str, prefix: str = "") -> dict[str, float]:
        """The latest rate (events/s) of each topic of bus ``service`` under ``prefix``."""
        rates = self.topic_rates.get(service, {})
        return {t: r for t, r in rates.items() if t.startswith(prefix)}
