"""``zbus status`` and ``zbus services ls``: the cluster as the catalog sees it.

``status`` reads the catalog's ``/api/v1/cluster`` (the catalog asks every registered
service's ``/api/v1/info`` and ``/readyz``) and prints one row per service, the catalog
first. Its exit status is 0 when every service is ready, 1 otherwise (or when the
catalog cannot be reached), so ``zbus status`` works as a health check in scripts.

On the local cluster (``zbus up``) the catalog adds what the launcher knows: each
service's restart count (a RESTARTS column), and the services it restarts or gave up
on, which the catalog may have no registration for; a given-up service is named in the
last line.

An event bus run as replicas (``zbus up --ha``) answers ``/api/v1/replication``: each
replica's role (leader, follower or candidate) is then a ROLE column, the leader is
named in the last line, and ``--json`` has each replica's answer as ``replication``.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from zbus.cli.common import CliError, Cluster, add_catalog_option, add_json_option, located
from zbus.cli.output import ago, duration, print_json, table
from zbus.common.urls import split_url
from zbus.launcher.procs import pid_alive
from zbus.launcher.state import read_pidfile

__all__ = ["add_parsers", "run_services", "run_status"]

GIVEN_UP = "given up"
# A launcher's states shown instead of the catalog's: the service is down.
_DOWN = (GIVEN_UP, "restarting")
BUS = "eventbus"


def add_parsers(sub: Any) -> None:
    """Add ``status`` and ``services`` to the ``zbus`` command's subparsers."""
    status = sub.add_parser(
        "status", help="one table of the cluster (exit 1 when a service is not ready)"
    )
    add_catalog_option(status)
    add_json_option(status)
    status.add_argument(
        "--state-dir",
        type=Path,
        default=Path(".zbus"),
        help="the local cluster's state dir, read when the catalog cannot be reached",
    )

    services = sub.add_parser("services", help="the services registered with the catalog")
    actions = services.add_subparsers(dest="services_command", metavar="ACTION", required=True)
    ls = actions.add_parser("ls", help="list the registered services and their endpoints")
    add_catalog_option(ls)
    add_json_option(ls)


def _failing(entry: dict[str, Any]) -> str:
    if entry.get("error"):
        return str(entry["error"])
    checks = entry.get("checks")
    if isinstance(checks, dict):
        bad = sorted(name for name, ok in checks.items() if not ok)
        if bad:
            return "failing: " + ", ".join(bad)
    return ""


def run_status(args: argparse.Namespace, cluster: Cluster) -> int:
    try:
        view = cluster.get(f"{cluster.catalog}/api/v1/cluster", "the catalog")
    except CliError as exc:
        # The catalog itself may be the service the local cluster's launcher restarts or
        # gave up: its state file still says which.
        launcher = _launcher_view(getattr(args, "state_dir", None))
        if launcher is None:
            raise
        return _print_launcher_view(args, cluster, launcher, str(exc))
    if not isinstance(view, dict) or not isinstance(view.get("services"), list):
        raise CliError(f"the catalog at {cluster.catalog} answered no cluster view")
    found = view.get("catalog")
    catalog: dict[str, Any] = found if isinstance(found, dict) else {}
    entries: list[dict[str, Any]] = [
        {
            "name": catalog.get("name", "catalog"),
            "state": "active",
            "admin": cluster.catalog,
            "info": catalog,
            "ready": bool(catalog.get("ready")),
            "checks": catalog.get("checks"),
            "error": None,
            "restarts": catalog.get("restarts"),
            "supervised": catalog.get("supervised"),
        }
    ]
    entries += [e for e in view["services"] if isinstance(e, dict)]
    ready = all(e.get("ready") is True for e in entries)
    replication = _replication(cluster, entries)
    if args.json:
        for e in entries:
            if (answer := replication.get(str(e.get("name")))) is not None:
                e["replication"] = answer
        print_json({"ready": ready, "catalog": cluster.catalog, "services": entries})
        return 0 if ready else 1
    supervised = view.get("supervised") is True
    roles = _roles(replication)
    rows = []
    for e in entries:
        raw = e.get("info")
        info: dict[str, Any] = raw if isinstance(raw, dict) else {}
        flag = "yes" if e.get("ready") is True else "NO"  # no answer: not ready either
        state = e.get("supervised") if e.get("supervised") in _DOWN else e.get("state")
        row = [e.get("name"), state, flag]
        if supervised:
            restarts = e.get("restarts")
            row.append(restarts if isinstance(restarts, int) else "-")
        if roles:
            row.append(roles.get(str(e.get("name")), "-"))
        row += [
            info.get("version", "-"),
            duration(info.get("uptime_seconds")),
            info.get("pid", "-"),
            e.get("admin") or "-",
            _failing(e),
        ]
        rows.append(row)
    head = ["SERVICE", "STATE", "READY", *(["RESTARTS"] if supervised else [])]
    head += ["ROLE"] if roles else []
    table([*head, "VERSION", "UPTIME", "PID", "ADMIN", "DETAIL"], rows)
    waiting = sum(1 for e in entries if e.get("ready") is not True)
    given_up = [str(e.get("name")) for e in entries if e.get("supervised") == GIVEN_UP]
    print(
        f"{len(entries)} services, "
        + ("all ready" if ready else f"{waiting} not ready")
        + (f", given up: {', '.join(given_up)}" if given_up else "")
        + _leader_note(roles)
        + f" (catalog {cluster.catalog})"
    )
    return 0 if ready else 1


def _replication(cluster: Cluster, entries: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Each event bus replica's ``/api/v1/replication`` answer, by service name: asked of
    the services named ``eventbus...`` or whose ``/api/v1/info`` says they are one. A bus
    that is not replicated (role ``single``), or does not answer, is left out."""
    found: dict[str, dict[str, Any]] = {}
    for e in entries:
        name, admin, info = e.get("name"), e.get("admin"), e.get("info")
        kind = info.get("name") if isinstance(info, dict) else None
        if not (isinstance(name, str) and isinstance(admin, str) and admin):
            continue
        if not (name.startswith(BUS) or kind == BUS):
            continue
        try:
            answer = cluster.get(f"{admin.rstrip('/')}/api/v1/replication", f"the {name}")
        except CliError:
            continue  # down, or a bus without the route: no role to show
        if isinstance(answer, dict) and answer.get("role") not in (None, "single"):
            found[name] = answer
    return found


def _roles(replication: dict[str, dict[str, Any]]) -> dict[str, str]:
    return {name: str(answer.get("role")) for name, answer in replication.items()}


def _leader_note(roles: dict[str, str]) -> str:
    """``, bus leader eventbus-2`` for the last line; nothing without replicas."""
    if not roles:
        return ""
    leaders = sorted(name for name, role in roles.items() if role == "leader")
    return f", bus leader {', '.join(leaders)}" if leaders else ", no bus leader"


def _launcher_view(state_dir: Path | None) -> list[dict[str, Any]] | None:
    """The services of a running local cluster as its launcher sees them, or None."""
    if state_dir is None:
        return None
    state = read_pidfile(state_dir / "run" / "cluster.json")
    if state is None or not pid_alive(state["launcher"]):
        return None
    supervised = state.get("supervised")
    if not isinstance(supervised, list):
        return None
    return [s for s in supervised if isinstance(s, dict)]


def _print_launcher_view(
    args: argparse.Namespace, cluster: Cluster, services: list[dict[str, Any]], why: str
) -> int:
    """``zbus status`` without the catalog: the launcher's state file; always exit 1."""
    given_up = [str(s.get("name")) for s in services if s.get("state") == GIVEN_UP]
    if args.json:
        print_json({"ready": False, "error": why, "launcher": services})
        return 1
    print(f"{why}; the local cluster's launcher says:")
    roles = _roles(_replication(cluster, services))
    rows = [
        [
            s.get("name"),
            s.get("state"),
            s.get("restarts", "-"),
            *([roles.get(str(s.get("name")), "-")] if roles else []),
            s.get("pid") or "-",
            s.get("admin") or "-",
            s.get("last_exit") or "",
        ]
        for s in services
    ]
    head = ["SERVICE", "STATE", "RESTARTS", *(["ROLE"] if roles else [])]
    table([*head, "PID", "ADMIN", "LAST EXIT"], rows)
    print(
        f"{len(services)} services, the catalog unreachable"
        + (f", given up: {', '.join(given_up)}" if given_up else "")
        + _leader_note(roles)
    )
    return 1


def run_services(args: argparse.Namespace, cluster: Cluster) -> int:
    _, entries = cluster.get_list(
        f"{cluster.catalog}/api/v1/services",
        "the catalog",
        "services",
        f"the catalog at {cluster.catalog} answered no service list",
    )
    if args.json:
        print_json({"services": entries})
        return 0
    now = time.time()
    rows = []
    for entry in sorted(
        (e for e in entries if isinstance(e, dict)), key=lambda e: str(e.get("name"))
    ):
        where = located(entry)
        host = urlsplit(where.admin).hostname if where.admin else None
        ports = ", ".join(
            f"{k} {_short_endpoint(v, host)}"
            for k, v in sorted(where.endpoints.items())
            if k != "admin"
        )
        rows.append(
            [
                where.name,
                where.function,
                where.state,
                duration(entry.get("uptime_seconds")),
                ago(entry.get("last_heartbeat"), now),
                where.admin or "-",
                ports or "-",
            ]
        )
    table(["NAME", "FUNCTION", "STATE", "UPTIME", "HEARTBEAT", "ADMIN", "ENDPOINTS"], rows)
    return 0


def _short_endpoint(endpoint: str, host: str | None) -> str:
    """``tcp://HOST:5556`` as ``:5556`` when HOST is the admin URL's host."""
    parts = split_url(endpoint)
    if parts is None:
        return endpoint
    if host is not None and parts.hostname == host and parts.port is not None:
        return f"{parts.scheme}:{parts.port}"
    return endpoint
