"""The Helm chart, offline: lint, render and check what it renders.

helm-python-sdk carries Helm's own Go library (no helm binary, no cluster); what it renders
is checked with kubernetes-validate's strict schemas, the ServiceMonitor (a Prometheus
Operator type, not Kubernetes') with a strict schema made from the operator's API types.
"""

from __future__ import annotations

import copy
import functools
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

import helm_python as helm
import jsonschema
import kubernetes_validate
import yaml

from tests.support.deploy import CHART

#: The Kubernetes versions the manifests are checked against: the oldest the chart
#: supports (Chart.yaml's kubeVersion) and the newest kubernetes-validate knows.
KUBE_VERSIONS: Final = ("1.25.0", kubernetes_validate.utils.latest_version())

#: The values sets every check renders: helm/zbus/ci/<name>-values.yaml.
VALUE_SETS: Final = {
    p.name.removesuffix("-values.yaml"): p for p in sorted((CHART / "ci").glob("*-values.yaml"))
}

RELEASE: Final = "zbus"
NAMESPACE: Final = "zbus"


class ChartError(ValueError):
    """The chart, its values or what it renders is wrong; the message says where."""


def values_of(name: str) -> dict[str, Any]:
    data = yaml.safe_load(VALUE_SETS[name].read_text()) or {}
    if not isinstance(data, dict):
        raise ChartError(f"{VALUE_SETS[name]}: not a mapping")
    return data


def default_values() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((CHART / "values.yaml").read_text())
    return data


def values_schema() -> dict[str, Any]:
    schema: dict[str, Any] = json.loads((CHART / "values.schema.json").read_text())
    return schema


def merged(values: dict[str, Any]) -> dict[str, Any]:
    """The chart's defaults with ``values`` over them, as an install would use them."""
    with helm.Chart.load(CHART) as chart:
        return chart.merge_values(values)


def check_values(values: dict[str, Any]) -> None:
    """``values`` (already merged) against values.schema.json, by jsonschema (draft-07)."""
    validator = jsonschema.Draft7Validator(values_schema())
    errors = sorted(validator.iter_errors(values), key=lambda e: list(e.absolute_path))
    if errors:
        raise ChartError(
            "; ".join(
                f"{'.'.join(str(p) for p in e.absolute_path) or 'values'}: {e.message}"
                for e in errors
            )
        )


def lint(values: dict[str, Any], kube_version: str) -> None:
    """`helm lint --strict`: a warning fails as an error does."""
    report = helm.lint(
        CHART, values, strict=True, namespace=NAMESPACE, kube_version=f"v{kube_version}"
    )
    problems = [m["error"] for m in report["messages"] if m["severity"] >= 2]
    problems += [e for e in report["errors"] if e not in problems]
    if problems:
        raise ChartError("; ".join(problems))


def render(values: dict[str, Any]) -> dict[str, str]:
    """`helm template`: template path -> rendered text (NOTES.txt included)."""
    try:
        with helm.Chart.load(CHART) as chart:
            chart.validate_schema(values)
            return chart.render(values, name=RELEASE, namespace=NAMESPACE, is_install=True)
    except helm.HelmError as exc:
        raise ChartError(str(exc)) from None


def manifests(values: dict[str, Any]) -> list[dict[str, Any]]:
    """Every object the chart renders with ``values``."""
    docs: list[dict[str, Any]] = []
    for path, text in sorted(render(values).items()):
        if path.endswith("NOTES.txt"):
            continue
        try:
            docs += [d for d in yaml.safe_load_all(text) if d]
        except yaml.YAMLError as exc:
            raise ChartError(f"{path}: not YAML: {exc}") from None
    return docs


def embedded_pods(doc: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The pod templates a ConfigMap carries for Spark (executor-pod.yaml)."""
    if doc.get("kind") != "ConfigMap":
        return
    for key, text in (doc.get("data") or {}).items():
        if key.endswith("-pod.yaml"):
            pod = yaml.safe_load(text)
            pod.setdefault("metadata", {}).setdefault("name", f"{key}-template")
            yield pod


def _strict(schema: Any) -> Any:
    """The schema with no property allowed that it does not name, as
    kubernetes-validate's strict schemas are."""
    if isinstance(schema, dict):
        out = {k: _strict(v) for k, v in schema.items()}
        if "properties" in out and "additionalProperties" not in out:
            out["additionalProperties"] = False
        return out
    if isinstance(schema, list):
        return [_strict(v) for v in schema]
    return schema


@functools.cache
def _service_monitor_validator() -> jsonschema.Draft202012Validator:
    from cloudcoil.models.prometheus_operator.v1 import ServiceMonitor

    schema = _strict(ServiceMonitor.model_json_schema(by_alias=True, mode="validation"))
    schema["required"] = sorted({*schema.get("required", []), "apiVersion", "kind"})
    return jsonschema.Draft202012Validator(schema)


def validate(doc: dict[str, Any]) -> None:
    """One rendered object against its Kubernetes schema (strict), at every version."""
    kind = doc.get("kind", "?")
    name = (doc.get("metadata") or {}).get("name", "?")
    if kind == "ServiceMonitor":
        if doc.get("apiVersion") != "monitoring.coreos.com/v1":
            raise ChartError(f"{kind}/{name}: apiVersion {doc.get('apiVersion')!r}")
        errors = list(_service_monitor_validator().iter_errors(copy.deepcopy(doc)))
        if errors:
            raise ChartError(f"{kind}/{name}: " + "; ".join(e.message for e in errors))
        return
    for version in KUBE_VERSIONS:
        try:
            kubernetes_validate.validate(doc, version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            where = ".".join(str(p) for p in exc.path)
            message = f"{kind}/{name} (Kubernetes {version}): {where}: {exc.message}"
            raise ChartError(message) from None
        except kubernetes_validate.SchemaNotFoundError as exc:
            raise ChartError(f"{kind}/{name}: {exc.message}") from None


def check_value_set(name: str) -> int:
    """Lint, render and validate the chart with one values set; the objects checked."""
    values = values_of(name)
    check_values(merged(values))
    for version in KUBE_VERSIONS:
        lint(values, version)
    count = 0
    for doc in manifests(values):
        validate(doc)
        count += 1
        for pod in embedded_pods(doc):
            validate(pod)
            count += 1
    return count


def chart_files() -> list[Path]:
    return sorted(p for p in CHART.rglob("*") if p.is_file())
