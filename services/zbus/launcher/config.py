"""The cluster file (``deploy/local-cluster.toml``): the services, in start order, and
the restart policy (an optional ``[restart]`` table)."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from zbus.common.settings import ConfigError
from zbus.launcher.policy import RestartPolicy

__all__ = ["ClusterFile", "ServiceSpec", "load_cluster", "load_cluster_file"]

DEFAULT_SHUTDOWN = 30.0  # the sparkworker's ZBUS_SHUTDOWN_TIMEOUT; the others' is 5 s
STOP_MARGIN = 5.0


@dataclass(frozen=True, slots=True)
class ServiceSpec:
    """One service of the local cluster, as the cluster file describes it."""

    name: str
    module: str
    admin_port: int
    env: dict[str, str] = field(default_factory=dict)
    ready_timeout: float = 60.0

    @property
    def admin_url(self) -> str:
        return f"http://127.0.0.1:{self.admin_port}"

    @property
    def stop_grace(self) -> float:
        """Seconds the service has to stop on SIGTERM before it is killed: its own
        graceful deadline (``ZBUS_SHUTDOWN_TIMEOUT``, else the longest default of a zbus
        service, the sparkworker's 30 s) and 5 s to exit."""
        try:
            own = float(self.env.get("ZBUS_SHUTDOWN_TIMEOUT", DEFAULT_SHUTDOWN))
        except ValueError:
            own = DEFAULT_SHUTDOWN  # the service refuses it and exits at once
        return min(own, 3600.0) + STOP_MARGIN


@dataclass(frozen=True, slots=True)
class ClusterFile:
    """What a cluster file says: the services in start order, and how they restart."""

    services: list[ServiceSpec]
    restart: RestartPolicy = field(default_factory=RestartPolicy)


def load_cluster(path: Path) -> list[ServiceSpec]:
    """The services of the cluster file, in start order.

    Raises:
        ConfigError: the file is missing, not TOML, or an entry is incomplete.
    """
    return load_cluster_file(path).services


def load_cluster_file(path: Path) -> ClusterFile:
    """The services of the cluster file and its restart policy.

    Raises:
        ConfigError: the file is missing, not TOML, or an entry is incomplete.
    """
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"cluster file {path} not found") from None
    except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cluster file {path}: {exc}") from None
    entries = raw.get("service", [])
    if not isinstance(entries, list):
        raise ConfigError(f"cluster file {path}: [[service]] must be an array of tables")
    specs = [
        _service(entry, f"cluster file {path}, service #{i + 1}") for i, entry in enumerate(entries)
    ]
    names = [s.name for s in specs]
    if len(set(names)) != len(names):
        raise ConfigError(f"cluster file {path}: service names must be unique")
    ports = [s.admin_port for s in specs]
    if len(set(ports)) != len(ports):
        raise ConfigError(f"cluster file {path}: admin ports must be unique")
    return ClusterFile(specs, _restart(raw.get("restart", {}), f"cluster file {path}"))


def _service(entry: Any, where: str) -> ServiceSpec:
    if not isinstance(entry, dict):
        raise ConfigError(f"{where}: not a table")
    try:
        name, module, port = entry["name"], entry["module"], entry["admin_port"]
    except KeyError as exc:
        raise ConfigError(f"{where}: missing key {exc.args[0]!r}") from None
    env = entry.get("env", {})
    timeout = entry.get("ready_timeout", 60.0)
    if not (isinstance(name, str) and isinstance(module, str)):
        raise ConfigError(f"{where}: name and module must be strings")
    if not isinstance(port, int) or not 0 < port < 65536:
        raise ConfigError(f"{where}: admin_port must be a port number")
    if not isinstance(env, dict) or not all(isinstance(v, str | int) for v in env.values()):
        raise ConfigError(f"{where}: env must map names to strings or numbers")
    if not isinstance(timeout, int | float) or timeout <= 0:
        raise ConfigError(f"{where}: ready_timeout must be a positive number")
    return ServiceSpec(name, module, port, {k: str(v) for k, v in env.items()}, float(timeout))


_RESTART_KEYS = {
    "backoff": float,
    "backoff_max": float,
    "healthy_after": float,
    "start_attempts": int,
}


def _restart(table: Any, where: str) -> RestartPolicy:
    if not isinstance(table, dict):
        raise ConfigError(f"{where}: [restart] must be a table")
    unknown = sorted(set(table) - set(_RESTART_KEYS))
    if unknown:
        raise ConfigError(f"{where}: [restart] has no key {unknown[0]!r}")
    values: dict[str, Any] = {}
    for key, kind in _RESTART_KEYS.items():
        if key not in table:
            continue
        value = table[key]
        numeric = isinstance(value, int) if kind is int else isinstance(value, int | float)
        if not numeric or isinstance(value, bool):
            raise ConfigError(f"{where}: [restart] {key} must be a number")
        values[key] = kind(value)
    try:
        return RestartPolicy(**values)
    except ValueError as exc:
        raise ConfigError(f"{where}: [restart] {exc}") from None
