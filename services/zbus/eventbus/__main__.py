"""``python -m zbus.eventbus``: run the event bus."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from zbus.eventbus.server.config import EventBusSettings
from zbus.eventbus.server.service import EventBusService
from zbus.runtime.service import run as run_service


def run(argv: Sequence[str]) -> None:
    run_service(EventBusService, EventBusSettings, argv)


if __name__ == "__main__":
    run(sys.argv[1:])
