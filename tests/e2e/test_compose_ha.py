"""The replicated event bus in containers: docker-compose.yml with deploy/compose.ha.yml.

etcd and three replicas (and the catalog they register with) as a compose project of
their own on free ports of 127.0.0.1. The tests share it and run in file order: one
replica leads and two follow, confirmed events are published through the three
replicas' endpoints while the leader is killed (``docker kill``), another replica takes
the lead and publishing goes on, every confirmed event is in the new leader's log, the
killed replica comes back as a follower that catches up. Then the same under other faults:
the leader paused (``docker pause``) past its lease, the leader cut off the compose
network (``docker network disconnect``) and connected back, and a follower cut off and
connected back. After each, once healed: no confirmed event lost, none stored twice, and
the three replicas' logs the same event for event. `down -v` leaves nothing.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from tests.e2e.compose import ROOT, ComposeProject, docker
from tests.e2e.test_compose import active_services, wait_on
from tests.support.confirmed_publisher import ConfirmedPublisher
from tests.support.waiting import UNIT
from zbus import BusEndpoints, EventBusClient, LogReader, ReplicaUnavailable
from zbus.eventbus.core.log import Event

pytestmark = pytest.mark.timeout(int(1800 * UNIT))

HA_FILE = ROOT / "deploy" / "compose.ha.yml"
REPLICAS = ("eventbus-1", "eventbus-2", "eventbus-3")
TOPICS = "/e2e/ha/"
# How long a paused leader stays paused: well past its lease (ZBUS_LEASE_TTL, 2 s).
PAUSE_SECONDS = 6.0


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


def wait_ha(
    cluster: ComposeProject, predicate: Callable[[], bool], timeout: float, what: str
) -> None:
    """wait_on, with every replica's replication state when it times out."""
    try:
        wait_on(cluster, predicate, timeout, what)
    except AssertionError as exc:
        states = {r: replication(cluster, r) for r in REPLICAS}
        raise AssertionError(f"{exc}\nreplication: {states}") from None


def elected(cluster: ComposeProject, replicas: tuple[str, ...], what: str) -> str:
    """The leader of ``replicas`` (leader_of), waited for."""
    found: list[str] = []

    def one() -> bool:
        leader = leader_of(cluster, replicas)
        found[:] = [leader] if leader is not None else []
        return leader is not None

    wait_ha(cluster, one, 60, what)
    return found[0]


def follows(cluster: ComposeProject, replica: str, leader: str) -> bool:
    state = replication(cluster, replica)
    return state is not None and state["role"] == "follower" and state["leader"] == leader


@contextlib.contextmanager
def publishing(cluster: ComposeProject, topics: str) -> Iterator[ConfirmedPublisher]:
    """A confirmed publisher given the three replicas, for the block; it must not fail."""
    publisher = ConfirmedPublisher([endpoints(cluster, r) for r in REPLICAS], "e2e-ha", topics)
    publisher.start()
    try:
        yield publisher
    finally:
        publisher.stop.set()
        publisher.join(30 * UNIT)
    assert not publisher.is_alive(), "the publisher did not stop"
    assert publisher.error is None, repr(publisher.error)


def confirmed_past(
    cluster: ComposeProject, publisher: ConfirmedPublisher, count: int, what: str
) -> None:
    wait_ha(cluster, lambda: len(publisher.confirmed) >= count, 60, f"{count} confirmed {what}")


def refuses_confirmed_writes(cluster: ComposeProject, replica: str, topic: str) -> None:
    """A confirmed publish sent to ``replica`` alone is refused: it does not lead."""
    with (
        EventBusClient(endpoints(cluster, replica), producer="e2e-ha-direct") as client,
        pytest.raises(ReplicaUnavailable, match="not the leader"),
    ):
        client.publish(topic, b"x", confirm=True, timeout=12.0)


def read_log(cluster: ComposeProject, replica: str, upto: int) -> list[Event]:
    """The replica's log (every topic) up to sequence ``upto``, read through its SNAPSHOT."""
    events: list[Event] = []
    with LogReader(endpoints(cluster, replica), timeout=30) as reader:
        after = 0
        while after < upto:
            page = reader.page(after=after, limit=1000)
            events.extend(e for e in page.events if e.seq <= upto)
            if page.next_after is None:
                break
            after = page.next_after
    return events


def check_healed(cluster: ComposeProject, publisher: ConfirmedPublisher) -> None:
    """Once the three replicas are in sync again and each knows every confirmed event
    committed: no confirmed event lost or changed, none stored twice, and the three logs
    the same up to the least high watermark (everything before it is committed)."""
    confirmed = dict(publisher.confirmed)
    last = max(seq for seq, _ in confirmed.values())
    upto: list[int] = []

    def healed() -> bool:
        leader = leader_of(cluster)
        if leader is None:
            return False
        states = [replication(cluster, r) for r in REPLICAS]
        if any(s is None for s in states) or leader_of(cluster) != leader:
            return False
        leading = replication(cluster, leader)
        if leading is None or sorted(leading["in_sync"]) != sorted(REPLICAS):
            return False
        upto[:] = [min(int(s["high_watermark"]) for s in states if s is not None)]
        return upto[0] >= last

    wait_ha(cluster, healed, 120, f"the three replicas in sync, each committed past {last}")
    logs = {r: read_log(cluster, r, upto[0]) for r in REPLICAS}
    first = logs[REPLICAS[0]]
    for replica, log in logs.items():
        if log != first:
            at = next(
                (i for i, (a, b) in enumerate(zip(log, first, strict=False)) if a != b),
                min(len(log), len(first)),
            )
            shown = (log[at : at + 1], first[at : at + 1])
            raise AssertionError(
                f"{replica}'s log differs from {REPLICAS[0]}'s up to {upto[0]}: "
                f"{len(log)} and {len(first)} events, first difference at #{at}: {shown}"
            )
    seqs = [e.seq for e in first]
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs))), "a gap, or sequences out of order"
    stored = {e.uuid: (e.seq, e.data) for e in first}
    assert len(stored) == len(first), f"{len(first) - len(stored)} events stored twice"
    lost = [u for u, seq_data in confirmed.items() if stored.get(u) != seq_data]
    assert not lost, f"{len(lost)} of {len(confirmed)} confirmed events lost or changed"


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


def test_a_paused_leader_steps_down_and_confirms_nothing_more(
    ha_cluster: ComposeProject,
) -> None:
    old = elected(ha_cluster, REPLICAS, "a leader before the pause")
    others = tuple(r for r in REPLICAS if r != old)
    container = ha_cluster.container(old)
    topics = f"{TOPICS}pause/"
    with publishing(ha_cluster, topics) as publisher:
        confirmed_past(ha_cluster, publisher, 300, "before the pause")
        docker("pause", container)
        paused_at = time.monotonic()
        try:
            at_pause = len(publisher.confirmed)
            new = elected(ha_cluster, others, f"another leader while {old} is paused")
            # Publishing goes on, and the pause lasts well past the old leader's lease.
            wait_ha(
                ha_cluster,
                lambda: (
                    len(publisher.confirmed) >= at_pause + 300
                    and time.monotonic() - paused_at >= PAUSE_SECONDS
                ),
                60,
                f"300 confirmed under {new} with {old} paused {PAUSE_SECONDS:g} s",
            )
            (state,) = ha_cluster.state(old)
            assert state["Paused"] is True, state
        finally:
            docker("unpause", container)
        wait_ha(ha_cluster, lambda: follows(ha_cluster, old, new), 60, f"{old} following {new}")
        confirmed_past(ha_cluster, publisher, len(publisher.confirmed) + 300, "after the unpause")
        refuses_confirmed_writes(ha_cluster, old, f"{topics}direct")
    check_healed(ha_cluster, publisher)


def attachment(container: str) -> tuple[str, list[str]]:
    """The one network the container is on, and its aliases there (as compose set them:
    the service's name among them; not the container's short id, which docker adds)."""
    networks = json.loads(
        docker("inspect", "--format", "{{json .NetworkSettings.Networks}}", container)
    )
    ((network, settings),) = networks.items()
    aliases = [a for a in settings.get("Aliases") or [] if not container.startswith(a)]
    return network, aliases


def address(container: str, network: str) -> str:
    networks = json.loads(
        docker("inspect", "--format", "{{json .NetworkSettings.Networks}}", container)
    )
    return str(networks.get(network, {}).get("IPAddress") or "")


# A replica's GET /api/v1/replication from inside its container (its published ports do
# not reach it while it is off the network).
INSIDE = (
    "import os, urllib.request; print(urllib.request.urlopen("
    "'http://127.0.0.1:%s/api/v1/replication' % os.environ['ZBUS_ADMIN_PORT'], timeout=2"
    ").read().decode())"
)


def replication_inside(container: str) -> dict[str, Any] | None:
    try:
        state: dict[str, Any] = json.loads(
            docker("exec", container, "python3", "-c", INSIDE, timeout=30)
        )
    except (AssertionError, ValueError):
        return None
    return state


# What a container of the project resolves a name to, from inside it.
RESOLVE = "import socket, sys; print(socket.gethostbyname(sys.argv[1]))"


def resolves(from_container: str, name: str) -> str:
    """The address ``name`` resolves to in ``from_container``; "" when it does not."""
    try:
        return docker("exec", from_container, "python3", "-c", RESOLVE, name, timeout=30).strip()
    except AssertionError:
        return ""


@contextlib.contextmanager
def cut_off(cluster: ComposeProject, replica: str) -> Iterator[Callable[[], None]]:
    """The replica disconnected from the project's network for the block, or until the
    function it gives is called: it is connected back with the aliases it had, so that
    the other containers reach it by its service name again."""
    container = cluster.container(replica)
    network, aliases = attachment(container)
    assert network == f"{cluster.name}_default", network
    assert replica in aliases, aliases
    other = cluster.container(next(r for r in REPLICAS if r != replica))
    assert resolves(other, replica) == address(container, network)
    docker("network", "disconnect", network, container)
    connected = False

    def reconnect() -> None:
        nonlocal connected
        if connected:
            return
        connected = True
        docker("network", "connect", *(f"--alias={a}" for a in aliases), network, container)
        wait_ha(
            cluster,
            lambda: resolves(other, replica) == address(container, network) != "",
            60,
            f"{replica} resolving to its new address on {network}",
        )

    try:
        yield reconnect
    finally:
        reconnect()
    again, now = attachment(container)
    assert (again, sorted(now)) == (network, sorted(aliases))


def test_the_leader_cut_off_the_network_steps_down_and_confirms_nothing_more(
    ha_cluster: ComposeProject,
) -> None:
    old = elected(ha_cluster, REPLICAS, "a leader before the disconnection")
    others = tuple(r for r in REPLICAS if r != old)
    topics = f"{TOPICS}leader-cut-off/"
    with publishing(ha_cluster, topics) as publisher:
        confirmed_past(ha_cluster, publisher, 300, "before the disconnection")
        with cut_off(ha_cluster, old) as reconnect:
            at_cut = len(publisher.confirmed)
            new = elected(ha_cluster, others, f"another leader while {old} is cut off")
            confirmed_past(ha_cluster, publisher, at_cut + 300, f"under {new}, {old} cut off")
            # Cut off from etcd, the old leader has stopped leading (its lease ran out).
            container = ha_cluster.container(old)
            wait_ha(
                ha_cluster,
                lambda: (replication_inside(container) or {}).get("role") not in (None, "leader"),
                30,
                f"{old}, cut off, no longer leading",
            )
            reconnect()
        wait_ha(ha_cluster, lambda: follows(ha_cluster, old, new), 60, f"{old} following {new}")
        confirmed_past(ha_cluster, publisher, len(publisher.confirmed) + 300, "after it")
        refuses_confirmed_writes(ha_cluster, old, f"{topics}direct")
    check_healed(ha_cluster, publisher)


def test_a_follower_cut_off_the_network_catches_up_when_connected_back(
    ha_cluster: ComposeProject,
) -> None:
    leader = elected(ha_cluster, REPLICAS, "a leader before the disconnection")
    before = replication(ha_cluster, leader)
    assert before is not None
    follower = next(r for r in REPLICAS if r != leader)
    rest = tuple(r for r in REPLICAS if r != follower)
    topics = f"{TOPICS}follower-cut-off/"

    def in_sync() -> list[str]:
        state = replication(ha_cluster, leader)
        return sorted(state["in_sync"]) if state is not None else []

    with publishing(ha_cluster, topics) as publisher:
        confirmed_past(ha_cluster, publisher, 300, "before the disconnection")
        with cut_off(ha_cluster, follower) as reconnect:
            # The leader leads on with two of three in sync, and writes are confirmed.
            wait_ha(
                ha_cluster,
                lambda: in_sync() == sorted(rest) and leader_of(ha_cluster, rest) == leader,
                60,
                f"{leader} leading on, {follower} out of sync",
            )
            confirmed_past(
                ha_cluster, publisher, len(publisher.confirmed) + 500, "with two in sync"
            )
            reconnect()
        wait_ha(
            ha_cluster,
            lambda: follows(ha_cluster, follower, leader) and in_sync() == sorted(REPLICAS),
            60,
            f"{follower} following {leader} and in sync again",
        )
        confirmed_past(ha_cluster, publisher, len(publisher.confirmed) + 300, "after it")
    check_healed(ha_cluster, publisher)
    after = replication(ha_cluster, leader)
    assert after is not None and after["role"] == "leader", after
    assert after["epoch"] == before["epoch"], "the leader changed while a follower was cut off"


def test_down_leaves_nothing(ha_cluster: ComposeProject) -> None:
    (ha_cluster.workdir / "compose.log").write_text(ha_cluster.logs(tail=2000))
    ha_cluster.run("down", "--volumes", "--remove-orphans", "--timeout", "30")
    assert ha_cluster.leftovers() == {"containers": [], "networks": [], "volumes": []}
