"""The dashboard's history: totals read from real metric registries, rates from counter
deltas with the time passed in, and the bounds of what is kept."""

from __future__ import annotations

import math

from prometheus_client import CollectorRegistry, Counter, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from zbus.broker.server.metrics import BrokerMetrics
from zbus.common.clock import ManualClock
from zbus.dashboard.history import MAX_QUEUES, History, Totals, totals_from_metrics
from zbus.dashboard.sampler import Sampler
from zbus.eventbus.server.metrics import BusMetrics


def parsed(registry: CollectorRegistry) -> list[object]:
    """The registry as the sampler sees it: its /metrics text, parsed."""
    return list(text_string_to_metric_families(generate_latest(registry).decode()))


def test_totals_come_from_the_services_own_metric_names() -> None:
    bus_registry, broker_registry = CollectorRegistry(), CollectorRegistry()
    bus, broker = BusMetrics(bus_registry), BrokerMetrics(broker_registry)
    bus.stored.inc(40)
    bus.rejected.labels("collector", "malformed").inc(3)
    for transition, n in (("submitted", 9), ("succeeded", 5), ("failed", 1), ("dead", 1)):
        broker.jobs.labels("default", transition).inc(n)
    broker.jobs.labels("spark", "submitted").inc(2)
    broker.jobs.labels("spark", "cancelled").inc(1)
    broker.rejected.labels("clients", "malformed").inc(2)
    admin = Counter("zbus_admin_rejected_requests", "", ["reason"], registry=broker_registry)
    admin.labels("unauthorised").inc()

    bus_totals = totals_from_metrics(parsed(bus_registry))  # type: ignore[arg-type]
    assert bus_totals.events == 40 and bus_totals.jobs is None and bus_totals.errors == 3

    broker_totals = totals_from_metrics(parsed(broker_registry))  # type: ignore[arg-type]
    assert broker_totals.events is None
    assert broker_totals.jobs == 5 + 1 + 1 + 1  # finished: succeeded, failed, dead, cancelled
    assert broker_totals.queues == {"default": (9, 7), "spark": (2, 1)}
    # Refused messages (2) and requests (1), and jobs that failed or went dead (2).
    assert broker_totals.errors == 2 + 1 + 2
    # The same from the registry itself (what the catalog does for its own figures).
    assert totals_from_metrics(broker_registry.collect()) == broker_totals


def test_rates_are_counter_deltas_over_the_time_between_samples() -> None:
    history = History(interval=5)
    history.record(
        1000.0, {"bus": Totals(events=100), "broker": Totals(jobs=10, errors=1)}, wall=1000.0
    )
    history.record(
        1005.0,
        {"bus": Totals(events=150), "broker": Totals(jobs=20, errors=1)},
        wall=1005.0,
    )
    # The bus missed a round; its next delta spans the 10 s since it last answered.
    history.record(
        1010.0, {"broker": Totals(jobs=20, errors=6)}, {"bus": "no answer in time"}, wall=1010.0
    )
    history.record(
        1015.0, {"bus": Totals(events=250), "broker": Totals(jobs=25, errors=6)}, wall=1015.0
    )
    view = history.view()
    points = view["points"]
    assert points["time"] == [1000.0, 1005.0, 1010.0, 1015.0]
    # The first sample has nothing to compare with: no rate at all, not zero.
    assert points["events_per_s"] == [None, 10.0, None, 10.0]
    assert points["jobs_per_s"] == [None, 2.0, 0.0, 1.0]
    assert points["errors_per_s"] == [None, 0.0, 1.0, 0.0]
    assert points["heartbeats_per_s"] == [None, None, None, None]
    assert view["errors"] == {}  # the last round's: every service answered


def test_a_restarted_service_counts_from_zero_and_a_shrunk_topic_counts_nothing() -> None:
    history = History(interval=1)
    history.record(0.0, {"bus": Totals(events=500, topics={"/a": 10, "/b": 4})}, wall=0.0)
    history.record(2.0, {"bus": Totals(events=8, topics={"/a": 14, "/b": 1, "/c": 3})}, wall=2.0)
    assert history.view()["points"]["events_per_s"][-1] == 4.0  # 8 events since the restart
    # /b lost events to retention: no negative rate; /c is new: nothing to compare with yet.
    assert history.topics("bus") == {"/a": 2.0, "/b": 0.0, "/c": 0.0}
    assert history.topics("bus", "/a") == {"/a": 2.0}
    assert history.topics("other") == {}


def test_queue_rates_are_the_latest_in_and_out_per_queue() -> None:
    history = History(interval=1)
    history.record(0.0, {"broker": Totals(jobs=0, queues={"q": (10, 4)})}, wall=0.0)
    history.record(4.0, {"broker": Totals(jobs=8, queues={"q": (30, 12), "new": (2, 0)})}, wall=4.0)
    assert history.view()["queues"] == {
        "broker": {
            "q": {"in_per_s": 5.0, "out_per_s": 2.0},
            "new": {"in_per_s": 0.5, "out_per_s": 0.0},
        }
    }


def test_the_ring_keeps_the_window_and_forgets_services_gone_longer() -> None:
    history = History(interval=5, window=60)
    for i in range(100):
        totals = {"bus": Totals(events=float(i))}
        if i < 3:
            totals["old"] = Totals(events=0, topics={"/x": 1}, queues={"q": (1, 1)})
        history.record(i * 5.0, totals, wall=i * 5.0)
    points = history.view()["points"]
    assert len(points["time"]) == 60 // 5 + 1
    assert points["time"][-1] == 99 * 5.0
    assert all(v == 0.2 for v in points["events_per_s"])
    assert "old" not in history.view()["queues"] and history.topics("old") == {}


def test_queues_past_the_bound_are_left_out() -> None:
    registry = CollectorRegistry()
    broker = BrokerMetrics(registry)
    for i in range(MAX_QUEUES + 10):
        broker.jobs.labels(f"q{i:04d}", "submitted").inc()
    totals = totals_from_metrics(registry.collect())
    assert len(totals.queues) == MAX_QUEUES
    assert "q0000" in totals.queues


def test_points_without_a_measure_are_nan_inside_and_null_outside() -> None:
    history = History(interval=1)
    history.record(0.0, {}, wall=0.0)
    assert math.isnan(history.points[0][1])
    assert history.view()["points"]["events_per_s"] == [None]


def test_a_wall_clock_step_moves_the_chart_times_and_no_rate() -> None:
    history = History(interval=5)
    wall = 1_700_000_000.0
    for i, step in enumerate((0.0, 3600.0, -7200.0)):
        wall += 5.0 + step
        history.record(i * 5.0, {"bus": Totals(events=100.0 * i)}, wall=wall)
    points = history.view()["points"]
    assert points["time"] == [1_700_000_005.0, 1_700_003_610.0, 1_699_996_415.0]
    assert points["events_per_s"] == [None, 20.0, 20.0]


async def test_the_sampler_reads_both_clocks_of_its_clock() -> None:
    registry = CollectorRegistry()
    events = Counter("zbus_eventbus_events_stored", "stored", registry=registry)
    clock = ManualClock(start=1_700_000_000.0)
    history = History(interval=5)
    sampler = Sampler(history, list, registry.collect, clock=clock)
    await sampler.sample()
    events.inc(50)
    clock.advance(5.0)
    clock.step(-3600.0)  # the chart shows the wall time; the rate is over 5 s all the same
    await sampler.sample()
    points = history.view()["points"]
    assert points["time"] == [1_700_000_000.0, 1_699_996_405.0]
    assert points["events_per_s"] == [None, 10.0]
