"""`make validate`: offline checks of the deploy files (no container engine, no cluster).

- deploy/local-cluster.toml, deploy/local-cluster-ha.toml: load, no two services on one
  admin port;
- the Helm chart: values.yaml against values.schema.json; `helm lint --strict` and
  `helm template` with every values set in helm/zbus/ci/, through helm-python-sdk (Helm's
  Go library, no helm binary); every rendered object against the Kubernetes schemas,
  strict, at the oldest and the newest Kubernetes the chart supports;
- docker-compose.yml: `docker compose config -q` (Compose v2, every profile), alone and
  with the replicated event bus (deploy/compose.ha.yml) over it, and the compose-spec
  schema of both; and `config -q` by the machine's own Compose, Debian's
  `docker-compose` (v1.29), alone, with the `spark-cluster` profile, with the CURVE
  overlay and with the HA overlay, and by the `docker compose` plugin when the machine
  has one;
- deploy/Dockerfile*: hadolint;
- deploy/prometheus*.yml: `promtool check config`.

Each check prints one line; the exit status is 1 when any check failed. A file pattern
that matches nothing is reported as such. `python -m tests.validate NAME...` runs only
the named checks.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from zbus.common.settings import ConfigError
from zbus.launcher import load_cluster

ROOT = Path(__file__).resolve().parents[1]
COMPOSE_FILE = ROOT / "docker-compose.yml"
HA_FILE = ROOT / "deploy" / "compose.ha.yml"
DOCKERFILES = "deploy/Dockerfile*"
PROMETHEUS_CONFIGS = "deploy/prometheus*.yml"


class CheckFailed(ValueError):
    """A deploy file failed a check; the message has the tool's own words."""


def tool(name: str) -> str:
    """A command-line tool: the one installed beside this Python (the validate group),
    else the one on PATH (Debian's promtool)."""
    here = Path(sys.executable).parent / name
    if here.exists():
        return str(here)
    found = shutil.which(name)
    if found is None:
        raise CheckFailed(f"{name} is not installed (make install; .ci/run installs promtool)")
    return found


def run(*argv: str) -> str:
    """Run a tool in the repository; its output, or CheckFailed with it."""
    proc = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, check=False)
    out = (proc.stdout + proc.stderr).strip()
    if proc.returncode != 0:
        raise CheckFailed(f"{Path(argv[0]).name} exited {proc.returncode}: {out}")
    return out


def local_cluster_check(name: str) -> Callable[[], str]:
    def check() -> str:
        specs = load_cluster(ROOT / "deploy" / name)
        ports = [s.admin_port for s in specs]
        if len(set(ports)) != len(ports):
            raise ConfigError("two services of the local cluster share an admin port")
        return f"{len(specs)} services"

    return check


def check_values_schema() -> str:
    import jsonschema

    from tests.support import chart

    jsonschema.Draft7Validator.check_schema(chart.values_schema())
    chart.check_values(chart.default_values())
    for name in chart.VALUE_SETS:
        chart.check_values(chart.merged(chart.values_of(name)))
    return f"values.yaml and {len(chart.VALUE_SETS)} values sets valid (draft-07)"


def chart_check(name: str) -> Callable[[], str]:
    def check() -> str:
        from tests.support import chart

        count = chart.check_value_set(name)
        versions = " and ".join(chart.KUBE_VERSIONS)
        return f"lint --strict, {count} objects valid (strict) on Kubernetes {versions}"

    return check


def check_compose() -> str:
    if not COMPOSE_FILE.exists():
        return "no docker-compose.yml"
    compose = tool("docker-compose")
    for files in (["-f", str(COMPOSE_FILE)], ["-f", str(COMPOSE_FILE), "-f", str(HA_FILE)]):
        run(compose, *files, "config", "-q")
        run(compose, *files, "--profile", "*", "config", "-q")
    schema = ("--builtin-schema", "vendor.compose-spec")
    run(tool("check-jsonschema"), *schema, str(COMPOSE_FILE), str(HA_FILE))
    return "compose config -q (every profile), alone and with HA; compose-spec schema"


def system_compose() -> list[list[str]]:
    """The machine's own Compose commands: Debian's ``docker-compose`` (on PATH, not the
    one beside this Python), and ``docker compose`` when the plugin is there."""
    venv = str(Path(sys.executable).parent)
    path = [d for d in os.environ.get("PATH", "").split(os.pathsep) if d and d != venv]
    found = shutil.which("docker-compose", path=os.pathsep.join(path))
    if found is None:
        raise CheckFailed("docker-compose is not installed (Debian's package; .ci/run installs it)")
    commands = [[found]]
    docker = shutil.which("docker")
    if docker is not None:
        plugin = subprocess.run([docker, "compose", "version"], capture_output=True, check=False)
        if plugin.returncode == 0:
            commands.append([docker, "compose"])
    return commands


def check_system_compose() -> str:
    curve = COMPOSE_FILE.parent / "deploy" / "compose.curve.yml"
    names = []
    for compose in system_compose():
        files = ["-f", str(COMPOSE_FILE)]
        run(*compose, *files, "config", "-q")
        run(*compose, *files, "--profile", "spark-cluster", "config", "-q")
        run(*compose, *files, "-f", str(curve), "config", "-q")
        run(*compose, *files, "-f", str(HA_FILE), "config", "-q")
        run(*compose, *files, "-f", str(HA_FILE), "--profile", "spark-cluster", "config", "-q")
        version = run(*compose, "version", "--short").splitlines()[-1]
        names.append(" ".join([*(Path(part).name for part in compose), version]))
    return "config -q alone, with spark-cluster, with CURVE and with HA: " + ", ".join(names)


def _files(pattern: str) -> list[Path]:
    return sorted(p for p in ROOT.glob(pattern) if p.is_file())


def check_dockerfiles() -> str:
    files = _files(DOCKERFILES)
    if not files:
        return f"no {DOCKERFILES}"
    run(tool("hadolint"), *(str(f.relative_to(ROOT)) for f in files))
    return f"hadolint: {', '.join(f.name for f in files)}"


def check_prometheus() -> str:
    files = _files(PROMETHEUS_CONFIGS)
    if not files:
        return f"no {PROMETHEUS_CONFIGS}"
    run(tool("promtool"), "check", "config", *(str(f.relative_to(ROOT)) for f in files))
    return f"promtool check config: {', '.join(f.name for f in files)}"


def _checks() -> dict[str, Callable[[], str]]:
    from tests.support.chart import VALUE_SETS

    checks: dict[str, Callable[[], str]] = {
        "deploy/local-cluster.toml": local_cluster_check("local-cluster.toml"),
        "deploy/local-cluster-ha.toml": local_cluster_check("local-cluster-ha.toml"),
        "helm/zbus/values.schema.json": check_values_schema,
    }
    for name in VALUE_SETS:
        checks[f"helm/zbus ({name})"] = chart_check(name)
    checks["docker-compose.yml"] = check_compose
    checks["docker-compose.yml (the machine's Compose)"] = check_system_compose
    checks[DOCKERFILES] = check_dockerfiles
    checks[PROMETHEUS_CONFIGS] = check_prometheus
    return checks


CHECKS = _checks()


def main(argv: Sequence[str] = ()) -> int:
    chosen = {n: c for n, c in CHECKS.items() if not argv or n in argv}
    unknown = set(argv) - set(CHECKS)
    if unknown:
        print(f"unknown checks: {', '.join(sorted(unknown))}; known: {', '.join(CHECKS)}")
        return 2
    failed = 0
    for name, check in chosen.items():
        try:
            print(f"ok    {name}: {check()}", flush=True)
        except (ConfigError, OSError, ValueError) as exc:
            failed += 1
            print(f"FAIL  {name}: {exc}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
