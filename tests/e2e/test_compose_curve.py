"""CURVE in the compose cluster: docker-compose.yml with deploy/compose.curve.yml over it.

Keys made as docs/deploy.md says; the services register, ship their logs and take jobs
over CURVE, a client with an admitted key is served and one without keys is not.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.compose import ROOT, ComposeProject
from tests.e2e.test_compose import active_services, bus_endpoints, wait_on
from tests.support.waiting import UNIT
from zbus import BrokerClient, EventBusClient, generate_keys, load_keys

pytestmark = pytest.mark.timeout(int(1800 * UNIT))

SERVICES = ("catalog", "eventbus", "broker", "worker")


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``keys/``: every service's key pair, and ``allowed/`` with the public keys the
    servers admit (the services' and a client's); ``client/``: that client's pair."""
    base = tmp_path_factory.mktemp("curve")
    keys, client = base / "keys", base / "client"
    allowed = keys / "allowed"
    allowed.mkdir(parents=True)
    public, _ = generate_keys(client, "client")
    shutil.copy(public, allowed)
    for name in ("catalog", "eventbus", "broker", "worker", "sparkworker"):
        public, _ = generate_keys(keys, name)
        shutil.copy(public, allowed)
    # The services run as uid 10001, not as whoever runs the tests: the mounted files
    # must be readable to them (on a real host, chown them to 10001 instead).
    for path in (keys, *keys.rglob("*")):
        path.chmod(0o755 if path.is_dir() else 0o644)
    return base


@pytest.fixture(scope="module")
def curve_cluster(
    images: dict[str, str], keys: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ComposeProject]:
    project = ComposeProject(
        images,
        tmp_path_factory.mktemp("compose-curve"),
        overrides=(ROOT / "deploy" / "compose.curve.yml",),
        variables={"ZBUS_KEYS_DIR": str(keys / "keys")},
    )
    with project.running(*SERVICES):
        yield project


def test_the_services_register_over_curve(curve_cluster: ComposeProject) -> None:
    def all_active() -> bool:
        functions = {s["info"]["function"] for s in active_services(curve_cluster)}
        return functions == {"eventbus", "broker", "worker"}

    wait_on(curve_cluster, all_active, timeout=60, what="every service active over CURVE")


def test_an_admitted_client_is_served_and_a_plain_one_is_not(
    curve_cluster: ComposeProject, keys: Path
) -> None:
    client = load_keys(keys / "client" / "client.key_secret")
    bus_key = load_keys(keys / "keys" / "eventbus.key").public
    broker_key = load_keys(keys / "keys" / "broker.key").public
    bus = bus_endpoints(curve_cluster)
    with EventBusClient(bus, producer="e2e-curve", curve=(client, bus_key)) as publisher:
        assert publisher.publish("/e2e/curve", {"x": 1}, confirm=True, timeout=10) is not None
    with BrokerClient(
        curve_cluster.endpoint("ZBUS_BROKER_CLIENT_PORT"), curve=(client, broker_key)
    ) as broker:
        job_id = broker.submit("default", "echo", args=["over", "curve"])
        assert broker.result(job_id, timeout=60 * UNIT) == ["over", "curve"]
    # Without keys the bus's ZAP handler lets nothing through: no confirm comes.
    with EventBusClient(bus, producer="e2e-plain") as plain, pytest.raises(TimeoutError):
        plain.publish("/e2e/plain", {"x": 1}, confirm=True, timeout=2)


def test_down_leaves_nothing(curve_cluster: ComposeProject) -> None:
    curve_cluster.run("down", "--volumes", "--remove-orphans", "--timeout", "30")
    assert curve_cluster.leftovers() == {"containers": [], "networks": [], "volumes": []}
