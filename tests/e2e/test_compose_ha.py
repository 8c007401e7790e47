"""The replicated event bus in containers: docker-compose.yml with deploy/compose.ha.yml.

etcd and three replicas (and the catalog they register with) as a compose project of
their own on free ports of 127.0.0.1. The tests share it and run in file order: one
replica leads and two follow, confirmed events are published through the three
replicas' endpoints while the leader is killed (``docker kill``), another replica takes
the lead and publishing goes on, every confirmed event is in the new leader's log, the
killed replica comes back as a follower that catches up, and `down -v` leaves nothing.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.e2e.compose import ROOT, ComposeProject, docker
from tests.e2e.test_compose import active_services, wait_on
from tests.support.confirmed_publisher import ConfirmedPublisher
from tests.support.waiting import UNIT
from zbus import BusEndpoints, LogReader

pytestmark = pytest.mark.timeout(int(1800 * UNIT))

HA_FILE = ROOT / "deploy" / "compose.ha.yml"
REPLICAS = ("eventbus-1", "eventbus-2", "eventbus-3")
TOPICS = "/e2e/ha/"


def _variable(replica: str, port: str) -> str:
    """The compose variable of a replica's published port: ``port`` is ``ADMIN_``,
    ``""`` (SNAPSHOT), ``PUBLISHER_``, ..."""
    return f"ZBUS_EVENTBUS_{replica.rpartition('-')[2]}_{port}PORT"


def endpoints(cluster: ComposeProject, replica: str) -> BusEndpoints:
    return BusEndpoints(
        *(
            cluster.endpoint(_variable(replica, port))
            for port in ("", "PUBLISHER_", "COLLECTOR_", "STREAM_")
        )
    )


def replication(cluster: ComposeProject, replica: str) -> dict[str, Any] | None:
    """The replica's ``GET /api/v1/replication``; None when it does not answer."""
    try:
        answer = httpx.get(
            cluster.url(_variable(replica, "ADMIN_"), "/api/v1/replication"), timeout=2
        )
    except httpx.TransportError:
        return None
    if answer.status_code != 200:
        return None
    state: dict[str, Any] = answer.json()
    return state


def roles(cluster: ComposeProject, replicas: tuple[str, ...] = REPLICAS) -> dict[str, str]:
    states = {r: replication(cluster, r) for r in replicas}
    return {r: "down" if s is None else str(s["role"]) for r, s in states.items()}


def leader_of(cluster: ComposeProject, replicas: tuple[str, ...] = REPLICAS) -> str | None:
    """The one replica that says it leads, with every other one of ``replicas`` following
    it; None until then."""
    states = {r: replication(cluster, r) for r in replicas}
    if any(s is None for s in states.values()):
        return None
    leaders = [r for r, s in states.items() if s is not None and s["role"] == "leader"]
    if len(leaders) != 1:
        return None
    followers = [s for r, s in states.items() if r != leaders[0]]
    if not all(s is not None and s["role"] == "follower" for s in followers):
        return None
    if not all(s is not None and s["leader"] == leaders[0] for s in followers):
        return None
    return leaders[0]


@pytest.fixture(scope="module")
def ha_cluster(
    images: dict[str, str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ComposeProject]:
    project = ComposeProject(images, tmp_path_factory.mktemp("compose-ha"), overrides=(HA_FILE,))
    with project.running(*REPLICAS):
        yield project


def test_one_replica_leads_and_two_follow(ha_cluster: ComposeProject) -> None:
    found: list[str] = []

    def elected() -> bool:
        leader = leader_of(ha_cluster)
        found[:] = [leader] if leader is not None else []
        return leader is not None

    wait_on(ha_cluster, elected, timeout=60, what=f"a leader (roles {roles(ha_cluster)})")
    state = replication(ha_cluster, found[0])
    assert state is not None and state["etcd"] == "ok"
    assert sorted(roles(ha_cluster).values()) == ["follower", "follower", "leader"]
    # The single event bus of docker-compose.yml is not running.
    assert ha_cluster.containers("eventbus") == []


def test_the_replicas_register_with_the_catalog_under_their_own_names(
    ha_cluster: ComposeProject,
) -> None:
    def registered() -> bool:
        names = {s["name"] for s in active_services(ha_cluster)}
        return set(REPLICAS) <= names

    wait_on(ha_cluster, registered, timeout=60, what="the three replicas active in the catalog")


def test_killing_the_leader_loses_no_confirmed_event(ha_cluster: ComposeProject) -> None:
    old = leader_of(ha_cluster)
    assert old is not None, roles(ha_cluster)
    container = ha_cluster.container(old)
    publisher = ConfirmedPublisher([endpoints(ha_cluster, r) for r in REPLICAS], "e2e-ha", TOPICS)
    publisher.start()
    survivors = tuple(r for r in REPLICAS if r != old)
    new: list[str] = []
    try:
        wait_on(ha_cluster, lambda: len(publisher.confirmed) >= 500, 60, "500 confirmed")
        docker("kill", container)
        at_kill = len(publisher.confirmed)

        def taken_over() -> bool:
            leader = leader_of(ha_cluster, survivors)
            new[:] = [leader] if leader is not None else []
            return leader is not None

        wait_on(ha_cluster, taken_over, 60, f"another leader (roles {roles(ha_cluster)})")
        wait_on(
            ha_cluster,
            lambda: len(publisher.confirmed) >= at_kill + 500,
            timeout=60,
            what="publishing confirmed again under the new leader",
        )
    finally:
        publisher.stop.set()
        publisher.join(30 * UNIT)
    assert publisher.error is None, repr(publisher.error)
    (state,) = ha_cluster.state(old)
    assert state["Running"] is False, "the killed leader runs again"

    # Every confirmed event, with its sequence and data, once in the new leader's log.
    stored: dict[str, list[tuple[int, bytes]]] = {}
    with LogReader(endpoints(ha_cluster, new[0]), timeout=30) as reader:
        after = 0
        while True:
            page = reader.page(TOPICS, after=after, limit=1000)
            for event in page.events:
                stored.setdefault(event.uuid, []).append((event.seq, event.data))
            if page.next_after is None:
                break
            after = page.next_after
    confirmed = publisher.confirmed
    lost = [u for u, (seq, data) in confirmed.items() if stored.get(u) != [(seq, data)]]
    assert not lost, f"{len(lost)} of {len(confirmed)} confirmed events lost or changed"
    assert all(len(copies) == 1 for copies in stored.values()), "an event stored twice"
    # The new leader's admin API counts the same events.
    answer = httpx.get(
        ha_cluster.url(_variable(new[0], "ADMIN_"), "/api/v1/topics"),
        params={"prefix": TOPICS},
        timeout=10,
    )
    assert answer.status_code == 200, answer.text
    counted = sum(t["count"] for t in answer.json()["topics"])
    assert counted == sum(len(copies) for copies in stored.values())


def test_the_killed_replica_comes_back_as_a_follower(ha_cluster: ComposeProject) -> None:
    down = [r for r, role in roles(ha_cluster).items() if role == "down"]
    assert len(down) == 1, roles(ha_cluster)
    ha_cluster.run("start", down[0])

    def caught_up() -> bool:
        if leader_of(ha_cluster) is None:
            return False
        states = [replication(ha_cluster, r) for r in REPLICAS]
        ends = {(s["log_end"], s["high_watermark"]) for s in states if s is not None}
        return len(ends) == 1

    wait_on(ha_cluster, caught_up, 120, f"{down[0]} following, caught up ({roles(ha_cluster)})")
    assert roles(ha_cluster)[down[0]] == "follower"


def test_down_leaves_nothing(ha_cluster: ComposeProject) -> None:
    (ha_cluster.workdir / "compose.log").write_text(ha_cluster.logs(tail=2000))
    ha_cluster.run("down", "--volumes", "--remove-orphans", "--timeout", "30")
    assert ha_cluster.leftovers() == {"containers": [], "networks": [], "volumes": []}
