"""``python -m services.broker``: run the job broker."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from services.broker.config import BrokerSettings
from services.broker.server import BrokerService
from services.common.service import run as run_service


def run(argv: Sequence[str]) -> None:
    run_service(BrokerService, BrokerSettings, argv)


if __name__ == "__main__":
    run(sys.argv[1:])
