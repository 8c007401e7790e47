"""An event bus run as a process of its own, for tests that measure its memory."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tests.support.waiting import UNIT

ROOT = Path(__file__).resolve().parents[2]


@contextmanager
def bus_process(
    data_dir: Path, settings: Mapping[str, str]
) -> Iterator[tuple[int, dict[str, Any]]]:
    """Start ``python -m zbus.eventbus`` on free ports with ``settings`` (``ZBUS_*``) and
    yield its pid and the endpoints it logged once ready; its log is read on in a thread,
    so that a full pipe never stalls the bus."""
    env = {**os.environ, "ZBUS_DATA_DIR": str(data_dir), "ZBUS_ARCHIVE": "false", **settings}
    proc = subprocess.Popen(
        [sys.executable, "-m", "zbus.eventbus", "--port", "0", "--admin-port", "0"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            entry = json.loads(line)
            if entry["msg"] == "service ready":
                endpoints: dict[str, Any] = entry["endpoints"]
                break
        else:
            raise AssertionError(f"event bus exited before it was ready: {proc.wait()}")
        threading.Thread(target=proc.stdout.read, daemon=True).start()
        yield proc.pid, endpoints
    finally:
        proc.terminate()
        proc.wait(timeout=30 * UNIT)


def memory_bytes(pid: int, field: str = "VmRSS") -> int:
    """A memory figure of process ``pid`` from /proc (``VmRSS`` now, ``VmHWM`` peak)."""
    status = Path(f"/proc/{pid}/status").read_text()
    match = re.search(rf"^{field}:\s+(\d+) kB$", status, re.MULTILINE)
    assert match is not None, status
    return int(match[1]) * 1024
