"""The README's examples run as written against the local cluster that `make up` runs.

The cluster is the shipped deploy/local-cluster.toml started by `zbus up` (without the
sparkworker, which the examples do not use), with its ports moved to free ones so that
the test does not collide with a cluster already running here; the examples' endpoints
are moved the same way, and nothing else in them changes.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.local_cluster import local_cluster, moved
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


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[dict[int, int]]:
    names = ("catalog", "eventbus", "broker", "worker")
    with local_cluster(tmp_path, services=names) as running:
        for name in names:
            assert httpx.get(f"{running.admin(name)}/readyz").status_code == 200
        yield dict(running.ports)


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
    out = _run(moved(pubsub, cluster)).splitlines()
    assert out and out[-1].endswith("/sensors/t1 {'celsius': 21.5}")

    jobs = readme_example("jobs")
    out = _run(moved(jobs, cluster)).splitlines()
    assert out[0] == "['hello', 42]"
    assert out[1].startswith("failed:") and "on purpose" in out[1]
