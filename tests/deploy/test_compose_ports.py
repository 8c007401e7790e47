"""The e2e harness moves every port the compose files publish (no docker needed).

A port the harness left where docker-compose.yml puts it collides with whatever holds it
on the machine (a `make up` cluster, another project): the compose tests then error.
"""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from tests.e2e.compose import COMPOSE_FILE, ROOT, WORKER_PORTS, move_ports
from tests.support.compose import PublishedPort, published_ports

#: Every compose file the e2e tests run, over docker-compose.yml.
FILES = (COMPOSE_FILE, ROOT / "deploy" / "compose.curve.yml", ROOT / "deploy" / "compose.ha.yml")


def _every_published() -> list[PublishedPort]:
    return [port for path in FILES for port in published_ports(path)]


def test_the_compose_file_publishes_ports_the_reader_sees() -> None:
    """The reader is not blind: the bus's doors, the workers' range and the UDP ports."""
    variables = {port.variable for port in _every_published()}
    assert {
        "ZBUS_EVENTBUS_PORT",
        "ZBUS_EVENTBUS_MC0_PORT",
        "ZBUS_EVENTBUS_PPPP_PORT",
        "ZBUS_CATALOG_UDP_PORT",
        "ZBUS_WORKER_ADMIN_PORTS",
        "ZBUS_EVENTBUS_2_REPLICATION_PORT",
    } <= variables


@pytest.mark.parametrize("port", _every_published(), ids=lambda p: f"{p.service}:{p.target}")
def test_every_published_port_is_set_by_a_variable(port: PublishedPort) -> None:
    """A fixed host port (``8080:8080``) could not be moved by any harness."""
    assert port.variable is not None, f"{port.service} publishes {port.entry!r}"


def test_the_harness_moves_every_published_port_off_its_default() -> None:
    moved = move_ports(FILES)
    try:
        for port in _every_published():
            assert port.variable in moved.values, f"{port.entry} is not moved"
            value = moved.values[port.variable]
            assert value != port.default
            if port.is_range:
                first, _, last = value.partition("-")
                assert int(last) - int(first) + 1 == WORKER_PORTS
            else:
                assert value.isdigit()
        # Held while the harness waits for compose: no other process can take them.
        tcp = [p for p in _every_published() if p.protocol == "tcp" and not p.is_range]
        with socket.socket() as probe, pytest.raises(OSError):
            probe.bind(("127.0.0.1", int(moved.values[str(tcp[0].variable)])))
    finally:
        moved.release()
    # Released: compose can bind them.
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", int(moved.values[str(tcp[0].variable)])))


def test_a_published_port_no_variable_sets_fails_the_harness(tmp_path: Path) -> None:
    compose = tmp_path / "docker-compose.yml"
    compose.write_text(
        "services:\n"
        "  web:\n"
        "    ports:\n"
        "      - ${ZBUS_PUBLISH_HOST:-0.0.0.0}:${WEB_PORT:-8000}:8000/tcp\n"
        "      - 8080:8080\n"
    )
    with pytest.raises(AssertionError, match="8080:8080"):
        move_ports([compose])
