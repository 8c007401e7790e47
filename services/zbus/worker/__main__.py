"""``python -m zbus.worker``: run the worker service."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from zbus.worker.service import main


def run(argv: Sequence[str]) -> None:
    main(argv)


if __name__ == "__main__":
    run(sys.argv[1:])
