"""The shipped local cluster (deploy/local-cluster.toml, as `zbus up` runs it) on free ports.

Every port of the shipped file is moved to a free one, so that a test does not collide
with a cluster already running here; nothing else in the file changes. Use::

    with local_cluster(tmp_path, without=("sparkworker",)) as cluster:
        httpx.get(cluster.url("catalog"))          # the catalog's admin URL
        cluster.moved("tcp://127.0.0.1:5556")      # any text with shipped ports in it

The launcher runs as a subprocess (``python -m zbus up``) and is stopped with SIGTERM,
which stops every service in reverse order.
"""

from __future__ import annotations

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

import httpx

from tests.support.bus import free_base_port, free_port
from tests.support.waiting import UNIT

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "deploy" / "local-cluster.toml"

# The shipped cluster's ports: the bus's four (P..P+3) and every other one it names.
BUS_BASE = 5556
OTHER_PORTS = (61616, 5246, 47291, 47290, 8701, 8702, 8703, 8704, 8705)


@dataclass(frozen=True, slots=True)
class LocalCluster:
    """A running local cluster: where its ports went and where its state is."""

    ports: Mapping[int, int]  # shipped port -> the port it runs on
    admin: Mapping[str, int]  # service name -> its admin port (moved)
    state_dir: Path
    config: Path

    def url(self, service: str) -> str:
        """The admin URL of ``service``, e.g. ``http://127.0.0.1:40123``."""
        return f"http://127.0.0.1:{self.admin[service]}"

    def moved(self, text: str) -> str:
        """``text`` with every shipped port number replaced by the one it runs on."""
        return moved(text, self.ports)

    def endpoint(self, shipped_port: int) -> str:
        """``tcp://127.0.0.1:PORT`` for a shipped port, moved."""
        return f"tcp://127.0.0.1:{self.ports[shipped_port]}"


def port_map() -> dict[int, int]:
    """A free port for every port of the shipped cluster."""
    bus = free_base_port()
    ports = {BUS_BASE + i: bus + i for i in range(4)}
    for port in OTHER_PORTS:
        ports[port] = free_port()
    return ports


def moved(text: str, ports: Mapping[int, int]) -> str:
    """``text`` with every 4- or 5-digit number that is a key of ``ports`` replaced."""
    return re.sub(r"\b(\d{4,5})\b", lambda m: str(ports.get(int(m[1]), m[1])), text)


def cluster_file(path: Path, ports: Mapping[int, int], without: Iterable[str] = ()) -> Path:
    """Write the shipped cluster file to ``path``, ports moved, ``without`` services left out."""
    shipped = SHIPPED.read_text()
    names = {s["name"] for s in tomllib.loads(shipped)["service"]}
    unknown = set(without) - names
    assert not unknown, f"the shipped cluster has no {sorted(unknown)}"
    blocks = shipped.split("[[service]]")
    kept = [blocks[0]]
    kept += [b for b in blocks[1:] if not any(f'name = "{n}"' in b for n in without)]
    path.write_text(moved("[[service]]".join(kept), ports))
    return path


@contextmanager
def local_cluster(
    tmp_path: Path, *, without: Iterable[str] = (), env: Mapping[str, str] | None = None
) -> Iterator[LocalCluster]:
    """Run the shipped local cluster on free ports until the block ends.

    Args:
        tmp_path: where the cluster file and the state directory go.
        without: services of the shipped file not to start (e.g. ``("sparkworker",)``).
        env: extra environment of every service (e.g. ``{"ZBUS_ADMIN_TOKEN": "t"}``).
    """
    ports = port_map()
    without = tuple(without)
    config = cluster_file(tmp_path / "cluster.toml", ports, without)
    specs = tomllib.loads(config.read_text())["service"]
    admin = {s["name"]: int(s["admin_port"]) for s in specs}
    state = tmp_path / "state"
    launcher = subprocess.Popen(
        [sys.executable, "-m", "zbus", "up", "--config", str(config), "--state-dir", str(state)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, **(env or {})},
    )
    try:
        assert launcher.stdout is not None
        seen = []
        for line in launcher.stdout:
            seen.append(line)
            if "stops the cluster" in line:
                break
        else:
            raise AssertionError("the cluster did not start:\n" + "".join(seen))
        for port in admin.values():
            assert httpx.get(f"http://127.0.0.1:{port}/readyz").status_code == 200
        yield LocalCluster(ports, admin, state, config)
    finally:
        if launcher.poll() is None:
            launcher.send_signal(signal.SIGTERM)
            launcher.wait(timeout=60 * UNIT)
        if launcher.stdout is not None:
            launcher.stdout.close()
