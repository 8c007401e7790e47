"""What the launcher (``zbus up``) knows of the services it supervises, in the cluster view.

The launcher keeps a state file (``.zbus/run/cluster.json``, see
:mod:`zbus.launcher.state`) with each service's supervision: its state (``ready``,
``restarting``, ``given up``, ...), its restart count and how its last process ended. A
catalog started by the launcher is told the file (``ZBUS_LAUNCHER_STATE``) and adds it to
``GET /api/v1/cluster``: each entry gets ``restarts`` and ``supervised`` (the state),
matched by admin URL, and a supervised service the catalog has no entry for while it is
down (given up, or waiting to restart) gets an entry of its own, not ready, with an
``error`` that says why. ``zbus status`` and the dashboard show both.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = ["GIVEN_UP", "merge_supervised", "read_supervised"]

GIVEN_UP = "given up"
_DOWN = frozenset({GIVEN_UP, "restarting", "starting", "pending"})


def read_supervised(path: Path | None) -> list[dict[str, Any]] | None:
    """The ``supervised`` entries of the launcher's state file; None without a file (no
    launcher, or it has stopped)."""
    if path is None:
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    entries = data.get("supervised") if isinstance(data, dict) else None
    if not isinstance(entries, list):
        return None
    return [e for e in entries if isinstance(e, dict) and isinstance(e.get("name"), str)]


def _key(url: Any) -> str | None:
    return url.rstrip("/") if isinstance(url, str) and url else None


def _why(sup: Mapping[str, Any]) -> str:
    state = sup.get("state")
    last = sup.get("last_exit")
    if state == GIVEN_UP:
        tries = sup.get("failed_starts")
        return f"given up after {tries} failed starts" + (f" (last: {last})" if last else "")
    if state == "restarting":
        return "restarting" + (f" (last: {last})" if last else "")
    return str(state)


def merge_supervised(
    catalog: dict[str, Any],
    services: list[dict[str, Any]],
    supervised: list[dict[str, Any]] | None,
) -> list[dict[str, Any]]:
    """Add the launcher's view to the cluster view, in place; the services' entries.

    Args:
        catalog: the catalog's own entry (its ``endpoints.admin`` is its admin URL).
        services: one entry per registered service (:func:`gather_cluster`).
        supervised: :func:`read_supervised`'s entries, or None (nothing is added).

    Returns:
        ``services`` with an entry added for each supervised service that is down and
        that the catalog has none for.
    """
    if supervised is None:
        return services
    by_admin = {k: sup for sup in supervised if (k := _key(sup.get("admin"))) is not None}
    endpoints = catalog.get("endpoints")
    mine = _key(endpoints.get("admin")) if isinstance(endpoints, dict) else None
    matched: set[str] = set()
    for entry, admin in [(catalog, mine), *((e, _key(e.get("admin"))) for e in services)]:
        sup = by_admin.get(admin) if admin is not None else None
        if sup is not None and admin is not None:
            matched.add(admin)
            entry["restarts"] = sup.get("restarts")
            entry["supervised"] = sup.get("state")
    for admin, sup in by_admin.items():
        if admin in matched or sup.get("state") not in _DOWN:
            continue
        services.append(
            {
                "name": sup["name"],
                "state": sup.get("state"),
                "admin": admin,
                "info": None,
                "ready": False,
                "checks": None,
                "error": _why(sup),
                "restarts": sup.get("restarts"),
                "supervised": sup.get("state"),
            }
        )
    return services
