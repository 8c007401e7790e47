"""The launcher's state file, ``<state dir>/run/cluster.json``, and ``zbus down``.

The launcher rewrites the file (atomically) whenever a service changes state::

    {"launcher": 4242,                       # the launcher's pid
     "services": {"catalog": 4243, ...},     # the pid of each service running now
     "supervised": [                         # every service of the cluster file, in order
        {"name": "catalog", "admin": "http://127.0.0.1:8701", "state": "ready",
         "pid": 4243, "restarts": 0, "failed_starts": 0, "last_exit": null,
         "since": 1767225600.0}, ...],
     "updated": 1767225600.0}

``state`` is one of ``pending``, ``starting``, ``ready``, ``restarting``, ``given up``
and ``stopped``; ``last_exit`` says how the service's last process ended (``exit status
0``, ``killed by SIGKILL``) and ``since`` is the wall-clock time of its last change.
``zbus down`` reads the launcher's pid from it; the catalog reads the rest for its
``/api/v1/cluster`` (restart counts, given-up services), and so ``zbus status`` and the
dashboard show them.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from pathlib import Path
from typing import IO, Any

from zbus.launcher.procs import pid_alive

__all__ = ["read_pidfile", "stop_cluster", "write_state"]


def write_state(path: Path, content: dict[str, Any]) -> None:
    """Replace the state file with ``content``, atomically (a reader never sees half)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(content), encoding="utf-8")
    tmp.replace(path)


def read_pidfile(path: Path) -> dict[str, Any] | None:
    """The state file's content, or None when there is none (or not a launcher's)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or not isinstance(data.get("launcher"), int):
        return None
    return data


def stop_cluster(state_dir: Path, out: IO[str], timeout: float = 300.0) -> int:
    """``zbus down``: ask the launcher recorded in the state dir to stop, and wait for it."""
    pidfile = state_dir / "run" / "cluster.json"
    running = read_pidfile(pidfile)
    if running is None or not pid_alive(running["launcher"]):
        print("no zbus cluster is running", file=out)
        with contextlib.suppress(FileNotFoundError):
            pidfile.unlink()
        return 0
    pid = running["launcher"]
    with contextlib.suppress(ProcessLookupError):  # it ended meanwhile: stopped too
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while pid_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    if pid_alive(pid):
        print(f"the launcher (pid {pid}) did not stop within {timeout:g} s", file=out)
        return 1
    print("zbus cluster stopped", file=out)
    return 0
