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

import pytest

from tests.support.local_cluster import LocalCluster, local_cluster
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
def cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    with local_cluster(tmp_path, without=("sparkworker",)) as running:
        yield running


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


def test_the_readme_examples_run_against_the_local_cluster(cluster: LocalCluster) -> None:
    pubsub = readme_example("pubsub")
    assert "import zbus" in pubsub and "services" not in pubsub
    out = _run(cluster.moved(pubsub)).splitlines()
    assert out and out[-1].endswith("/sensors/t1 {'celsius': 21.5}")

    pppp = readme_example("pppp")
    out = _run(cluster.moved(pppp)).splitlines()
    assert out and out[-1].endswith("/orders/42 {'total': 9.5}")

    jobs = readme_example("jobs")
    out = _run(cluster.moved(jobs)).splitlines()
    assert out[0] == "['hello', 42]"
    assert out[1].startswith("failed:") and "on purpose" in out[1]
