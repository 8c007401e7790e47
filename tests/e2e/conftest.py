"""The images, built once per session as `make images` builds them, and a compose cluster."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import pytest

from tests.e2e.compose import ROOT, ComposeProject, docker
from tests.support.waiting import UNIT

# The images the test builds and runs: zbus's own names under a tag of their own, so a
# developer's `latest` images stay as they are. The base image and the wheelhouse are
# shared with `make images` (they are its cache).
TAG = "e2e"
IMAGES = {
    "ZBUS_IMAGE": f"zbus:{TAG}",
    "ZBUS_SPARK_IMAGE": f"zbus-spark:{TAG}",
    "ZBUS_PROMETHEUS_IMAGE": f"zbus-prometheus:{TAG}",
    "ZBUS_ETCD_IMAGE": f"zbus-etcd:{TAG}",
}


@pytest.fixture(scope="session")
def images(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """zbus's images, built by deploy/images.py (what `make images` runs)."""
    # No daemon is a failure, not a skip: the machines that run this suite have one.
    version = docker("version", "--format", "{{.Server.Version}}", timeout=30).strip()
    assert version, "the docker daemon did not answer"
    log = tmp_path_factory.mktemp("images") / "build.log"
    with log.open("w") as out:
        done = subprocess.run(
            [sys.executable, str(ROOT / "deploy" / "images.py"), "--tag", TAG],
            stdout=out,
            stderr=subprocess.STDOUT,
            timeout=1800 * UNIT,
            check=False,
        )
    lines = log.read_text().splitlines()
    assert done.returncode == 0, "deploy/images.py failed:\n" + "\n".join(lines[-60:])
    for image in IMAGES.values():
        docker("image", "inspect", image)
    return IMAGES


@pytest.fixture(scope="module")
def cluster(
    images: dict[str, str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ComposeProject]:
    """The whole compose cluster, up and healthy; taken down with its volumes after."""
    with ComposeProject(images, tmp_path_factory.mktemp("compose")).running() as project:
        yield project
