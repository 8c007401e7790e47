"""The Helm chart, offline: its values schema follows the services' settings and refuses
mistakes, and what it renders is what the docs promise (docs/deploy-kubernetes.md)."""

from __future__ import annotations

import copy
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support import chart
from tests.support.deploy import (
    ADMIN_PORTS,
    ROOT,
    SERVICES,
    global_config_schema,
    service_config_schema,
    settings_class,
    version,
)


def _objects(values: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(d["kind"], d["metadata"]["name"]): d for d in chart.manifests(values)}


def _container(objects: dict[tuple[str, str], dict[str, Any]], service: str) -> dict[str, Any]:
    kind = "StatefulSet" if service in ("catalog", "eventbus", "broker") else "Deployment"
    pod = objects[(kind, f"zbus-{service}")]["spec"]["template"]["spec"]
    container: dict[str, Any] = pod["containers"][0]
    return container


def _env(container: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {e["name"]: e for e in container.get("env") or []}


# ------------------------------------------------------------------ the values schema
@pytest.mark.parametrize("service", SERVICES)
def test_each_services_config_lists_exactly_its_settings(service: str) -> None:
    """A service's `config` takes every setting the chart does not manage, with its type
    and bounds, and nothing else: a setting renamed or added in the service shows here."""
    schema = chart.values_schema()["properties"][service]["properties"]["config"]
    assert schema == service_config_schema(service)


def test_the_shared_config_lists_the_common_settings() -> None:
    assert chart.values_schema()["properties"]["config"] == global_config_schema()


@pytest.mark.parametrize(
    ("values", "complaint"),
    [
        ({"replicaCont": 3}, "replicaCont"),
        ({"worker": {"replicaCount": "3"}}, "'3' is not of type 'integer'"),
        ({"worker": {"config": {"ZBUS_QUEUE": "default"}}}, "ZBUS_QUEUE"),
        ({"worker": {"config": {"ZBUS_CONCURRENCY": "many"}}}, "'many' is not of type"),
        ({"catalog": {"config": {"ZBUS_PORT": 1234}}}, "ZBUS_PORT"),
        ({"eventbus": {"config": {"ZBUS_COMPAT": "nodejs"}}}, "'nodejs' is not one of"),
        ({"config": {"ZBUS_LOG_LEVEL": "LOUD"}}, "'LOUD' is not one of"),
        ({"image": {"pullPolicy": "Sometimes"}}, "'Sometimes' is not one of"),
        ({"sparkworker": {"spark": {"master": "spark:/oops"}}}, "does not match"),
        ({"sparkworker": {"spark": {"conf": {"executor.memory": "1g"}}}}, "executor.memory"),
        ({"metrics": {"serviceMonitor": {"enabled": "yes"}}}, "'yes' is not of type"),
    ],
)
def test_the_schema_refuses_mistakes(values: dict[str, Any], complaint: str) -> None:
    with pytest.raises(chart.ChartError) as caught:
        chart.check_values(chart.merged(values))
    assert complaint in str(caught.value)
    with pytest.raises(chart.ChartError):  # helm itself refuses them too
        chart.render(values)


def test_the_defaults_pass_the_schema() -> None:
    chart.check_values(chart.default_values())


# ------------------------------------------------------------------ what is rendered
def test_a_rendered_object_that_breaks_its_schema_is_refused() -> None:
    objects = _objects({})
    broken = copy.deepcopy(objects[("StatefulSet", "zbus-catalog")])
    broken["spec"]["template"]["spec"]["containers"][0]["livenesProbe"] = {}
    with pytest.raises(chart.ChartError, match="livenesProbe"):
        chart.validate(broken)


def test_defaults() -> None:
    objects = _objects({})
    kinds = sorted({kind for kind, _ in objects})
    assert kinds == [
        "ConfigMap",
        "Deployment",
        "NetworkPolicy",
        "PodDisruptionBudget",
        "Service",
        "ServiceAccount",
        "StatefulSet",
    ]
    for service in SERVICES:
        container = _container(objects, service)
        image = "zbus-spark" if service == "sparkworker" else "zbus"
        assert container["image"] == f"{image}:{version()}"
        assert container["args"] == [service]
        security = container["securityContext"]
        assert security["readOnlyRootFilesystem"] is True
        assert security["capabilities"]["drop"] == ["ALL"]
        mounts = {m["mountPath"] for m in container["volumeMounts"]}
        assert {"/tmp", "/var/lib/zbus"} <= mounts
        admin = ADMIN_PORTS[service]
        assert {"name": "admin", "containerPort": admin, "protocol": "TCP"} in container["ports"]
        data = objects[("ConfigMap", f"zbus-{service}")]["data"]
        assert data["ZBUS_ADMIN_PORT"] == str(admin)
        assert data["ZBUS_HOST"] == "0.0.0.0"
    for service in ("catalog", "eventbus", "broker"):
        sts = objects[("StatefulSet", f"zbus-{service}")]
        assert sts["spec"]["volumeClaimTemplates"][0]["metadata"]["name"] == "data"
        assert sts["spec"]["serviceName"] == f"zbus-{service}-headless"
        assert objects[("Service", f"zbus-{service}-headless")]["spec"]["clusterIP"] == "None"
    catalog = objects[("Service", "zbus-catalog")]["spec"]["ports"]
    assert {(p["port"], p["protocol"]) for p in catalog} == {
        (8701, "TCP"),
        (5246, "TCP"),
        (5246, "UDP"),
        (5245, "UDP"),
    }
    # No Secret without a token or keys, no RBAC without a k8s:// master.
    assert not any(kind in ("Secret", "Role", "ServiceMonitor") for kind, _ in objects)


def test_replicas_register_under_their_pod_names() -> None:
    objects = _objects({"worker": {"replicaCount": 3}, "sparkworker": {"replicaCount": 2}})
    assert objects[("Deployment", "zbus-worker")]["spec"]["replicas"] == 3
    assert objects[("Deployment", "zbus-sparkworker")]["spec"]["replicas"] == 2
    for service in ("worker", "sparkworker"):
        node_name = _env(_container(objects, service))["ZBUS_NODE_NAME"]
        assert node_name["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"


def test_curve_with_an_existing_secret() -> None:
    objects = _objects(chart.values_of("curve-existing-secret"))
    assert not any(kind == "Secret" for kind, _ in objects)
    for service in SERVICES:
        container = _container(objects, service)
        data = objects[("ConfigMap", f"zbus-{service}")]["data"]
        assert data["ZBUS_CURVE_SECRET_KEY"] == f"/etc/zbus/keys/{service}.key_secret"
        token = _env(container)["ZBUS_ADMIN_TOKEN"]["valueFrom"]["secretKeyRef"]
        assert token == {"name": "zbus-keys", "key": "admin-token", "optional": True}
        kind = "StatefulSet" if service in ("catalog", "eventbus", "broker") else "Deployment"
        volumes = objects[(kind, f"zbus-{service}")]["spec"]["template"]["spec"]["volumes"]
        keys = next(v for v in volumes if v["name"] == "keys")["secret"]
        assert keys["secretName"] == "zbus-keys"
        paths = {i["path"] for i in keys["items"]}
        assert f"{service}.key_secret" in paths
        assert {"catalog.key", "eventbus.key", "broker.key"} <= paths
        if service in ("catalog", "eventbus", "broker"):
            assert data["ZBUS_CURVE_ALLOWED_CLIENTS"] == "/etc/zbus/keys/allowed"
            assert "allowed/producer1.key" in paths


def test_curve_without_keys_says_which_are_missing() -> None:
    with pytest.raises(chart.ChartError, match=r"curve\.keys\.catalog\.key"):
        chart.render({"curve": {"enabled": True}})


def test_the_chart_makes_the_secret_from_given_keys() -> None:
    objects = _objects(chart.values_of("curve-chart-secret"))
    secret = objects[("Secret", "zbus-secret")]["data"]
    assert "admin-token" in secret
    assert "sparkworker.key_secret" in secret


def test_service_monitor() -> None:
    objects = _objects(chart.values_of("service-monitor"))
    monitor = objects[("ServiceMonitor", "zbus")]
    assert monitor["metadata"]["labels"]["release"] == "prometheus"
    assert monitor["spec"]["endpoints"] == [
        {
            "port": "admin",
            "path": "/metrics",
            "scheme": "http",
            "interval": "15s",
            "scrapeTimeout": "10s",
        }
    ]
    # Every Service it selects with an admin port is a scrape target; headless ones have none.
    selector = monitor["spec"]["selector"]["matchLabels"]
    scraped = [
        name
        for (kind, name), obj in objects.items()
        if kind == "Service"
        and selector.items() <= obj["metadata"]["labels"].items()
        and any(p["name"] == "admin" for p in obj["spec"]["ports"])
    ]
    assert sorted(scraped) == sorted(f"zbus-{s}" for s in SERVICES)


def test_spark_on_kubernetes() -> None:
    objects = _objects(chart.values_of("spark-k8s"))
    role = objects[("Role", "zbus-sparkworker")]
    resources = {r for rule in role["rules"] for r in rule["resources"]}
    assert {"pods", "services", "configmaps"} <= resources
    binding = objects[("RoleBinding", "zbus-sparkworker")]
    assert binding["subjects"][0]["name"] == "zbus-sparkworker"
    pod = objects[("Deployment", "zbus-sparkworker")]["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "zbus-sparkworker"
    assert pod["automountServiceAccountToken"] is True
    env = _container(objects, "sparkworker")["env"]
    names = [e["name"] for e in env]
    # $(POD_IP) in ZBUS_SPARK_CONF is expanded only from variables defined before it.
    assert names.index("POD_IP") < names.index("ZBUS_SPARK_CONF")
    assert env[names.index("POD_IP")]["valueFrom"]["fieldRef"]["fieldPath"] == "status.podIP"
    conf = dict(
        item.split("=", 1) for item in env[names.index("ZBUS_SPARK_CONF")]["value"].split(",")
    )
    assert conf["spark.driver.host"] == "$(POD_IP)"
    assert conf["spark.kubernetes.container.image"] == f"zbus-spark:{version()}"
    assert conf["spark.executor.instances"] == "3"
    assert conf["spark.executor.memory"] == "1g"
    data = objects[("ConfigMap", "zbus-sparkworker")]["data"]
    assert data["ZBUS_SPARK_MASTER"].startswith("k8s://")
    assert data["ZBUS_ARCHIVE_PATH"] == "/var/lib/zbus-archive"
    driver = objects[("Service", "zbus-sparkworker-driver")]["spec"]
    assert driver["clusterIP"] == "None"
    assert {p["port"] for p in driver["ports"]} == {
        int(conf["spark.driver.port"]),
        int(conf["spark.blockManager.port"]),
    }
    template = next(chart.embedded_pods(objects[("ConfigMap", "zbus-spark-executor")]))
    executor = template["spec"]["containers"][0]
    assert executor["name"] == conf["spark.kubernetes.executor.podTemplateContainerName"]
    assert "KubernetesExecutorBackend" in executor["command"][-1]


def test_without_network_policy_or_volumes() -> None:
    objects = _objects(chart.values_of("no-network-policy"))
    assert not any(kind in ("NetworkPolicy", "PodDisruptionBudget") for kind, _ in objects)
    sts = objects[("StatefulSet", "zbus-eventbus")]["spec"]
    assert "volumeClaimTemplates" not in sts
    volumes = {v["name"]: v for v in sts["template"]["spec"]["volumes"]}
    assert volumes["data"] == {"name": "data", "emptyDir": {}}


def test_names_follow_the_release_and_overrides() -> None:
    docs = chart.manifests({"fullnameOverride": "bus"})
    names = {d["metadata"]["name"] for d in docs}
    assert {"bus-catalog", "bus-eventbus", "bus-broker", "bus-worker"} <= names
    maps = {d["metadata"]["name"]: d["data"] for d in docs if d["kind"] == "ConfigMap"}
    assert maps["bus-worker"]["ZBUS_BROKER_ENDPOINT"] == "tcp://bus-broker:47290"


# ------------------------------------------------------------------ the docs
# Values whose own keys are the user's (settings, Kubernetes fields): one row each.
_WHOLE = {
    "config",
    "resources",
    "podSecurityContext",
    "securityContext",
    "podAnnotations",
    "podLabels",
    "nodeSelector",
    "affinity",
    "annotations",
    "labels",
    "executorResources",
    "conf",
    "keys",
}


def _value_paths(values: dict[str, Any], prefix: str = "") -> set[str]:
    paths = set()
    for key, value in values.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict) and value and key not in _WHOLE:
            paths |= _value_paths(value, f"{path}.")
        else:
            paths.add(path)
    return paths


def test_the_docs_list_every_value() -> None:
    doc = (ROOT / "docs" / "deploy-kubernetes.md").read_text()
    table = doc[doc.index("### Values") :]
    rows = set(re.findall(r"^\| `([A-Za-z0-9_.]+)` \|", table, flags=re.MULTILINE))
    values = _value_paths(chart.default_values())
    assert values - rows == set(), "values the docs leave out"
    assert rows - values == set(), "values the docs list but the chart has not"


# ------------------------------------------------------------------ the commands
@pytest.mark.parametrize("service", SERVICES)
def test_each_command_is_a_service_of_the_zbus_command(service: str) -> None:
    """The images' entrypoint is `zbus`; the chart's arguments must name a service it
    runs, which takes every setting the chart gives it."""
    args = _container(_objects({}), service)["args"]
    zbus = Path(sys.executable).parent / "zbus"
    proc = subprocess.run(
        [str(zbus), *args, "--help"], capture_output=True, text=True, timeout=60, check=False
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.startswith(f"usage: zbus {service} "), proc.stdout
    data = _objects({})[("ConfigMap", f"zbus-{service}")]["data"]
    for name in data:
        flag = "--" + name.removeprefix("ZBUS_").lower().replace("_", "-")
        assert f"{flag} " in proc.stdout, f"zbus {service} has no {flag}"


# ------------------------------------------------------------------ the services read it
_POD = {"POD_IP": "10.1.2.3", "POD_NAME": "zbus-sparkworker-5d8f-abcde"}


@pytest.mark.parametrize("values_set", sorted(chart.VALUE_SETS))
@pytest.mark.parametrize("service", SERVICES)
def test_each_service_loads_the_settings_the_chart_gives_it(
    service: str, values_set: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The ConfigMap and the container's variables, as Kubernetes would set them, are
    settings the service starts with (no ConfigError)."""
    objects = _objects(chart.values_of(values_set))
    # A StatefulSet's first pod is <name>-0 (the event bus's replicas are named after it).
    stateful = ("StatefulSet", f"zbus-{service}") in objects
    pod = {**_POD, "POD_NAME": f"zbus-{service}-0" if stateful else _POD["POD_NAME"]}
    for name in list(os.environ):
        if name.startswith("ZBUS_"):
            monkeypatch.delenv(name)
    for name, value in objects[("ConfigMap", f"zbus-{service}")]["data"].items():
        monkeypatch.setenv(name, value)
    for var in _container(objects, service).get("env") or []:
        if "value" in var:
            value = re.sub(r"\$\((\w+)\)", lambda m: pod[m.group(1)], var["value"])
        elif "fieldRef" in var["valueFrom"]:
            value = pod[
                "POD_IP" if "podIP" in var["valueFrom"]["fieldRef"]["fieldPath"] else "POD_NAME"
            ]
        else:
            value = "a-secret-value"
        monkeypatch.setenv(var["name"], value)
    loaded = settings_class(service).load()
    assert loaded.admin_port == ADMIN_PORTS[service]
    assert loaded.host == "0.0.0.0"
