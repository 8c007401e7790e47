"""``python -m services.catalog``: run the catalog."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from services.catalog.config import CatalogSettings
from services.catalog.server import CatalogService
from services.common.service import run as run_service


def run(argv: Sequence[str]) -> None:
    run_service(CatalogService, CatalogSettings, argv)


if __name__ == "__main__":
    run(sys.argv[1:])
