"""``python -m zbus.broker``: run the job broker."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from zbus.broker.server.config import BrokerSettings
from zbus.broker.server.service import BrokerService
from zbus.runtime.service import run as run_service


def run(argv: Sequence[str]) -> None:
    run_service(BrokerService, BrokerSettings, argv)


if __name__ == "__main__":
    run(sys.argv[1:])
