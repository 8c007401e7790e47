"""``python -m services.eventbus``: run the event bus."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from services.common.service import run as run_service
from services.eventbus.config import EventBusSettings
from services.eventbus.server import EventBusService


def run(argv: Sequence[str]) -> None:
    run_service(EventBusService, EventBusSettings, argv)


if __name__ == "__main__":
    run(sys.argv[1:])
