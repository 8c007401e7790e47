"""The shipped local clusters (deploy/local-cluster.toml, run by `zbus up`, and
deploy/local-cluster-ha.toml, run by `zbus up --ha`) for tests.

Every port in the cluster file is moved to a free one, so that a test does not collide
with a cluster already running on this machine; the services, their modules or commands
and their settings stay as shipped, plus what a test adds (``env``). The launcher runs as
a subprocess and is stopped with SIGTERM (it stops every service it started).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import tomllib
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from tests.support.ports import HeldPorts
from tests.support.waiting import UNIT

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "deploy" / "local-cluster.toml"
HA_SHIPPED = ROOT / "deploy" / "local-cluster-ha.toml"

#: The fixed ports of the shipped cluster file besides the event bus's four.
FIXED_PORTS = (5246, 47291, 47290, 61616, 5560, 8701, 8702, 8703, 8704, 8705)
#: The HA cluster file's: each replica's base port P (P..P+3 ZeroMQ, P+4 PPPP, P+5
#: replication), then the others.
HA_REPLICA_BASES = (5556, 5566, 5576)
HA_FIXED_PORTS = (
    *(2379, 2380, 5246, 47291, 47290, 61616, 61626, 61636),
    *(8701, 8702, 8712, 8722, 8703, 8704, 8705),
)


def port_map() -> tuple[dict[int, int], HeldPorts]:
    """Each port of the shipped cluster file, moved to a free one (the event bus's four
    consecutive, as its base port P..P+3), and the moved ports, held by this process until
    the launcher starts: the cluster file gives the launcher its services' ports."""
    held = HeldPorts(4 + len(FIXED_PORTS))
    moved = {5556 + i: held.ports[i] for i in range(4)}
    moved.update(zip(FIXED_PORTS, held.ports[4:], strict=True))
    return moved, held


def ha_port_map() -> tuple[dict[int, int], HeldPorts]:
    """:func:`port_map` for the HA cluster file: each replica's six ports moved together."""
    block = 6 * len(HA_REPLICA_BASES)
    held = HeldPorts(block + len(HA_FIXED_PORTS))
    moved = {
        base + i: held.ports[6 * n + i] for n, base in enumerate(HA_REPLICA_BASES) for i in range(6)
    }
    moved.update(zip(HA_FIXED_PORTS, held.ports[block:], strict=True))
    return moved, held


def moved(text: str, ports: Mapping[int, int]) -> str:
    """``text`` with every number that is a shipped port replaced by its moved one."""
    return re.sub(r"\b(\d{4,5})\b", lambda m: str(ports.get(int(m[1]), m[1])), text)


def _toml_string(value: str) -> str:
    return json.dumps(value)  # a JSON string is a valid TOML basic string


def cluster_file(
    path: Path,
    ports: Mapping[int, int],
    *,
    services: tuple[str, ...] | None = None,
    env: Mapping[str, Mapping[str, str]] | None = None,
    restart: Mapping[str, float] | None = None,
    shipped: Path = SHIPPED,
) -> Path:
    """Write the shipped cluster with moved ports to ``path``.

    Args:
        path: the file to write.
        ports: the port map (:func:`port_map`, :func:`ha_port_map`).
        services: the services to keep (all when None), in the shipped order.
        env: settings to add, by service name.
        restart: the ``[restart]`` table (the launcher's back-off and give-up rules),
            over the shipped file's.
        shipped: the shipped cluster file.
    """
    content = tomllib.loads(moved(shipped.read_text(), ports))
    lines: list[str] = []
    rules = {**content.get("restart", {}), **(restart or {})}
    if rules:
        lines += ["[restart]", *(f"{k} = {v}" for k, v in rules.items()), ""]
    for entry in content["service"]:
        if services is not None and entry["name"] not in services:
            continue
        settings = {**entry.get("env", {}), **(env or {}).get(entry["name"], {})}
        if "command" in entry:  # a program: its command, readiness path and install hint
            how = [
                f"command = [{', '.join(_toml_string(w) for w in entry['command'])}]",
                f"ready_path = {_toml_string(entry.get('ready_path', '/readyz'))}",
                *(
                    [f"install_hint = {_toml_string(entry['install_hint'])}"]
                    if "install_hint" in entry
                    else []
                ),
            ]
        else:
            how = [f"module = {_toml_string(entry['module'])}"]
        lines += [
            "[[service]]",
            f"name = {_toml_string(entry['name'])}",
            *how,
            f"admin_port = {int(entry['admin_port'])}",
            f"ready_timeout = {float(entry.get('ready_timeout', 60.0) * UNIT * 2)}",
            "env = { "
            + ", ".join(f"{k} = {_toml_string(str(v))}" for k, v in settings.items())
            + " }",
            "",
        ]
    path.write_text("\n".join(lines))
    return path


@dataclass(frozen=True)
class LocalCluster:
    """A running local cluster: its port map and the admin URL of each service."""

    ports: Mapping[int, int]  # shipped port -> the port it runs on
    state_dir: Path
    config: Path
    # `zbus up` (stdout: its lines after the summary); the block may stop it itself.
    launcher: subprocess.Popen[str] | None = None

    ADMIN: ClassVar[dict[str, int]] = {
        "catalog": 8701,
        "eventbus": 8702,
        "broker": 8703,
        "sparkworker": 8704,
        "worker": 8705,
        # the HA cluster's
        "etcd": 2379,
        "eventbus-1": 8702,
        "eventbus-2": 8712,
        "eventbus-3": 8722,
    }

    def url(self, service: str) -> str:
        """The admin URL of ``service``, e.g. ``http://127.0.0.1:40123``."""
        return f"http://127.0.0.1:{self.ports[self.ADMIN[service]]}"

    def endpoint(self, shipped_port: int) -> str:
        """``tcp://127.0.0.1:PORT`` for a shipped port, moved."""
        return f"tcp://127.0.0.1:{self.ports[shipped_port]}"

    def moved(self, text: str) -> str:
        """``text`` with every shipped port number replaced by the one it runs on."""
        return moved(text, self.ports)


@contextmanager
def local_cluster(
    tmp_path: Path,
    *,
    services: tuple[str, ...] | None = None,
    without: Iterable[str] = (),
    env: Mapping[str, Mapping[str, str]] | None = None,
    launcher_env: Mapping[str, str] | None = None,
    restart: Mapping[str, float] | None = None,
    output: list[str] | None = None,
    ha: bool = False,
) -> Iterator[LocalCluster]:
    """Run the shipped local cluster with ``zbus up`` until the block ends.

    Args:
        tmp_path: where the cluster file and the state directory go.
        services: the services to run (all when None).
        without: services of the shipped file not to run (e.g. ``("sparkworker",)``).
        env: settings to add, by service name.
        launcher_env: environment of the launcher (every service inherits it).
        restart: the cluster file's ``[restart]`` table.
        output: where the launcher's lines up to its summary are put (when given).
        ha: the HA cluster (deploy/local-cluster-ha.toml, ``zbus up --ha``) instead.
    """
    source = HA_SHIPPED if ha else SHIPPED
    shipped = [s["name"] for s in tomllib.loads(source.read_text())["service"]]
    unknown = (set(services or ()) | set(without)) - set(shipped)
    assert not unknown, f"the shipped cluster has no {sorted(unknown)}"
    if services is None and without:
        services = tuple(name for name in shipped if name not in set(without))
    ports, held = ha_port_map() if ha else port_map()
    config = cluster_file(
        tmp_path / "cluster.toml",
        ports,
        services=services,
        env=env,
        restart=restart,
        shipped=source,
    )
    state = tmp_path / "state"
    held.release()
    up = ["up", "--ha"] if ha else ["up"]
    launcher = subprocess.Popen(
        [sys.executable, "-m", "zbus", *up, "--config", str(config), "--state-dir", str(state)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, **(launcher_env or {})},
    )
    try:
        assert launcher.stdout is not None
        seen = []
        for line in launcher.stdout:
            seen.append(line)
            if "stops the cluster" in line:
                break
        else:
            logs = ""
            for log in sorted((state / "logs").glob("*.log")):
                logs += f"\n--- {log.name}\n" + log.read_text(errors="replace")[-3000:]
            raise AssertionError("the cluster did not start:\n" + "".join(seen) + logs)
        if output is not None:
            output += seen
        yield LocalCluster(ports, state, config, launcher)
    finally:
        if launcher.poll() is None:
            launcher.send_signal(signal.SIGTERM)
            launcher.wait(timeout=60 * UNIT)
        if launcher.stdout is not None:
            launcher.stdout.close()
