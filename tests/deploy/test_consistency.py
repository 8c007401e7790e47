"""The Helm chart and the compose file run the same services the same way: the same
images and commands, the same ZBUS_* settings (each one a real setting of its service),
the same ports and the same health checks. Renaming a setting, a port or an image in
one place and not the other fails here.

The compose file is the repository's docker-compose.yml (ZBUS_COMPOSE_FILE names
another); its absence is a failure, not a skip.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import pytest

from tests.support import chart
from tests.support.compose import ComposeService, compose_file, services
from tests.support.deploy import (
    ADMIN_PORTS,
    DATA_DIR,
    IMAGES,
    MANAGED,
    PORTS,
    SERVICES,
    settings,
    version,
)

#: Settings whose value is an address of another service: the host differs (the
#: compose service name, the chart's Service name), the service and the port do not.
ENDPOINTS = {
    "ZBUS_CATALOG_ENDPOINT": ("catalog", 5246),
    "ZBUS_EVENTBUS_ENDPOINT": ("eventbus", 5556),
    "ZBUS_BROKER_ENDPOINT": ("broker", 47290),
}
#: Settings that fix where a service listens and keeps its files: equal in both, the
#: settings' own default counting where one side leaves a setting unset.
CONTRACT = frozenset(
    {
        "ZBUS_HOST",
        "ZBUS_ADMIN_PORT",
        "ZBUS_DATA_DIR",
        "ZBUS_PORT",
        "ZBUS_UDP_PORT",
        "ZBUS_BEACON_PORT",
        "ZBUS_PUBLISHER_PORT",
        "ZBUS_COLLECTOR_PORT",
        "ZBUS_STREAM_PORT",
        "ZBUS_MC0_PORT",
        "ZBUS_CLIENT_PORT",
        "ZBUS_WORKER_PORT",
    }
)


@dataclass
class ChartService:
    image: str
    args: list[str]
    env: dict[str, str | None]  # ConfigMap values; None: from a Secret or the downward API
    ports: set[tuple[int, str]]
    probes: dict[str, dict[str, Any]]


@functools.cache
def _chart_services() -> dict[str, ChartService]:
    docs = chart.manifests({})
    fullname = chart.RELEASE
    maps = {d["metadata"]["name"]: d.get("data") or {} for d in docs if d["kind"] == "ConfigMap"}
    out = {}
    for doc in docs:
        if doc["kind"] not in ("StatefulSet", "Deployment"):
            continue
        name = doc["metadata"]["name"].removeprefix(f"{fullname}-")
        container = doc["spec"]["template"]["spec"]["containers"][0]
        env: dict[str, str | None] = {}
        for source in container.get("envFrom") or []:
            env.update(maps[source["configMapRef"]["name"]])
        for var in container.get("env") or []:
            env[var["name"]] = var.get("value")
        named = {p["name"]: p["containerPort"] for p in container["ports"]}
        probes = {}
        for kind in ("startupProbe", "livenessProbe", "readinessProbe"):
            get = container[kind]["httpGet"]
            port = get["port"]
            probes[kind] = {"path": get["path"], "port": named.get(port, port)}
        out[name] = ChartService(
            image=container["image"],
            args=list(container.get("args") or []),
            env=env,
            ports={(p["containerPort"], p["protocol"].lower()) for p in container["ports"]},
            probes=probes,
        )
    return out


@functools.cache
def _compose_services() -> dict[str, ComposeService]:
    path = compose_file()
    if not path.exists():
        pytest.fail(
            f"{path} does not exist: the chart has nothing to agree with "
            "(ZBUS_COMPOSE_FILE names another compose file)"
        )
    return services(path)


def _compose(service: str) -> ComposeService:
    found = _compose_services()
    assert service in found, f"docker-compose.yml has no service {service!r}: {sorted(found)}"
    return found[service]


def _zbus(env: dict[str, Any]) -> set[str]:
    return {k for k in env if k.startswith("ZBUS_")}


def _given(env: dict[str, Any]) -> set[str]:
    """The ZBUS_* settings given a value: an empty one leaves the setting's default."""
    return {k for k, v in env.items() if k.startswith("ZBUS_") and v != ""}


def _default(service: str, name: str) -> str:
    value = settings(service)[name].default
    return "" if value is None else str(value)


def test_the_chart_runs_every_service() -> None:
    assert set(_chart_services()) == set(SERVICES)


@pytest.mark.parametrize("service", SERVICES)
def test_images(service: str) -> None:
    expected = f"{IMAGES[service]}:{version()}"
    assert _chart_services()[service].image == expected
    image = _compose(service).image
    assert image.rpartition("/")[2] == expected, f"compose runs {image}, the chart {expected}"


@pytest.mark.parametrize("service", SERVICES)
def test_commands(service: str) -> None:
    assert _chart_services()[service].args == [service]
    compose = _compose(service)
    assert compose.command == [service]
    assert compose.entrypoint in (None, ["zbus"]), compose.entrypoint


@pytest.mark.parametrize("service", SERVICES)
def test_every_zbus_name_is_a_setting_of_its_service(service: str) -> None:
    known = set(settings(service))
    unknown_chart = _zbus(_chart_services()[service].env) - known
    assert not unknown_chart, f"the chart sets {sorted(unknown_chart)} on {service}"
    unknown_compose = _zbus(_compose(service).effective_env) - known
    assert not unknown_compose, f"compose sets {sorted(unknown_compose)} on {service}"


@pytest.mark.parametrize("service", SERVICES)
def test_the_chart_can_set_what_compose_sets(service: str) -> None:
    """Every setting the compose file gives a service, the chart gives it too or lets
    its values give it (`config`, or a value the chart turns into it)."""
    config = chart.values_schema()["properties"]
    settable = (
        set(config[service]["properties"]["config"]["properties"])
        | set(config["config"]["properties"])
        | MANAGED[service]
    )
    missing = (
        _zbus(_compose(service).effective_env) - settable - _zbus(_chart_services()[service].env)
    )
    assert not missing, f"compose sets {sorted(missing)} on {service}; the chart cannot"


@pytest.mark.parametrize("service", SERVICES)
def test_the_same_endpoints_are_set(service: str) -> None:
    """A service that finds another one by its endpoint in one deployment does in the
    other (registration with the catalog, log shipping to the bus, jobs from the broker)."""
    chart_names = _given(_chart_services()[service].env) & set(ENDPOINTS)
    compose_names = _given(_compose(service).effective_env) & set(ENDPOINTS)
    assert chart_names == compose_names, (
        f"{service}: only compose sets {sorted(compose_names - chart_names)}, "
        f"only the chart {sorted(chart_names - compose_names)}"
    )


@pytest.mark.parametrize("service", SERVICES)
def test_ports_host_and_data_dir_agree(service: str) -> None:
    chart_env = _chart_services()[service].env
    compose_env = _compose(service).effective_env
    assert chart_env.get("ZBUS_HOST") == compose_env.get("ZBUS_HOST") == "0.0.0.0"
    assert chart_env.get("ZBUS_ADMIN_PORT") == compose_env.get("ZBUS_ADMIN_PORT")
    assert chart_env.get("ZBUS_ADMIN_PORT") == str(ADMIN_PORTS[service])
    assert chart_env.get("ZBUS_DATA_DIR") == compose_env.get("ZBUS_DATA_DIR") == DATA_DIR
    for name in sorted(CONTRACT & set(settings(service))):
        in_chart = chart_env.get(name) or _default(service, name)
        in_compose = compose_env.get(name) or _default(service, name)
        assert in_chart == in_compose, f"{service} {name}: chart {in_chart}, compose {in_compose}"


@pytest.mark.parametrize("service", SERVICES)
def test_endpoints_name_the_same_service_and_port(service: str) -> None:
    chart_env = _chart_services()[service].env
    compose_env = _compose(service).effective_env
    for name, (target, port) in ENDPOINTS.items():
        for side, env, host in (
            ("chart", chart_env, f"{chart.RELEASE}-{target}"),
            ("compose", compose_env, target),
        ):
            if name not in _given(env):
                continue
            url = urlsplit(str(env[name]))
            assert (url.scheme, url.hostname, url.port) == ("tcp", host, port), (
                f"{side}: {service} {name}={env[name]}, expected tcp://{host}:{port}"
            )


@pytest.mark.parametrize("service", SERVICES)
def test_ports(service: str) -> None:
    admin = {(ADMIN_PORTS[service], "tcp")}
    chart_ports = _chart_services()[service].ports
    assert chart_ports == PORTS[service] | admin
    compose_ports = _compose(service).ports
    assert compose_ports <= chart_ports, f"compose publishes {compose_ports - chart_ports}"
    assert PORTS[service] <= compose_ports, f"compose leaves out {PORTS[service] - compose_ports}"


@pytest.mark.parametrize("service", SERVICES)
def test_health_checks(service: str) -> None:
    admin = ADMIN_PORTS[service]
    probes = _chart_services()[service].probes
    assert probes["readinessProbe"] == {"path": "/readyz", "port": admin}
    assert probes["livenessProbe"] == {"path": "/healthz", "port": admin}
    assert probes["startupProbe"] == {"path": "/healthz", "port": admin}
    compose = _compose(service)
    assert compose.healthcheck, f"compose has no health check for {service}"
    test = " ".join(compose.healthcheck)
    assert "/readyz" in test, f"{service}'s health check does not ask /readyz: {test}"
    asks_admin_port = str(admin) in test or (
        "ZBUS_ADMIN_PORT" in test and compose.effective_env.get("ZBUS_ADMIN_PORT") == str(admin)
    )
    assert asks_admin_port, f"{service}'s health check does not ask port {admin}: {test}"
