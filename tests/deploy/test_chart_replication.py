"""The chart's replicated event bus (values `replication`), offline: off, nothing of it is
rendered; on, three replicas named after their pods that find each other and etcd by
the stable DNS names the chart's Services give them (docs/deploy-kubernetes.md, "A
replicated event bus")."""

from __future__ import annotations

import os
from typing import Any
from urllib.parse import urlsplit

import pytest

from tests.support import chart
from tests.support.deploy import SERVICES, settings_class
from zbus.eventbus.client.endpoints import endpoint_list

Objects = dict[tuple[str, str], dict[str, Any]]

ON: dict[str, Any] = {"replication": {"enabled": True}}
EXTERNAL = ["http://etcd-a.infra.svc:2379", "https://etcd-b.infra.svc:2379"]


def _objects(values: dict[str, Any]) -> Objects:
    return {(d["kind"], d["metadata"]["name"]): d for d in chart.manifests(values)}


def _pod(objects: Objects, kind: str, name: str) -> dict[str, Any]:
    spec: dict[str, Any] = objects[(kind, name)]["spec"]["template"]["spec"]
    return spec


def _bus(objects: Objects) -> dict[str, Any]:
    return objects[("StatefulSet", "zbus-eventbus")]


def _pod_names(sts: dict[str, Any]) -> list[str]:
    """The pods a StatefulSet makes: <name>-0, <name>-1, ..."""
    return [f"{sts['metadata']['name']}-{i}" for i in range(sts["spec"]["replicas"])]


def _pod_host(objects: Objects, sts: dict[str, Any], pod: str) -> str:
    """A StatefulSet pod's stable DNS name, through its headless Service."""
    service = objects[("Service", sts["spec"]["serviceName"])]["spec"]
    assert service["clusterIP"] == "None" and service["publishNotReadyAddresses"] is True
    return f"{pod}.{sts['spec']['serviceName']}.{chart.NAMESPACE}.svc"


def _port(container: dict[str, Any], name: str) -> int:
    port: int = next(p["containerPort"] for p in container["ports"] if p["name"] == name)
    return port


def _matches(selector: dict[str, Any], sts: dict[str, Any]) -> bool:
    labels = sts["spec"]["template"]["metadata"]["labels"]
    return bool(selector["matchLabels"].items() <= labels.items())


# ------------------------------------------------------------------ off
#: The values sets with replication off (all but the replication ones).
OFF_SETS = sorted(
    name
    for name in chart.VALUE_SETS
    if not (chart.values_of(name).get("replication") or {}).get("enabled")
)


@pytest.mark.parametrize("values_set", OFF_SETS)
def test_off_the_other_replication_values_change_nothing(values_set: str) -> None:
    """With replication off, what is rendered does not depend on `replication` at all."""
    values = chart.values_of(values_set)
    off = {
        **values,
        "replication": {
            "enabled": False,
            "podAntiAffinity": "hard",
            "etcd": {"endpoints": EXTERNAL, "persistence": {"enabled": False}},
        },
    }
    assert chart.render(off) == chart.render(values)


def test_off_the_bus_is_one_pod_with_no_trace_of_a_group() -> None:
    objects = _objects({})
    assert not any("etcd" in name for _, name in objects)
    sts = _bus(objects)
    assert sts["spec"]["replicas"] == 1
    container = _pod(objects, "StatefulSet", "zbus-eventbus")["containers"][0]
    assert "replication" not in {p["name"] for p in container["ports"]}
    assert "env" not in container
    for service in SERVICES:
        data = objects[("ConfigMap", f"zbus-{service}")]["data"]
        assert not {"ZBUS_REPLICAS", "ZBUS_ETCD_ENDPOINTS", "ZBUS_REPLICATION_GROUP"} & set(data)
        assert data["ZBUS_EVENTBUS_ENDPOINT"] == "tcp://zbus-eventbus:5556"
    assert "affinity" not in _pod(objects, "StatefulSet", "zbus-eventbus")


# ------------------------------------------------------------------ on, the chart's etcd
def test_three_replicas_named_after_their_pods() -> None:
    objects = _objects(ON)
    sts = _bus(objects)
    assert sts["spec"]["replicas"] == 3
    assert sts["spec"]["podManagementPolicy"] == "Parallel"
    container = _pod(objects, "StatefulSet", "zbus-eventbus")["containers"][0]
    env = {e["name"]: e for e in container["env"]}
    for name in ("ZBUS_REPLICA_NAME", "ZBUS_NODE_NAME"):
        assert env[name]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    data = objects[("ConfigMap", "zbus-eventbus")]["data"]
    port = _port(container, "replication")
    expected = ",".join(f"{pod}={_pod_host(objects, sts, pod)}:{port}" for pod in _pod_names(sts))
    assert data["ZBUS_REPLICAS"] == expected
    assert data["ZBUS_REPLICATION_GROUP"] == "zbus-zbus-eventbus"
    headless = objects[("Service", "zbus-eventbus-headless")]["spec"]["ports"]
    assert {
        "name": "replication",
        "port": port,
        "targetPort": "replication",
        "protocol": "TCP",
    } in (headless)
    # Not on the Service clients use: only the replicas talk replication.
    assert "replication" not in {
        p["name"] for p in objects[("Service", "zbus-eventbus")]["spec"]["ports"]
    }


def test_the_replicas_find_etcds_members() -> None:
    objects = _objects(ON)
    etcd = objects[("StatefulSet", "zbus-etcd")]
    assert etcd["spec"]["replicas"] == 3
    assert etcd["spec"]["podManagementPolicy"] == "Parallel"
    container = _pod(objects, "StatefulSet", "zbus-etcd")["containers"][0]
    client, peer = _port(container, "client"), _port(container, "peer")
    hosts = [_pod_host(objects, etcd, pod) for pod in _pod_names(etcd)]
    data = objects[("ConfigMap", "zbus-eventbus")]["data"]
    assert data["ZBUS_ETCD_ENDPOINTS"] == ",".join(f"http://{h}:{client}" for h in hosts)
    args = dict(a.removeprefix("--").split("=", 1) for a in container["args"])
    members = ",".join(
        f"{pod}=http://{host}:{peer}" for pod, host in zip(_pod_names(etcd), hosts, strict=True)
    )
    assert args["initial-cluster"] == members
    assert args["name"] == "$(POD_NAME)"
    headless = f"{etcd['spec']['serviceName']}.{chart.NAMESPACE}.svc"
    assert args["advertise-client-urls"] == f"http://$(POD_NAME).{headless}:{client}"
    assert args["initial-advertise-peer-urls"] == f"http://$(POD_NAME).{headless}:{peer}"
    env = {e["name"]: e["valueFrom"]["fieldRef"]["fieldPath"] for e in container["env"]}
    assert env == {"POD_NAME": "metadata.name"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/health", "port": "client"}
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    assert mounts["/var/lib/etcd"] == "data"
    assert etcd["spec"]["volumeClaimTemplates"][0]["metadata"]["name"] == "data"
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["image"] == "zbus-etcd:0.1.0"


@pytest.mark.parametrize("index", range(3))
def test_each_replica_loads_its_settings(index: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """What Kubernetes gives pod <index> is settings the bus starts with, naming it."""
    objects = _objects(ON)
    pod = _pod_names(_bus(objects))[index]
    for name in [n for n in os.environ if n.startswith("ZBUS_")]:
        monkeypatch.delenv(name)
    for name, value in objects[("ConfigMap", "zbus-eventbus")]["data"].items():
        monkeypatch.setenv(name, value)
    for var in _pod(objects, "StatefulSet", "zbus-eventbus")["containers"][0]["env"]:
        monkeypatch.setenv(var["name"], pod)  # every one is the pod's name
    loaded = settings_class("eventbus").load()
    assert loaded.replicated and loaded.replica_name == pod
    assert loaded.own_replication_port() == 5561
    assert [p.name for p in loaded.peers()] == _pod_names(_bus(objects))


@pytest.mark.parametrize("service", SERVICES)
def test_every_service_ships_its_logs_to_the_three_replicas(service: str) -> None:
    objects = _objects(ON)
    sts = _bus(objects)
    container = _pod(objects, "StatefulSet", "zbus-eventbus")["containers"][0]
    value = objects[("ConfigMap", f"zbus-{service}")]["data"]["ZBUS_EVENTBUS_ENDPOINT"]
    found = [urlsplit(e.snapshot) for e in endpoint_list(value.split(","))]
    expected = [
        (_pod_host(objects, sts, pod), _port(container, "snapshot")) for pod in _pod_names(sts)
    ]
    assert [(u.hostname, u.port) for u in found] == expected


def test_the_services_read_the_list_as_three_buses() -> None:
    """What a service does with ZBUS_EVENTBUS_ENDPOINT (its log shipper and the catalog's
    log follower hand the setting to the bus client as it is): three buses, not one."""
    value = _objects(ON)[("ConfigMap", "zbus-broker")]["data"]["ZBUS_EVENTBUS_ENDPOINT"]
    assert len(endpoint_list(value)) == 3, endpoint_list(value)


def test_disruption_budgets_allow_one_replica_and_one_member_down() -> None:
    objects = _objects({**ON, "podDisruptionBudget": {"enabled": True, "maxUnavailable": 2}})
    for name in ("zbus-eventbus", "zbus-etcd"):
        pdb = objects[("PodDisruptionBudget", name)]["spec"]
        assert pdb["maxUnavailable"] == 1
        assert _matches(pdb["selector"], objects[("StatefulSet", name)])
    # The other services keep the value's.
    assert objects[("PodDisruptionBudget", "zbus-broker")]["spec"]["maxUnavailable"] == 2


@pytest.mark.parametrize(
    ("preset", "rule"),
    [
        ("soft", "preferredDuringSchedulingIgnoredDuringExecution"),
        ("hard", "requiredDuringSchedulingIgnoredDuringExecution"),
    ],
)
def test_replicas_and_members_keep_apart(preset: str, rule: str) -> None:
    objects = _objects({"replication": {"enabled": True, "podAntiAffinity": preset}})
    for name in ("zbus-eventbus", "zbus-etcd"):
        (term,) = _pod(objects, "StatefulSet", name)["affinity"]["podAntiAffinity"][rule]
        term = term.get("podAffinityTerm", term)
        assert term["topologyKey"] == "kubernetes.io/hostname"
        assert _matches(term["labelSelector"], objects[("StatefulSet", name)])
    # The other stateful services are not affected.
    assert "affinity" not in _pod(objects, "StatefulSet", "zbus-broker")


def test_an_anti_affinity_of_ones_own_wins() -> None:
    own = {
        "podAntiAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {
                    "weight": 10,
                    "podAffinityTerm": {
                        "topologyKey": "topology.kubernetes.io/zone",
                        "labelSelector": {
                            "matchLabels": {"app.kubernetes.io/component": "eventbus"}
                        },
                    },
                }
            ]
        }
    }
    objects = _objects({**ON, "eventbus": {"affinity": own}})
    assert _pod(objects, "StatefulSet", "zbus-eventbus")["affinity"] == own


def test_etcd_is_reached_only_from_the_release() -> None:
    objects = _objects(ON)
    policy = objects[("NetworkPolicy", "zbus-etcd")]["spec"]
    assert _matches(policy["podSelector"], objects[("StatefulSet", "zbus-etcd")])
    (rule,) = policy["ingress"]
    (peer,) = rule["from"]
    labels = peer["podSelector"]["matchLabels"]
    assert labels == {"app.kubernetes.io/name": "zbus", "app.kubernetes.io/instance": "zbus"}


# ------------------------------------------------------------------ on, an external etcd
def test_an_external_etcd_replaces_the_charts() -> None:
    objects = _objects({"replication": {"enabled": True, "etcd": {"endpoints": EXTERNAL}}})
    assert not any("etcd" in name for _, name in objects)
    data = objects[("ConfigMap", "zbus-eventbus")]["data"]
    assert data["ZBUS_ETCD_ENDPOINTS"] == ",".join(EXTERNAL)
    assert _bus(objects)["spec"]["replicas"] == 3


def test_the_group_follows_the_release_name_and_namespace() -> None:
    docs = chart.manifests({**ON, "fullnameOverride": "bus"})
    data = next(
        d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "bus-eventbus"
    )
    assert data["data"]["ZBUS_REPLICATION_GROUP"] == f"{chart.NAMESPACE}-bus-eventbus"
    assert data["data"]["ZBUS_REPLICAS"].startswith(
        f"bus-eventbus-0=bus-eventbus-0.bus-eventbus-headless.{chart.NAMESPACE}.svc:5561,"
    )


# ------------------------------------------------------------------ refused
@pytest.mark.parametrize(
    ("values", "complaint"),
    [
        ({"replication": {"enabled": "yes"}}, "'yes' is not of type 'boolean'"),
        ({"replication": {"podAntiAffinity": "always"}}, "'always' is not one of"),
        ({"replication": {"etcd": {"endpoints": ["etcd:2379"]}}}, "does not match"),
        ({"replication": {"etcd": {"endpoint": []}}}, "endpoint"),
        ({"eventbus": {"config": {"ZBUS_REPLICAS": "a=b:1"}}}, "ZBUS_REPLICAS"),
        ({"eventbus": {"config": {"ZBUS_MIN_INSYNC": 0}}}, "less than the minimum"),
    ],
)
def test_the_schema_refuses_mistakes(values: dict[str, Any], complaint: str) -> None:
    with pytest.raises(chart.ChartError) as caught:
        chart.check_values(chart.merged(values))
    assert complaint in str(caught.value)
    with pytest.raises(chart.ChartError):
        chart.render(values)


@pytest.mark.parametrize("archive", [{"path": "s3a://bucket/zbus"}, {"existingClaim": "shared"}])
def test_the_replicas_cannot_share_one_archive(archive: dict[str, str]) -> None:
    with pytest.raises(chart.ChartError, match="archive"):
        chart.render({**ON, "archive": archive})
