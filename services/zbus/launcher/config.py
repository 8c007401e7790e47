"""The cluster file (``deploy/local-cluster.toml``): the services, in start order, and
the restart policy (an optional ``[restart]`` table).

A service is a zbus service (``module = "zbus.eventbus"``, run as ``python -m``) or another
program (``command = ["etcd", ...]``, run as it is, found on ``PATH``), never both. A
program is ready when ``ready_path`` on its admin port answers 200 (``/readyz`` for a
zbus service, e.g. ``/health`` for etcd); ``{data_dir}`` in its command is its data
directory, and ``install_hint`` is how to install it, said when it is missing.
"""

from __future__ import annotations

import shutil
import sys
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from zbus.common.settings import ConfigError
from zbus.launcher.policy import RestartPolicy

__all__ = ["DATA_DIR", "ClusterFile", "ServiceSpec", "load_cluster", "load_cluster_file"]

DEFAULT_SHUTDOWN = 30.0  # the sparkworker's ZBUS_SHUTDOWN_TIMEOUT; the others' is 5 s
STOP_MARGIN = 5.0
#: In a program's command, replaced by its data directory (``<state dir>/data/<name>``).
DATA_DIR = "{data_dir}"
_KEYS = frozenset(
    {
        "name",
        "module",
        "command",
        "admin_port",
        "env",
        "ready_timeout",
        "ready_path",
        "install_hint",
    }
)


@dataclass(frozen=True, slots=True)
class ServiceSpec:
    """One service of the local cluster, as the cluster file describes it."""

    name: str
    module: str  # a zbus service's module (``python -m``); empty for a program
    admin_port: int
    env: dict[str, str] = field(default_factory=dict)
    ready_timeout: float = 60.0
    command: tuple[str, ...] = ()  # a program's command line; empty for a zbus service
    ready_path: str = "/readyz"
    install_hint: str | None = None

    @property
    def admin_url(self) -> str:
        return f"http://127.0.0.1:{self.admin_port}"

    @property
    def is_program(self) -> bool:
        """Whether it is a program given by its command, not a zbus service."""
        return bool(self.command)

    @property
    def ready_url(self) -> str:
        return f"{self.admin_url}{self.ready_path}"

    def argv(self, data_dir: Path) -> list[str]:
        """The command line that starts it, with ``{data_dir}`` replaced by ``data_dir``."""
        if not self.command:
            return [sys.executable, "-m", self.module]
        return [word.replace(DATA_DIR, str(data_dir)) for word in self.command]

    def missing_program(self) -> str | None:
        """What to say when its program cannot be found (on ``PATH``, or at the path
        given), with how to install it; None when it is found, or it is a zbus service."""
        if not self.command or shutil.which(self.command[0]) is not None:
            return None
        hint = f"; install it with `{self.install_hint}`" if self.install_hint else ""
        return f"{self.name}: the program `{self.command[0]}` is not installed{hint}"

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
    unknown = sorted(set(entry) - _KEYS)
    if unknown:
        raise ConfigError(f"{where}: a service has no key {unknown[0]!r}")
    if "module" not in entry and "command" not in entry:
        raise ConfigError(f"{where}: missing key 'module' (a zbus service) or 'command'")
    if "module" in entry and "command" in entry:
        raise ConfigError(f"{where}: give 'module' (a zbus service) or 'command', not both")
    try:
        name, port = entry["name"], entry["admin_port"]
    except KeyError as exc:
        raise ConfigError(f"{where}: missing key {exc.args[0]!r}") from None
    module, command = entry.get("module", ""), entry.get("command", [])
    env = entry.get("env", {})
    timeout = entry.get("ready_timeout", 60.0)
    ready_path = entry.get("ready_path", "/readyz")
    hint = entry.get("install_hint")
    if not (isinstance(name, str) and isinstance(module, str)):
        raise ConfigError(f"{where}: name and module must be strings")
    if "module" in entry and not module:
        raise ConfigError(f"{where}: module must name a module")
    if not isinstance(command, list) or not all(isinstance(w, str) for w in command):
        raise ConfigError(f"{where}: command must be a list of strings")
    if "command" in entry and not (command and command[0]):
        raise ConfigError(f"{where}: command must start with the program")
    if not isinstance(port, int) or not 0 < port < 65536:
        raise ConfigError(f"{where}: admin_port must be a port number")
    if not isinstance(env, dict) or not all(isinstance(v, str | int) for v in env.values()):
        raise ConfigError(f"{where}: env must map names to strings or numbers")
    if not isinstance(timeout, int | float) or not 0 < timeout <= 3600:  # NaN is refused too
        raise ConfigError(f"{where}: ready_timeout must be a number of seconds in (0, 3600]")
    if not isinstance(ready_path, str) or not ready_path.startswith("/"):
        raise ConfigError(f"{where}: ready_path must be a path starting with '/'")
    if hint is not None and not isinstance(hint, str):
        raise ConfigError(f"{where}: install_hint must be a string")
    return ServiceSpec(
        name,
        module,
        port,
        {k: str(v) for k, v in env.items()},
        float(timeout),
        command=tuple(command),
        ready_path=ready_path,
        install_hint=hint,
    )


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
