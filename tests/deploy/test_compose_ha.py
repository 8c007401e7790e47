"""deploy/compose.ha.yml over docker-compose.yml, offline: the replicated event bus.

Read as Compose v2 reads both files together (`docker compose config`): etcd and three
replicas run instead of the single bus, each replica's settings load as the service
loads them and name a group whose addresses are the replicas' own compose names and
ports, every host port is the one the docs give, and the other services ship their
logs to the three. `make validate` runs `config -q` with both files by both Composes.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

from tests.support.compose import (
    ComposeService,
    compose_file,
    load,
    published_ports,
    services,
)
from tests.support.deploy import ROOT, settings_class
from zbus.eventbus.client.endpoints import endpoint_list

HA_FILE = ROOT / "deploy" / "compose.ha.yml"
REPLICAS = ("eventbus-1", "eventbus-2", "eventbus-3")

#: The host ports each replica publishes by default (docs/deploy.md): admin, the four
#: Event BUS ports, PPPP, replication, mc0, each in the container on the same port.
HOST_PORTS = {
    "eventbus-1": {8702, 5556, 5557, 5558, 5559, 5560, 5561, 61616},
    "eventbus-2": {8712, 5566, 5567, 5568, 5569, 5570, 5571, 61626},
    "eventbus-3": {8722, 5576, 5577, 5578, 5579, 5580, 5581, 61636},
}
#: The zbus services of docker-compose.yml besides the bus: they ship their logs to it.
OTHERS = ("catalog", "broker", "worker", "sparkworker")


@functools.cache
def _model() -> dict[str, Any]:
    return load(compose_file(), (HA_FILE,))


@functools.cache
def _services() -> dict[str, ComposeService]:
    return services(compose_file(), (HA_FILE,))


def _running() -> list[str]:
    """The services `up` starts (no profile): the ones not scaled to nothing."""
    return [
        name
        for name, svc in _model()["services"].items()
        if svc.get("scale", 1) != 0 and not svc.get("profiles")
    ]


def _settings(replica: str, monkeypatch: pytest.MonkeyPatch) -> Any:
    """The replica's settings as the bus loads them in its container (image ENV, then
    the compose file's environment)."""
    for name in [n for n in os.environ if n.startswith("ZBUS_")]:
        monkeypatch.delenv(name)
    for name, value in _services()[replica].effective_env.items():
        if name.startswith("ZBUS_"):
            monkeypatch.setenv(name, value)
    return settings_class("eventbus").load()


def test_etcd_and_three_replicas_run_instead_of_the_single_bus() -> None:
    running = _running()
    assert "eventbus" not in running
    assert {"etcd", *REPLICAS} <= set(running)
    assert _model()["services"]["eventbus"]["scale"] == 0
    for replica in REPLICAS:
        assert _services()[replica].command == ["eventbus"]
        assert _services()[replica].image == _services()["broker"].image


def test_what_waits_for_the_single_bus_waits_for_the_replicas() -> None:
    """Compose v2 does not wait for a service scaled to 0; the sparkworker waits for the
    three replicas instead, and the replicas for etcd and the catalog."""
    model = _model()["services"]
    for name, svc in model.items():
        if name in _running() and "eventbus" in (svc.get("depends_on") or {}):
            assert set(REPLICAS) <= set(svc["depends_on"]), name
    for replica in REPLICAS:
        depends = model[replica]["depends_on"]
        assert {k: v["condition"] for k, v in depends.items()} == {
            "catalog": "service_healthy",
            "etcd": "service_healthy",
        }


@pytest.mark.parametrize("replica", REPLICAS)
def test_each_replica_loads_its_settings_and_knows_its_group(
    replica: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    loaded = _settings(replica, monkeypatch)
    assert loaded.replicated and loaded.replica_name == replica
    assert loaded.node_name == replica  # registered with the catalog under its own name
    assert (loaded.min_insync, loaded.lease_ttl, loaded.replica_max_lag) == (2, 2, 2.0)
    assert loaded.host == "0.0.0.0"
    # etcd by its compose name, on the port it serves its clients on.
    (etcd,) = loaded.etcd()
    url = urlsplit(etcd)
    assert (url.scheme, url.hostname, url.port) == ("http", "etcd", 2379)
    command = " ".join(_model()["services"]["etcd"]["command"])
    assert "--listen-client-urls=http://0.0.0.0:2379" in command


@pytest.mark.parametrize("replica", REPLICAS)
def test_the_group_names_each_replica_where_it_listens(
    replica: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ZBUS_REPLICAS is the same everywhere, and each entry is the replica's compose name
    and the port that replica binds for replication."""
    groups = {r: _services()[r].effective_env["ZBUS_REPLICAS"] for r in REPLICAS}
    assert len(set(groups.values())) == 1, groups
    peers = {p.name: urlsplit(p.endpoint) for p in _settings(replica, monkeypatch).peers()}
    assert set(peers) == set(REPLICAS)
    for name, url in peers.items():
        own = _settings(name, monkeypatch).own_replication_port()
        assert (url.hostname, url.port) == (name, own), f"{replica} finds {name} at {url}"


@pytest.mark.parametrize("replica", REPLICAS)
def test_each_replica_publishes_its_ports_on_the_same_host_ports(
    replica: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    loaded = _settings(replica, monkeypatch)
    listens = {
        loaded.admin_port,
        *(loaded.port + i for i in range(4)),
        loaded.pppp_port,
        loaded.mc0_port,
        loaded.own_replication_port(),
    }
    published = {p for p in published_ports(HA_FILE) if p.service == replica}
    assert {p.target for p in published} == listens
    assert all(p.protocol == "tcp" and p.default == str(p.target) for p in published)
    assert {p.target for p in published} == HOST_PORTS[replica]
    assert _services()[replica].healthcheck, "no health check"


def test_no_two_running_services_publish_one_host_port() -> None:
    seen: dict[tuple[str, str], str] = {}
    files = (compose_file(), HA_FILE)
    running = set(_running())
    for port in (p for path in files for p in published_ports(path)):
        if port.service not in running:
            continue
        key = (port.default, port.protocol)
        assert seen.setdefault(key, port.service) == port.service, (
            f"{port.service} and {seen[key]} both publish {key}"
        )


def test_the_replicas_keep_their_data_on_volumes_of_their_own() -> None:
    model = _model()["services"]
    sources = [
        {v["source"] for v in model[r]["volumes"] if v["target"] == "/var/lib/zbus"}
        for r in REPLICAS
    ]
    assert all(len(s) == 1 for s in sources)
    assert len(set().union(*sources)) == 3
    etcd = {v["target"]: v["source"] for v in model["etcd"]["volumes"]}
    assert etcd == {"/var/lib/etcd": "etcd-data"}


@pytest.mark.parametrize("service", [*OTHERS, *REPLICAS])
def test_every_service_ships_its_logs_to_the_three_replicas(
    service: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ZBUS_EVENTBUS_ENDPOINT lists each replica by its compose name and SNAPSHOT port."""
    value = _services()[service].effective_env["ZBUS_EVENTBUS_ENDPOINT"]
    found = [urlsplit(e.snapshot) for e in endpoint_list(value.split(","))]
    expected = [(r, _settings(r, monkeypatch).port) for r in REPLICAS]
    assert [(u.hostname, u.port) for u in found] == expected


def test_the_services_read_the_list_as_three_buses() -> None:
    """What a service does with ZBUS_EVENTBUS_ENDPOINT (its log shipper and the catalog's
    log follower hand the setting to the bus client as it is): three buses, not one."""
    value = _services()["broker"].effective_env["ZBUS_EVENTBUS_ENDPOINT"]
    assert len(endpoint_list(value)) == 3, endpoint_list(value)


def test_prometheus_scrapes_the_replicas_and_etcd() -> None:
    mounts = {v["target"]: v["source"] for v in _model()["services"]["prometheus"]["volumes"]}
    config = yaml.safe_load(Path(mounts["/etc/prometheus/prometheus.yml"]).read_text())
    targets = {
        target
        for job in config["scrape_configs"]
        for group in job.get("static_configs", [])
        for target in group["targets"]
    }
    assert "eventbus:8702" not in targets
    assert {"eventbus-1:8702", "eventbus-2:8712", "eventbus-3:8722", "etcd:2379"} <= targets


def test_etcd_has_a_health_check_in_compose_and_in_its_image() -> None:
    etcd = _services()["etcd"]
    assert etcd.healthcheck is not None and "endpoint" in etcd.healthcheck
    build = _model()["services"]["etcd"]["build"]
    dockerfile = ROOT / "deploy" / "Dockerfile.etcd"
    assert (ROOT / build["context"] / build["dockerfile"]).resolve() == dockerfile.resolve()
    text = dockerfile.read_text()
    assert "HEALTHCHECK" in text and "etcd-server" in text
