"""``python -m zbus.sparkworker``: run the sparkworker (``zbus sparkworker``).

PySpark takes a second or more to import: a SIGTERM in that time is kept (not fatal), and
the service starts and stops at once, gracefully, with exit status 0.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from zbus.runtime.signals import defer_stop_signals


def run(argv: Sequence[str]) -> None:
    defer_stop_signals()
    from zbus.runtime.service import run as run_service
    from zbus.sparkworker.config import SparkWorkerSettings
    from zbus.sparkworker.service import SparkWorkerService

    run_service(SparkWorkerService, SparkWorkerSettings, argv)


if __name__ == "__main__":
    run(sys.argv[1:])
