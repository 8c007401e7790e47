"""The README's examples run as written against the local cluster that `make up` runs.

The cluster is the shipped deploy/local-cluster.toml started by `zbus up` (without the
sparkworker, which the examples do not use), with its ports moved to free ones so that
the test does not collide with a cluster already running here; the examples' endpoints
are moved the same way, and nothing else in them changes.
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.bus import free_base_port, free_port
from tests.support.waiting import UNIT

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"


def readme_example(name: str) -> str:
    """The ```python block right after ``<!-- example: name -->`` in the README."""
    match = re.search(
        rf"<!-- example: {re.escape(name)} -->\s*```python\n(.*?)```", README.read_text(), re.S
    )
    assert match, f"README has no example {name!r}"
    return match.group(1)


def _port_map() -> dict[int, int]:
    bus = free_base_port()
    moved = {5556 + i: bus + i for i in range(4)}
    for port in (5246, 5560, 47291, 47290, 8701, 8702, 8703, 8705):
        moved[port] = free_port()
    return moved


def _moved(text: str, ports: dict[int, int]) -> str:
    return re.sub(r"\b(\d{4,5})\b", lambda m: str(ports.get(int(m[1]), m[1])), text)


def _cluster_file(tmp_path: Path, ports: dict[int, int]) -> Path:
    shipped = (ROOT / "deploy" / "local-cluster.toml").read_text()
    names = [s["name"] for s in tomllib.loads(shipped)["service"]]
    assert {"catalog", "eventbus", "broker", "worker"} <= set(names)
    blocks = shipped.split("[[service]]")
    kept = [blocks[0], *(b for b in blocks[1:] if 'name = "sparkworker"' not in b)]
    path = tmp_path / "cluster.toml"
    path.write_text(_moved("[[service]]".join(kept), ports))
    return path


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[dict[int, int]]:
    ports = _port_map()
    config = _cluster_file(tmp_path, ports)
    state = tmp_path / "state"
    launcher = subprocess.Popen(
        [sys.executable, "-m", "zbus", "up", "--config", str(config), "--state-dir", str(state)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert launcher.stdout is not None
        seen = []
        for line in launcher.stdout:
            seen.append(line)
            if "stops the cluster" in line:
                break
        else:
            pytest.fail("the cluster did not start:\n" + "".join(seen))
        for admin in (8701, 8702, 8703, 8705):
            assert httpx.get(f"http://127.0.0.1:{ports[admin]}/readyz").status_code == 200
        yield ports
    finally:
        if launcher.poll() is None:
            launcher.send_signal(signal.SIGTERM)
            launcher.wait(timeout=60 * UNIT)


def _run(code: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60 * UNIT,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_the_readme_examples_run_against_the_local_cluster(cluster: dict[int, int]) -> None:
    pubsub = readme_example("pubsub")
    assert "import zbus" in pubsub and "services" not in pubsub
    out = _run(_moved(pubsub, cluster)).splitlines()
    assert out and out[-1].endswith("/sensors/t1 {'celsius': 21.5}")

    pppp = readme_example("pppp")
    out = _run(_moved(pppp, cluster)).splitlines()
    assert out and out[-1].endswith("/orders/42 {'total': 9.5}")

    jobs = readme_example("jobs")
    out = _run(_moved(jobs, cluster)).splitlines()
    assert out[0] == "['hello', 42]"
    assert out[1].startswith("failed:") and "on purpose" in out[1]
