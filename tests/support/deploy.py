"""What the deploy files (the Helm chart, the compose file) are checked against: each
service's settings, taken from its settings class, and the ports and images they share.

The settings classes are named here once, by import path, so that moving a module means
changing one line.
"""

from __future__ import annotations

import importlib
import tomllib
import types
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final, Literal, Union, get_args, get_origin

import annotated_types
from pydantic.fields import FieldInfo

ROOT: Final = Path(__file__).resolve().parents[2]
CHART: Final = ROOT / "helm" / "zbus"

#: Every service the deploy files run, and its settings class.
SETTINGS_CLASSES: Final = {
    "catalog": "zbus.catalog.server.config:CatalogSettings",
    "eventbus": "zbus.eventbus.server.config:EventBusSettings",
    "broker": "zbus.broker.server.config:BrokerSettings",
    "worker": "zbus.worker.service:WorkerSettings",
    "sparkworker": "zbus.sparkworker.config:SparkWorkerSettings",
}
COMMON_SETTINGS: Final = "zbus.common.settings:ServiceSettings"
SERVICES: Final = tuple(SETTINGS_CLASSES)

#: The image each service runs (repository; the tag is the project's version).
IMAGES: Final = {
    "catalog": "zbus",
    "eventbus": "zbus",
    "broker": "zbus",
    "worker": "zbus",
    "sparkworker": "zbus-spark",
}

#: The admin port of each service (health, readiness, metrics, API).
ADMIN_PORTS: Final = {
    "catalog": 8701,
    "eventbus": 8702,
    "broker": 8703,
    "sparkworker": 8704,
    "worker": 8705,
}

#: The ZeroMQ and UDP ports each service listens on, as (port, protocol).
PORTS: Final[dict[str, frozenset[tuple[int, str]]]] = {
    "catalog": frozenset({(5246, "tcp"), (5246, "udp"), (5245, "udp")}),
    "eventbus": frozenset(
        {(5556, "tcp"), (5557, "tcp"), (5558, "tcp"), (5559, "tcp"), (5560, "tcp"), (61616, "tcp")}
    ),
    "broker": frozenset({(47291, "tcp"), (47290, "tcp")}),
    "worker": frozenset(),
    "sparkworker": frozenset(),
}

#: Where the data directory and the CURVE keys are inside the containers.
DATA_DIR: Final = "/var/lib/zbus"
KEYS_DIR: Final = "/etc/zbus/keys"

#: Settings the deployment decides for every service (ports, addresses, files, secrets):
#: the chart sets them itself and its values' `config` maps may not.
MANAGED_COMMON: Final = frozenset(
    {
        "ZBUS_HOST",
        "ZBUS_ADMIN_PORT",
        "ZBUS_DATA_DIR",
        "ZBUS_ADMIN_TOKEN",
        "ZBUS_CURVE_SECRET_KEY",
        "ZBUS_CURVE_ALLOWED_CLIENTS",
        "ZBUS_CATALOG_PUBLIC_KEY",
        "ZBUS_EVENTBUS_PUBLIC_KEY",
        "ZBUS_BROKER_PUBLIC_KEY",
        "ZBUS_CATALOG_ENDPOINT",
        "ZBUS_EVENTBUS_ENDPOINT",
        # The launcher's pipe to its services: a container's lifetime is the engine's.
        "ZBUS_LIFELINE_FD",
    }
)
MANAGED: Final = {
    # ZBUS_LAUNCHER_STATE: the state file of `zbus up`, which sets it; no launcher in a pod.
    "catalog": MANAGED_COMMON
    | {"ZBUS_PORT", "ZBUS_UDP_PORT", "ZBUS_BEACON_PORT", "ZBUS_LAUNCHER_STATE"},
    "eventbus": MANAGED_COMMON
    | {
        "ZBUS_PORT",
        "ZBUS_PUBLISHER_PORT",
        "ZBUS_COLLECTOR_PORT",
        "ZBUS_STREAM_PORT",
        "ZBUS_MC0_PORT",
        "ZBUS_PPPP_PORT",
        "ZBUS_ARCHIVE_PATH",
        # The group: the pods' names and addresses, the replication port, etcd's URLs.
        "ZBUS_REPLICA_NAME",
        "ZBUS_REPLICAS",
        "ZBUS_REPLICATION_PORT",
        "ZBUS_ETCD_ENDPOINTS",
    },
    "broker": MANAGED_COMMON | {"ZBUS_CLIENT_PORT", "ZBUS_WORKER_PORT"},
    "worker": MANAGED_COMMON | {"ZBUS_BROKER_ENDPOINT", "ZBUS_NODE_NAME"},
    "sparkworker": MANAGED_COMMON
    | {
        "ZBUS_BROKER_ENDPOINT",
        "ZBUS_NODE_NAME",
        "ZBUS_SPARK_MASTER",
        "ZBUS_SPARK_CONF",
        "ZBUS_ARCHIVE_PATH",
    },
}


def _load(path: str) -> type[Any]:
    module, _, name = path.partition(":")
    cls: type[Any] = getattr(importlib.import_module(module), name)
    return cls


def settings_class(service: str) -> type[Any]:
    """The settings class of ``service`` (it has ``load``, as the service uses it)."""
    return _load(SETTINGS_CLASSES[service])


def env_name(field: str) -> str:
    return f"ZBUS_{field.upper()}"


def settings(service: str) -> dict[str, FieldInfo]:
    """The ZBUS_* settings of ``service`` (every field of its settings class)."""
    fields: dict[str, FieldInfo] = _load(SETTINGS_CLASSES[service]).model_fields
    return {env_name(name): field for name, field in fields.items()}


def common_settings() -> dict[str, FieldInfo]:
    """The ZBUS_* settings every service has."""
    fields: dict[str, FieldInfo] = _load(COMMON_SETTINGS).model_fields
    return {env_name(name): field for name, field in fields.items()}


def version() -> str:
    """The project's version: the images' tag."""
    with (ROOT / "pyproject.toml").open("rb") as f:
        return str(tomllib.load(f)["project"]["version"])


def _json_type(annotation: Any) -> dict[str, Any]:
    origin = get_origin(annotation)
    if origin in (Union, types.UnionType):
        kinds = [a for a in get_args(annotation) if a is not type(None)]
        if len(kinds) != 1:
            raise TypeError(f"no JSON type for {annotation!r}")
        return _json_type(kinds[0])
    if origin is Literal:
        return {"type": "string", "enum": list(get_args(annotation))}
    if annotation is bool:
        return {"type": "boolean"}
    if annotation is int:
        return {"type": "integer"}
    if annotation is float:
        return {"type": "number"}
    if annotation is str or annotation is Path:
        return {"type": "string"}
    raise TypeError(f"no JSON type for {annotation!r}")


def setting_schema(field: FieldInfo) -> dict[str, Any]:
    """The JSON schema (draft-07) of one setting's value in the chart's values."""
    schema = _json_type(field.annotation)
    for rule in field.metadata:
        if isinstance(rule, annotated_types.Ge):
            schema["minimum"] = rule.ge
        elif isinstance(rule, annotated_types.Gt):
            schema["exclusiveMinimum"] = rule.gt
        elif isinstance(rule, annotated_types.Le):
            schema["maximum"] = rule.le
        elif isinstance(rule, annotated_types.Lt):
            schema["exclusiveMaximum"] = rule.lt
        elif isinstance(rule, annotated_types.MinLen):
            schema["minLength"] = rule.min_length
    if field.description:
        schema["description"] = field.description
    return schema


def config_schema(fields: Mapping[str, FieldInfo], managed: frozenset[str]) -> dict[str, Any]:
    """The schema of a `config` map of the chart: the settings not managed, by name."""
    return {
        "type": "object",
        "additionalProperties": False,
        "properties": {
            name: setting_schema(field)
            for name, field in sorted(fields.items())
            if name not in managed
        },
    }


def service_config_schema(service: str) -> dict[str, Any]:
    return config_schema(settings(service), MANAGED[service])


def global_config_schema() -> dict[str, Any]:
    """The values' top-level `config`: settings every service has and none manages,
    the node's name excepted (it must differ between services)."""
    return config_schema(common_settings(), MANAGED_COMMON | {"ZBUS_NODE_NAME"})
