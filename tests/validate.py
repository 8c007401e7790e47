"""`make validate`: offline checks of the deploy files (no container engine needed).

Each check prints one line; the exit status is 1 when any check failed.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

from zbus.common.settings import ConfigError
from zbus.launcher import load_cluster

ROOT = Path(__file__).resolve().parents[1]


def check_local_cluster() -> str:
    specs = load_cluster(ROOT / "deploy" / "local-cluster.toml")
    ports = [s.admin_port for s in specs]
    if len(set(ports)) != len(ports):
        raise ConfigError("two services of the local cluster share an admin port")
    return f"{len(specs)} services"


CHECKS: dict[str, Callable[[], str]] = {
    "deploy/local-cluster.toml": check_local_cluster,
}


def main() -> int:
    failed = 0
    for name, check in CHECKS.items():
        try:
            print(f"ok    {name}: {check()}")
        except (ConfigError, OSError, ValueError) as exc:
            failed += 1
            print(f"FAIL  {name}: {exc}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
