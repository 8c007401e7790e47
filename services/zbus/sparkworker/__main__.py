"""``python -m zbus.sparkworker``: run the sparkworker (``zbus sparkworker``)."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from zbus.runtime.service import run as run_service
from zbus.sparkworker.config import SparkWorkerSettings
from zbus.sparkworker.service import SparkWorkerService


def run(argv: Sequence[str]) -> None:
    run_service(SparkWorkerService, SparkWorkerSettings, argv)


if __name__ == "__main__":
    run(sys.argv[1:])
