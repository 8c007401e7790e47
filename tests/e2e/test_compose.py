"""docker-compose.yml end to end: zbus's images built here, the cluster up, used from the host.

The tests share one cluster and run in file order: the worker is scaled to two before
Prometheus is asked about its targets, the event bus is killed near the end, and the last
test takes the cluster down.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import pytest

from tests.e2e.compose import ComposeProject, docker
from tests.support.confirmed_publisher import ConfirmedPublisher
from tests.support.waiting import UNIT, wait_until
from zbus import BrokerClient, BusEndpoints, EventBusClient, LogReader

pytestmark = pytest.mark.timeout(int(1800 * UNIT))

ADMIN = {
    "catalog": "ZBUS_CATALOG_ADMIN_PORT",
    "eventbus": "ZBUS_EVENTBUS_ADMIN_PORT",
    "broker": "ZBUS_BROKER_ADMIN_PORT",
    "sparkworker": "ZBUS_SPARKWORKER_ADMIN_PORT",
}
# What registers with the catalog (the catalog itself does not).
REGISTERED = {"eventbus", "broker", "worker", "sparkworker"}


def bus_endpoints(cluster: ComposeProject) -> BusEndpoints:
    return BusEndpoints(
        cluster.endpoint("ZBUS_EVENTBUS_PORT"),
        cluster.endpoint("ZBUS_EVENTBUS_PUBLISHER_PORT"),
        cluster.endpoint("ZBUS_EVENTBUS_COLLECTOR_PORT"),
        cluster.endpoint("ZBUS_EVENTBUS_STREAM_PORT"),
    )


def get_json(url: str) -> Any:
    answer = httpx.get(url, timeout=10)
    assert answer.status_code == 200, f"{url}: {answer.status_code} {answer.text}"
    return answer.json()


def active_services(cluster: ComposeProject) -> list[dict[str, Any]]:
    listing = get_json(cluster.url("ZBUS_CATALOG_ADMIN_PORT", "/api/v1/services"))
    return [s for s in listing["services"] if s["state"] == "active"]


def wait_on(
    cluster: ComposeProject, predicate: Callable[[], bool], timeout: float, what: str
) -> None:
    """wait_until, with the end of the services' logs when it times out."""
    try:
        wait_until(predicate, timeout=timeout, what=what)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{cluster.logs()}") from None


def worker_ports(cluster: ComposeProject) -> list[int]:
    """The host ports of every worker replica's admin API."""
    ports = []
    for cid in cluster.containers("worker"):
        out = docker("port", cid, "8705/tcp").split()
        ports.append(int(out[0].rpartition(":")[2]))
    return ports


def test_every_service_is_ready_and_active_in_the_catalog(cluster: ComposeProject) -> None:
    for name, variable in ADMIN.items():
        answer = httpx.get(cluster.url(variable, "/readyz"), timeout=10)
        assert answer.status_code == 200, f"{name}: {answer.text}"
    (worker_port,) = worker_ports(cluster)
    assert httpx.get(f"http://127.0.0.1:{worker_port}/readyz", timeout=10).status_code == 200

    def all_active() -> bool:
        return {s["info"]["function"] for s in active_services(cluster)} == REGISTERED

    wait_on(cluster, all_active, timeout=60, what="every service active in the catalog")
    # Replicas of the worker register under names of their own: worker-<container id>.
    names = {s["name"] for s in active_services(cluster)}
    worker_name = f"worker-{cluster.container('worker')[:12]}"
    assert names == {"eventbus", "broker", "sparkworker", worker_name}
    # The dashboard's view: the catalog reaches every service's admin API in its container.
    view = get_json(cluster.url("ZBUS_CATALOG_ADMIN_PORT", "/api/v1/cluster"))
    assert view["catalog"]["ready"] is True
    assert {s["name"]: s["ready"] for s in view["services"]} == dict.fromkeys(names, True)
    page = httpx.get(cluster.url("ZBUS_CATALOG_ADMIN_PORT", "/dashboard"), timeout=10)
    assert page.status_code == 200 and "<html" in page.text.lower()


def test_the_catalog_beacon_is_heard_inside_the_compose_network(cluster: ComposeProject) -> None:
    catalog_ip = docker(
        "inspect",
        "--format",
        "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}",
        cluster.container("catalog"),
    ).strip()
    heard = docker(
        "exec",
        cluster.container("broker"),
        "python3",
        "-c",
        "import asyncio, zbus; print(asyncio.run(zbus.discover(10.0)))",
        timeout=60,
    ).strip()
    assert heard == f"tcp://{catalog_ip}:5246"


def test_an_event_published_on_the_published_port_reaches_a_subscriber(
    cluster: ComposeProject,
) -> None:
    with EventBusClient(bus_endpoints(cluster), producer="e2e") as bus:
        subscription = bus.subscribe("/e2e/hello/")
        seq = bus.publish("/e2e/hello/1", {"greeting": "hello"}, confirm=True, timeout=10)
        event = subscription.next(timeout=30 * UNIT)
        subscription.close()
    assert event is not None, "no event reached the subscriber"
    assert (event.topic, event.seq) == ("/e2e/hello/1", seq)


def test_a_job_runs_in_the_worker_container(cluster: ComposeProject) -> None:
    (port,) = worker_ports(cluster)
    with BrokerClient(cluster.endpoint("ZBUS_BROKER_CLIENT_PORT")) as broker:
        job_id = broker.submit("default", "echo", args=["from", "the", "worker"])
        assert broker.result(job_id, timeout=60 * UNIT) == ["from", "the", "worker"]
    stats = get_json(f"http://127.0.0.1:{port}/api/v1/worker")
    assert stats["jobs_done"] >= 1 and stats["connected"] is True


def test_workers_scale(cluster: ComposeProject) -> None:
    cluster.run("up", "--detach", "--wait", "--no-build", "--no-recreate", "--scale", "worker=2")
    assert len(cluster.containers("worker")) == 2
    ports = worker_ports(cluster)
    assert len(set(ports)) == 2

    def both_registered() -> bool:
        workers = [s for s in active_services(cluster) if s["info"]["function"] == "worker"]
        return len(workers) == 2

    wait_on(cluster, both_registered, timeout=60, what="two workers active in the catalog")
    with BrokerClient(cluster.endpoint("ZBUS_BROKER_CLIENT_PORT")) as broker:
        ids = broker.submit_many("default", "echo", ([i] for i in range(40)))
        assert sorted(broker.result(i, timeout=60 * UNIT)[0] for i in ids) == list(range(40))


def test_prometheus_scrapes_every_service(cluster: ComposeProject) -> None:
    url = cluster.url("ZBUS_PROMETHEUS_PORT", "/api/v1/targets")
    expected = {"catalog": 1, "eventbus": 1, "broker": 1, "sparkworker": 1, "worker": 2}
    seen: dict[str, int] = {}

    def all_up() -> bool:
        try:
            targets = get_json(url)["data"]["activeTargets"]
        except (httpx.TransportError, AssertionError):
            return False
        seen.clear()
        for target in targets:
            if target["health"] == "up":
                service = target["labels"].get("service", "?")
                seen[service] = seen.get(service, 0) + 1
        return seen == expected

    wait_on(cluster, all_up, timeout=90, what=f"every target up in Prometheus (up: {seen})")


def test_topic_stats_runs_in_the_sparkworker_container(cluster: ComposeProject) -> None:
    topics = [f"/e2e/stats/{i}" for i in range(5)]
    with EventBusClient(bus_endpoints(cluster), producer="e2e") as bus:
        bus.publish_many(((t, {"n": n}) for n in range(20) for t in topics), confirm=True)
    flushed = httpx.post(cluster.url("ZBUS_EVENTBUS_ADMIN_PORT", "/api/v1/archive/flush"))
    assert flushed.status_code == 200, flushed.text
    with BrokerClient(cluster.endpoint("ZBUS_BROKER_CLIENT_PORT")) as broker:
        job_id = broker.submit("spark", "topic-stats", kwargs={"prefix": "/e2e/stats/"})
        answer = broker.result(job_id, timeout=300 * UNIT)
    result = answer["result"]
    assert (result["topics"], result["events"]) == (5, 100)
    assert sorted(row["topic"] for row in result["preview"]) == topics
    assert all(row["events"] == 20 for row in result["preview"])
    jobs = get_json(cluster.url("ZBUS_SPARKWORKER_ADMIN_PORT", "/api/v1/spark/jobs"))
    assert job_id in str(jobs)


def test_kill_9_of_the_event_bus_loses_no_confirmed_event(cluster: ComposeProject) -> None:
    endpoints = bus_endpoints(cluster)
    container = cluster.container("eventbus")
    publisher = ConfirmedPublisher(endpoints, "e2e-kill", "/e2e/kill/")
    publisher.start()
    try:
        wait_on(cluster, lambda: len(publisher.confirmed) >= 500, timeout=60, what="500 confirmed")
        docker("kill", "--signal", "KILL", container)
        at_kill = len(publisher.confirmed)
        (state,) = cluster.state("eventbus")
        assert state["Running"] is False and state["ExitCode"] == 137
        cluster.run("start", "eventbus")

        def healthy() -> bool:
            (now,) = cluster.state("eventbus")
            health = now.get("Health")
            return isinstance(health, dict) and health.get("Status") == "healthy"

        wait_on(cluster, healthy, timeout=120, what="the restarted event bus healthy")
        wait_on(
            cluster,
            lambda: len(publisher.confirmed) >= at_kill + 500,
            timeout=60,
            what="publishing confirmed again after the restart",
        )
    finally:
        publisher.stop.set()
        publisher.join(30 * UNIT)
    assert publisher.error is None, repr(publisher.error)
    assert publisher.retries >= 1  # publishing went on while the bus was down
    assert cluster.container("eventbus") == container  # the same container, restarted

    stored: dict[str, list[tuple[int, bytes]]] = {}
    with LogReader(endpoints, timeout=30) as reader:
        after = 0
        while True:
            page = reader.page("/e2e/kill/", after=after, limit=1000)
            for event in page.events:
                stored.setdefault(event.uuid, []).append((event.seq, event.data))
            if page.next_after is None:
                break
            after = page.next_after
    lost = [u for u, (seq, data) in publisher.confirmed.items() if stored.get(u) != [(seq, data)]]
    assert not lost, f"{len(lost)} of {len(publisher.confirmed)} confirmed events lost or changed"
    assert all(len(copies) == 1 for copies in stored.values()), "an event stored twice"


def test_down_removes_every_container_network_and_volume(cluster: ComposeProject) -> None:
    (cluster.workdir / "compose.log").write_text(cluster.logs(tail=2000))
    before = cluster.leftovers()
    assert before["containers"] and before["networks"] and before["volumes"]
    cluster.run("down", "--volumes", "--remove-orphans", "--timeout", "30")
    assert cluster.leftovers() == {"containers": [], "networks": [], "volumes": []}
    # The images stay: they are the next run's build cache.
    for image in cluster.images.values():
        docker("image", "inspect", image)
