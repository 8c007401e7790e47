"""``python -m zbus.catalog``: run the catalog."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from zbus.catalog.server.config import CatalogSettings
from zbus.catalog.server.service import CatalogService
from zbus.runtime.service import run as run_service


def run(argv: Sequence[str]) -> None:
    run_service(CatalogService, CatalogSettings, argv)


if __name__ == "__main__":
    run(sys.argv[1:])
